// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Leading-zero count of a 24-bit significand (combinational), used by fp32_div and fp32_sqrt
 * to normalize subnormal inputs to [1, 2). An all-zero input counts 24.
 */
module fp_divsqrt_lzc24 (
    input  wire [23:0] in_x,
    output reg  [4:0]  out_count
);

    integer i;

    // Scanning from the LSB up, the last set bit seen is the most significant one.
    always @* begin
        out_count = 5'd24;
        for (i = 0; i < 24; i = i + 1) begin
            if (in_x[i]) begin
                out_count = 5'd23 - i[4:0];
            end
        end
    end

endmodule

`resetall
