// OptimusNIC: onic_stripe_beats for 1 to 8 stripes of 4- and 2-byte elements side by side (test only)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Sixteen onic_stripe_beats on one `n`, so one simulation checks every stripe count a target
 * uses against hls/layout.py. Outputs are concatenated: for ELEM_BYTES 4 then 2, for STRIPES
 * 1 to 8, that instance's stripes in order; the instance (e, s) starts at stripe
 * e * 36 + s * (s - 1) / 2 (32 bits of `beats`, 7 bits of `last_bytes` per stripe).
 */
module onic_stripe_beats_all (
    input  wire           clk,
    input  wire [31:0]    n,
    output wire [72*32-1:0] beats,
    output wire [72*7-1:0]  last_bytes
);

    genvar e, s;
    generate
        for (e = 0; e < 2; e = e + 1) begin : g_elem
            for (s = 1; s <= 8; s = s + 1) begin : g_stripes
                localparam integer FIRST = e * 36 + s * (s - 1) / 2;
                onic_stripe_beats #(
                    .STRIPES(s),
                    .ELEM_BYTES(e == 0 ? 4 : 2)
                ) count_inst (
                    .clk(clk),
                    .n(n),
                    .beats(beats[32*FIRST +: 32*s]),
                    .last_bytes(last_bytes[7*FIRST +: 7*s])
                );
            end
        end
    endgenerate

endmodule

`resetall
