/*
 * OptimusNIC floating-point units: IEEE-754 binary32 multiplier
 *
 * Round to nearest even, subnormal inputs and results kept:
 *   0. (UNPACK_STAGE = 1 only) unpack: special-case flags, mantissas and their
 *      leading-zero counts, registered
 *   1. unpack, normalise subnormal mantissas (leading-zero count, left shift,
 *      exponent goes below 1), add exponents, special cases
 *   2. 24 x 24 -> 48-bit mantissa product, first register (DSP); in parallel the
 *      result exponent, overflow flag and subnormal right shift for both places
 *      the product's leading one can land (bit 47 or 46)
 *   3. second product register (DSP output register)
 *   4. normalise (pick the bit-47 or bit-46 outcome), right shift with sticky bit
 *   5. round to nearest even and pack (the rounding carry runs into the
 *      exponent: subnormal -> normal and largest finite -> infinity)
 * Exponents are 11-bit two's complement: they range from -171 to 382.
 */

// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

module fp32_mul #(
    // 1: ce freezes the pipeline (the unit tests stall it); 0: ce is ignored and the
    // pipeline runs free, as onic_adam_lane uses it (no clock-enable net to fan out)
    parameter integer STALL = 1,
    // width of the pass-through tag that travels with each operand
    parameter integer TAG_WIDTH = 1,
    // 1: one more clock (LATENCY 6): the unpacked operands and their leading-zero counts are
    // registered before the exponent sum, for operands that arrive from a register through logic
    // the synthesizer folds into stage 1 (the bf16/fp16 lanes' widened gradient: 7 LUT levels
    // in one stage without it); 0: LATENCY 5
    parameter integer UNPACK_STAGE = 0
) (
    input  wire                 clk,
    input  wire                 rst,        // synchronous, active high: clears the valid pipeline only
    input  wire                 ce,         // clock enable: 0 freezes the whole pipeline

    input  wire                 in_valid,
    input  wire [31:0]          in_a,
    input  wire [31:0]          in_b,
    input  wire [TAG_WIDTH-1:0] in_tag,

    output wire                 out_valid,
    output wire [31:0]          out_y,
    output wire [TAG_WIDTH-1:0] out_tag
);

wire en = (STALL != 0) ? ce : 1'b1;

localparam integer LATENCY = 5 + (UNPACK_STAGE != 0 ? 1 : 0);

initial begin
    if (UNPACK_STAGE != 0 && UNPACK_STAGE != 1) begin
        $error("UNPACK_STAGE must be 0 or 1 (instance %m)");
        $finish;
    end
end

/* stage 0 (combinational, or registered with UNPACK_STAGE = 1): unpack, leading-zero counts */
wire [7:0]  u_a_exp = in_a[30:23];
wire [7:0]  u_b_exp = in_b[30:23];
wire        u_a_nan = (u_a_exp == 8'hff) && (in_a[22:0] != 23'd0);
wire        u_b_nan = (u_b_exp == 8'hff) && (in_b[22:0] != 23'd0);
wire        u_a_inf = (u_a_exp == 8'hff) && (in_a[22:0] == 23'd0);
wire        u_b_inf = (u_b_exp == 8'hff) && (in_b[22:0] == 23'd0);
wire        u_a_zero = in_a[30:0] == 31'd0;
wire        u_b_zero = in_b[30:0] == 31'd0;
wire        u_sign = in_a[31] ^ in_b[31];
wire [23:0] u_a_mant = {u_a_exp != 8'd0, in_a[22:0]};
wire [23:0] u_b_mant = {u_b_exp != 8'd0, in_b[22:0]};
wire [4:0]  u_a_lz;
wire [4:0]  u_b_lz;

fp_lzc #(
    .WIDTH(24),
    .COUNT_WIDTH(5)
) lzc_a_inst (
    .in_data(u_a_mant),
    .out_count(u_a_lz)
);

fp_lzc #(
    .WIDTH(24),
    .COUNT_WIDTH(5)
) lzc_b_inst (
    .in_data(u_b_mant),
    .out_count(u_b_lz)
);

// effective exponents (subnormals: 1)
wire [7:0]  u_a_eff = (u_a_exp == 8'd0) ? 8'd1 : u_a_exp;
wire [7:0]  u_b_eff = (u_b_exp == 8'd0) ? 8'd1 : u_b_exp;

localparam integer UW = 1 + 6 + 2 * 24 + 2 * 5 + 2 * 8;
wire [UW-1:0] u_bus = {u_sign, u_a_nan, u_b_nan, u_a_inf, u_b_inf, u_a_zero, u_b_zero,
                       u_a_mant, u_b_mant, u_a_lz, u_b_lz, u_a_eff, u_b_eff};
wire [UW-1:0] s0_bus;

generate
    if (UNPACK_STAGE != 0) begin : g_unpack_reg
        reg [UW-1:0] s0_reg;
        always @(posedge clk) begin
            if (en) begin
                s0_reg <= u_bus;
            end
        end
        assign s0_bus = s0_reg;
    end else begin : g_unpack_comb
        assign s0_bus = u_bus;
    end
endgenerate

/* stage 1: normalise subnormal inputs, exponent sum, special cases */
wire        sign, a_nan, b_nan, a_inf, b_inf, a_zero, b_zero;
wire [23:0] a_mant, b_mant;
wire [4:0]  a_lz, b_lz;
wire [7:0]  a_eff, b_eff;
assign {sign, a_nan, b_nan, a_inf, b_inf, a_zero, b_zero, a_mant, b_mant, a_lz, b_lz, a_eff, b_eff} = s0_bus;

// effective exponent minus the normalising shift, then the sum minus the bias
wire [10:0] a_exp_n = {3'd0, a_eff} - {6'd0, a_lz};
wire [10:0] b_exp_n = {3'd0, b_eff} - {6'd0, b_lz};
wire [10:0] prod_exp = a_exp_n + b_exp_n - 11'd127;

wire        spec = a_nan || b_nan || a_inf || b_inf || a_zero || b_zero;
wire [31:0] spec_y = (a_nan || b_nan || ((a_inf || b_inf) && (a_zero || b_zero))) ? 32'h7fc00000 :
                     (a_inf || b_inf) ? {sign, 8'hff, 23'd0} : {sign, 31'd0};

reg         s1_sign, s1_spec;
reg  [31:0] s1_spec_y;
reg  [10:0] s1_exp;
reg  [23:0] s1_a, s1_b;

/* stage 2: mantissa product (first DSP register); exponent outcomes for both product ranges */
wire [47:0] product = s1_a * s1_b;

// the product's leading one lands at bit 47 (exponent + 1) or bit 46; both outcomes are
// prepared here, in parallel with the multiplier, and stage 4 picks one
wire [10:0] exp_lo = s1_exp;           // leading one at bit 46
wire [10:0] exp_hi = s1_exp + 11'd1;   // leading one at bit 47
wire        tiny_lo = exp_lo[10] || (exp_lo == 11'd0);  // biased exponent < 1: subnormal result
wire        tiny_hi = exp_hi[10] || (exp_hi == 11'd0);
wire        huge_lo = !exp_lo[10] && (exp_lo >= 11'd255);
wire        huge_hi = !exp_hi[10] && (exp_hi >= 11'd255);
wire [10:0] tiny_shift_lo = 11'd1 - exp_lo;
wire [10:0] tiny_shift_hi = 11'd1 - exp_hi;
// 25 or more places leave nothing above the sticky bit: the result rounds to zero
wire [4:0]  shift_lo = !tiny_lo ? 5'd0 : (tiny_shift_lo > 11'd25) ? 5'd25 : tiny_shift_lo[4:0];
wire [4:0]  shift_hi = !tiny_hi ? 5'd0 : (tiny_shift_hi > 11'd25) ? 5'd25 : tiny_shift_hi[4:0];

reg         s2_sign, s2_spec, s2_huge_lo, s2_huge_hi;
reg  [31:0] s2_spec_y;
reg  [7:0]  s2_exp_lo, s2_exp_hi;  // exponent fields (0 for a subnormal result)
reg  [4:0]  s2_shift_lo, s2_shift_hi;
reg  [47:0] s2_prod;

/* stage 3: second product register (DSP output register) */
reg         s3_sign, s3_spec, s3_huge_lo, s3_huge_hi;
reg  [31:0] s3_spec_y;
reg  [7:0]  s3_exp_lo, s3_exp_hi;
reg  [4:0]  s3_shift_lo, s3_shift_hi;
reg  [47:0] s3_prod;

/* stage 4: normalise to a leading one at bit 47, right shift with sticky for a subnormal result */
wire        prod_top = s3_prod[47];
wire [47:0] prod_norm = prod_top ? s3_prod : {s3_prod[46:0], 1'b0};
wire [4:0]  res_shift = prod_top ? s3_shift_hi : s3_shift_lo;
wire [73:0] shift_wide = {prod_norm, 26'd0} >> res_shift;
wire [23:0] shifted_mant = shift_wide[73:50];
wire        guard = shift_wide[49];
wire        sticky = shift_wide[48:0] != 49'd0;

reg         s4_sign, s4_spec, s4_huge, s4_guard, s4_sticky;
reg  [31:0] s4_spec_y;
reg  [7:0]  s4_exp;
reg  [22:0] s4_frac;

/* stage 5: round to nearest even and pack */
wire        round_up = s4_guard && (s4_sticky || s4_frac[0]);
wire [30:0] rounded = {s4_exp, s4_frac} + {30'd0, round_up};
wire [31:0] result = s4_spec ? s4_spec_y :
                     s4_huge ? {s4_sign, 8'hff, 23'd0} :
                     {s4_sign, rounded};

reg  [31:0] y_reg;

always @(posedge clk) begin
    if (en) begin
        s1_sign <= sign;
        s1_spec <= spec;
        s1_spec_y <= spec_y;
        s1_exp <= prod_exp;
        s1_a <= a_mant << a_lz;
        s1_b <= b_mant << b_lz;

        s2_sign <= s1_sign;
        s2_spec <= s1_spec;
        s2_spec_y <= s1_spec_y;
        s2_huge_lo <= huge_lo;
        s2_huge_hi <= huge_hi;
        s2_exp_lo <= tiny_lo ? 8'd0 : exp_lo[7:0];
        s2_exp_hi <= tiny_hi ? 8'd0 : exp_hi[7:0];
        s2_shift_lo <= shift_lo;
        s2_shift_hi <= shift_hi;
        s2_prod <= product;

        s3_sign <= s2_sign;
        s3_spec <= s2_spec;
        s3_spec_y <= s2_spec_y;
        s3_huge_lo <= s2_huge_lo;
        s3_huge_hi <= s2_huge_hi;
        s3_exp_lo <= s2_exp_lo;
        s3_exp_hi <= s2_exp_hi;
        s3_shift_lo <= s2_shift_lo;
        s3_shift_hi <= s2_shift_hi;
        s3_prod <= s2_prod;

        s4_sign <= s3_sign;
        s4_spec <= s3_spec;
        s4_spec_y <= s3_spec_y;
        s4_huge <= prod_top ? s3_huge_hi : s3_huge_lo;
        // (a subnormal result has shifted its hidden bit away: exponent field 0)
        s4_exp <= !shifted_mant[23] ? 8'd0 : prod_top ? s3_exp_hi : s3_exp_lo;
        s4_frac <= shifted_mant[22:0];
        s4_guard <= guard;
        s4_sticky <= sticky;

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
