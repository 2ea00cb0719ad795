/*
 * OptimusNIC floating-point units: IEEE-754 binary32 -> bfloat16
 *
 * Round to nearest even on the top 16 bits: add 0x7FFF plus the kept LSB to the
 * fp32 pattern and truncate. A carry out of the mantissa moves into the exponent,
 * so the largest finite values round to infinity exactly as IEEE requires.
 * NaN -> canonical 0x7FC0 (a NaN whose payload sits only in the low 16 bits
 * would otherwise truncate to infinity).
 */

// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

module fp32_to_bf16 #(
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
    input  wire [31:0]          in_a,
    input  wire [TAG_WIDTH-1:0] in_tag,

    output wire                 out_valid,
    output wire [15:0]          out_y,
    output wire [TAG_WIDTH-1:0] out_tag
);

wire en = (STALL != 0) ? ce : 1'b1;

localparam integer LATENCY = 1;

wire a_nan = (in_a[30:23] == 8'hff) && (in_a[22:0] != 23'd0);
// round up when above half, or exactly half and the kept LSB is odd
wire round_up = in_a[15] && ((in_a[14:0] != 15'd0) || in_a[16]);

reg [15:0] y_reg;

always @(posedge clk) begin
    if (en) begin
        // infinities have zero low bits, so they pass unchanged
        y_reg <= a_nan ? 16'h7fc0 : in_a[31:16] + {15'd0, round_up};
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
