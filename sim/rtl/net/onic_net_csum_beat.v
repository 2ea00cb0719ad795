// OptimusNIC: one's-complement word sum of a 512-bit beat (the UDP checksum's adder tree)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The plain (unfolded) sum of a beat's 32 big-endian 16-bit words, bytes whose TKEEP bit is 0
 * counted as zero, plus `s_extra`: the UDP checksum's per-beat part (RFC 768, RFC 1071). The
 * end-around carry is left to the consumer, which accumulates a frame's beats and folds once:
 * a sum of 16-bit words is congruent to its folded value modulo 0xFFFF.
 * Two register stages, a beat per clock, no back-pressure: stage 1 masks the words and adds them
 * in eight groups of four (s_extra joins group 0), stage 2 adds the eight groups; m_sum and
 * m_valid are registers. Used by the receive parser (onic_net_rx_parse) and each flow's
 * retransmit buffer (onic_net_tx_retx).
 */
module onic_net_csum_beat (
    input  wire          clk,
    input  wire          rst,

    input  wire [511:0]  s_data,     // frame byte i of the beat at [8i +: 8]
    input  wire [63:0]   s_keep,     // bytes summed (1) or taken as zero (0)
    input  wire [16:0]   s_extra,    // added to the beat's sum (pseudo-header words)
    input  wire          s_valid,

    output wire [21:0]   m_sum,      // 32 x 0xFFFF + 0x1FFFF at most
    output wire          m_valid
);

    // word w: frame bytes 2w (high) and 2w + 1 (low), each kept or zero
    function [15:0] word;
        input [511:0] d;
        input [63:0]  k;
        input integer w;
        begin
            word = {d[16*w +: 8] & {8{k[2*w]}}, d[16*w + 8 +: 8] & {8{k[2*w + 1]}}};
        end
    endfunction

    reg [18:0] g_reg [0:7];   // stage 1: four words each (group 0 also s_extra)
    reg        v1_reg;
    reg [21:0] sum_reg;       // stage 2
    reg        v2_reg;

    integer g;
    always @(posedge clk) begin
        for (g = 0; g < 8; g = g + 1) begin
            g_reg[g] <= {3'd0, word(s_data, s_keep, 4*g)} + {3'd0, word(s_data, s_keep, 4*g + 1)}
                      + {3'd0, word(s_data, s_keep, 4*g + 2)} + {3'd0, word(s_data, s_keep, 4*g + 3)}
                      + (g == 0 ? {2'd0, s_extra} : 19'd0);
        end
        sum_reg <= (({3'd0, g_reg[0]} + {3'd0, g_reg[1]}) + ({3'd0, g_reg[2]} + {3'd0, g_reg[3]}))
                 + (({3'd0, g_reg[4]} + {3'd0, g_reg[5]}) + ({3'd0, g_reg[6]} + {3'd0, g_reg[7]}));
        v1_reg  <= !rst && s_valid;
        v2_reg  <= !rst && v1_reg;
    end

    assign m_sum   = sum_reg;
    assign m_valid = v2_reg;

endmodule

`resetall
