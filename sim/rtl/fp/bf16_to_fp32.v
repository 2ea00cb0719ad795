/*
 * OptimusNIC floating-point units: bfloat16 -> IEEE-754 binary32
 *
 * Exact widening: the bf16 pattern is the top half of the fp32 pattern. NaNs
 * (quiet or signalling) become the canonical quiet NaN 0x7FC00000.
 */

// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

module bf16_to_fp32 #(
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

wire a_nan = (in_a[14:7] == 8'hff) && (in_a[6:0] != 7'd0);

reg [31:0] y_reg;

always @(posedge clk) begin
    if (en) begin
        y_reg <= a_nan ? 32'h7fc00000 : {in_a, 16'h0000};
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
