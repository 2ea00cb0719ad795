/*
 * OptimusNIC floating-point units: IEEE-754 binary16 -> binary32
 *
 * Exact widening. Normal values rebias the exponent (+112) and pad the
 * mantissa; fp16 subnormals become normal fp32 values by shifting their
 * mantissa up by its leading-zero count. NaN -> canonical 0x7FC00000.
 */

// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

module fp16_to_fp32 #(
    // 1: ce freezes the pipeline (the unit tests stall it); 0: ce is ignored and the
    // pipeline runs free, as onic_adam_lane uses it (no clock-enable net to fan out)
    parameter integer STALL = 1,
    // width of the pass-through tag that travels with each operand
    parameter integer TAG_WIDTH = 1
) (
    input  wire                 clk,
    input  wire                 rst,        // synchronous, active high: clears the valid pipeline only
    input  wire                 ce,         // clock enable: 0 freezes the whole pipeline

    input  wire                 in_valid,
    input  wire [15:0]          in_a,
    input  wire [TAG_WIDTH-1:0] in_tag,

    output wire                 out_valid,
    output wire [31:0]          out_y,
    output wire [TAG_WIDTH-1:0] out_tag
);

wire en = (STALL != 0) ? ce : 1'b1;

localparam integer LATENCY = 1;

wire       a_sign = in_a[15];
wire [4:0] a_exp = in_a[14:10];
wire [9:0] a_frac = in_a[9:0];

wire [3:0] frac_lz;  // 0..10; only used for subnormals (frac != 0)

fp_lzc #(
    .WIDTH(10),
    .COUNT_WIDTH(4)
) lzc_inst (
    .in_data(a_frac),
    .out_count(frac_lz)
);

// subnormal: value = frac * 2^-24; leading one at bit (9 - lz) gives exponent
// (9 - lz) - 24 + 127 = 112 - lz, and the bits below it form the fraction. Neither the shift
// nor the exponent goes through an adder: lz + 1 and 112 - lz as carry chains put the widen
// at 8 LUT levels from its input next to the lane's multiplier.
// (the leading one itself, bit 9 after the shift, is dropped: only the bits below it are kept)
wire [8:0] norm_frac = a_frac[8:0] << frac_lz;
wire [9:0] sub_frac = {norm_frac, 1'b0};
reg  [7:0] sub_exp;

always @* begin
    case (frac_lz)
        4'd0: sub_exp = 8'd112;
        4'd1: sub_exp = 8'd111;
        4'd2: sub_exp = 8'd110;
        4'd3: sub_exp = 8'd109;
        4'd4: sub_exp = 8'd108;
        4'd5: sub_exp = 8'd107;
        4'd6: sub_exp = 8'd106;
        4'd7: sub_exp = 8'd105;
        4'd8: sub_exp = 8'd104;
        default: sub_exp = 8'd103;  // 9 (a nonzero 10-bit fraction has at most 9 leading zeros)
    endcase
end

reg [31:0] y;

always @* begin
    if (a_exp == 5'h1f) begin
        y = (a_frac != 10'd0) ? 32'h7fc00000 : {a_sign, 8'hff, 23'd0};
    end else if (a_exp == 5'd0) begin
        y = (a_frac == 10'd0) ? {a_sign, 31'd0} : {a_sign, sub_exp, sub_frac, 13'd0};
    end else begin
        y = {a_sign, {3'd0, a_exp} + 8'd112, a_frac, 13'd0};
    end
end

reg [31:0] y_reg;

always @(posedge clk) begin
    if (en) begin
        y_reg <= y;
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
