/*
 * OptimusNIC floating-point units: square of a binary32 value as a binary64 value, exact
 *
 * The ring's sum of squares (onic_net_sumsq) squares each reduced fp32 element in float64:
 * a 24 x 24-bit significand product has at most 48 bits, and the exponent of the square of
 * any fp32 value (2^-298 .. 2^256) is normal in float64, so nothing is rounded.
 *   1. unpack: significand (no hidden bit for subnormals, exponent 1), special cases
 *   2. 24 x 24 -> 48-bit product (a DSP48E2 with its M register)
 *   3. leading-zero count of the product (subnormal inputs put the leading one low)
 *   4. normalise (left shift) and pack: exponent = msb + 2 e + 723 (biases 127 and 1023)
 * The sign is always +. +-inf -> +inf, any NaN -> the canonical 0x7FF8000000000000.
 */

// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

module fp32_sq_f64 #(
    // 1: ce freezes the pipeline (the unit test stalls it); 0: ce is ignored, the pipeline runs free
    parameter integer STALL = 1,
    // width of the pass-through tag that travels with each operand
    parameter integer TAG_WIDTH = 1
) (
    input  wire                 clk,
    input  wire                 rst,        // synchronous, active high: clears the valid pipeline only
    input  wire                 ce,         // clock enable: 0 freezes the whole pipeline

    input  wire                 in_valid,
    input  wire [31:0]          in_a,
    input  wire [TAG_WIDTH-1:0] in_tag,

    output wire                 out_valid,
    output wire [63:0]          out_y,
    output wire [TAG_WIDTH-1:0] out_tag
);

wire en = (STALL != 0) ? ce : 1'b1;

localparam integer LATENCY = 4;

/* stage 1: unpack */
wire [7:0]  a_exp = in_a[30:23];
wire        a_max = a_exp == 8'hff;
wire        a_nan = a_max && (in_a[22:0] != 23'd0);

reg         s1_spec;
reg  [63:0] s1_spec_y;
reg  [7:0]  s1_exp;
reg  [23:0] s1_mant;

/* stage 2: product */
reg         s2_spec;
reg  [63:0] s2_spec_y;
reg  [7:0]  s2_exp;
reg  [47:0] s2_prod;

/* stage 3: leading-zero count */
wire [5:0]  prod_lz;

fp_lzc #(
    .WIDTH(48),
    .COUNT_WIDTH(6)
) lzc_inst (
    .in_data(s2_prod),
    .out_count(prod_lz)
);

reg         s3_spec, s3_zero;
reg  [63:0] s3_spec_y;
reg  [10:0] s3_exp;
reg  [5:0]  s3_lz;
reg  [47:0] s3_prod;

// the leading one at bit 47 - lz: 2^(47 - lz) x 2^(2 (e - 127) - 46) -> biased 47 - lz + 2 e + 723
wire [10:0] exp_base = {2'd0, s2_exp, 1'b0} + 11'd770;

/* stage 4: normalise and pack */
wire [47:0] shifted = s3_prod << s3_lz;
wire [63:0] result = s3_spec ? s3_spec_y :
                     s3_zero ? 64'd0 :
                     {1'b0, s3_exp, shifted[46:0], 5'd0};

reg  [63:0] y_reg;

// the sign squares away; the leading one (bit 47 after the shift) is the hidden bit
wire _unused_ok = &{1'b0, in_a[31], shifted[47], 1'b0};

always @(posedge clk) begin
    if (en) begin
        s1_spec <= a_max;
        s1_spec_y <= a_nan ? 64'h7ff8000000000000 : 64'h7ff0000000000000;
        s1_exp <= (a_exp == 8'd0) ? 8'd1 : a_exp;
        s1_mant <= {a_exp != 8'd0, in_a[22:0]};

        s2_spec <= s1_spec;
        s2_spec_y <= s1_spec_y;
        s2_exp <= s1_exp;
        s2_prod <= s1_mant * s1_mant;

        s3_spec <= s2_spec;
        s3_spec_y <= s2_spec_y;
        s3_zero <= s2_prod == 48'd0;
        s3_exp <= exp_base - {5'd0, prod_lz};
        s3_lz <= prod_lz;
        s3_prod <= s2_prod;

        y_reg <= result;
    end
end

assign out_y = y_reg;

fp_delay #(
    .TAG_WIDTH(TAG_WIDTH),
    .DEPTH(LATENCY)
) ctl_inst (
    .clk(clk),
    .rst(rst),
    .ce(en),
    .in_valid(in_valid),
    .in_tag(in_tag),
    .out_valid(out_valid),
    .out_tag(out_tag)
);

endmodule

`resetall
