/*
 * OptimusNIC floating-point units: leading-zero counter
 *
 * Combinational priority encoder: out_count = number of zeros above the most
 * significant set bit of in_data (WIDTH when in_data is zero).
 */

// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

module fp_lzc #(
    // width of the input vector
    parameter integer WIDTH = 24,
    // width of the count (must hold the value WIDTH)
    parameter integer COUNT_WIDTH = 5
) (
    input  wire [WIDTH-1:0]       in_data,
    output wire [COUNT_WIDTH-1:0] out_count
);

initial begin
    if ((1 << COUNT_WIDTH) <= WIDTH) begin
        $error("Error: COUNT_WIDTH too small for WIDTH (instance %m)");
        $finish;
    end
end

reg [COUNT_WIDTH-1:0] count;
reg [COUNT_WIDTH-1:0] zeros_above;  // zeros above bit i while scanning upward
integer i;

// Scan from the LSB up: the last set bit seen is the most significant one.
always @* begin
    count = {COUNT_WIDTH{1'b0}};
    zeros_above = {COUNT_WIDTH{1'b0}};
    // zeros_above starts at WIDTH-1 for bit 0 and counts down
    for (i = 0; i < WIDTH - 1; i = i + 1) begin
        zeros_above = zeros_above + 1'b1;
    end
    count = zeros_above + 1'b1;  // WIDTH: no bit set
    for (i = 0; i < WIDTH; i = i + 1) begin
        if (in_data[i]) begin
            count = zeros_above;
        end
        zeros_above = zeros_above - 1'b1;
    end
end

assign out_count = count;

endmodule

`resetall
