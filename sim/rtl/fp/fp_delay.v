/*
 * OptimusNIC floating-point units: valid / tag delay line
 *
 * Carries in_valid (reset) and in_tag (no reset) through DEPTH clock-enabled
 * registers, so every FP unit keeps its control path in one place.
 */

// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

module fp_delay #(
    // width of the pass-through tag
    parameter integer TAG_WIDTH = 1,
    // number of ce-enabled clocks from input to output (>= 1)
    parameter integer DEPTH = 1
) (
    input  wire                 clk,
    input  wire                 rst,
    input  wire                 ce,

    input  wire                 in_valid,
    input  wire [TAG_WIDTH-1:0] in_tag,

    output wire                 out_valid,
    output wire [TAG_WIDTH-1:0] out_tag
);

initial begin
    if (DEPTH < 1) begin
        $error("Error: DEPTH must be at least 1 (instance %m)");
        $finish;
    end
end

reg [DEPTH-1:0]     valid_reg;
reg [TAG_WIDTH-1:0] tag_reg[0:DEPTH-1];

integer i;

always @(posedge clk) begin
    if (ce) begin
        valid_reg[0] <= in_valid;
        tag_reg[0] <= in_tag;
        for (i = 1; i < DEPTH; i = i + 1) begin
            valid_reg[i] <= valid_reg[i-1];
            tag_reg[i] <= tag_reg[i-1];
        end
    end
    if (rst) begin
        valid_reg <= {DEPTH{1'b0}};
    end
end

assign out_valid = valid_reg[DEPTH-1];
assign out_tag = tag_reg[DEPTH-1];

endmodule

`resetall
