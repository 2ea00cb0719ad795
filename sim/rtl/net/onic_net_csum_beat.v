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
 * Three register stages, a beat per clock, no back-pressure:
 * - stage 1 masks the words and adds them in pairs (one adder level: the retransmit buffer's
 *   payload source mux lies in front of it in the kernel top), and registers s_extra;
 * - stage 2 applies the enables (s_sum_data, s_sum_extra: a stage late, so that a user's
 *   handshake, valid, ready, a slot check, is not in front of stage 1's adders either) and adds
 *   the sixteen pairs in two levels of two-input sums, to four;
 * - stage 3 adds the four and the extra word.
 * Why three: with the sixteen pairs and the extra word summed in one stage, yosys (0.23) merges
 * the tree into one multi-operand sum of full-adder LUTs, 7 LUT levels in the kernel top (goal
 * 6; sim/rtl/net/README.md, Packaging). `keep` on the first level's wires holds it as two-input
 * adders (yosys honours it on that level only), so stage 2 is two adder levels; stage 3's five
 * operands, one merged sum, are not the top's longest path (session 14: 6 levels, elsewhere).
 * m_sum and m_valid are registers. Used by the receive parser (onic_net_rx_parse) and each
 * flow's retransmit buffer (onic_net_tx_retx).
 */
module onic_net_csum_beat (
    input  wire          clk,
    input  wire          rst,

    input  wire [511:0]  s_data,     // frame byte i of the beat at [8i +: 8]
    input  wire [63:0]   s_keep,     // bytes summed (1) or taken as zero (0)
    input  wire [16:0]   s_extra,    // added to the beat's sum (pseudo-header words)
    input  wire          s_sum_data, // the beat's kept words count (else the beat adds 0)
    input  wire          s_sum_extra,// s_extra counts (else it adds 0)
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

    reg [16:0] g_reg [0:15];  // stage 1: two words each
    reg [16:0] x_reg;
    reg        sd_reg, sx_reg;   // the enables, applied at stage 2
    reg        v1_reg;
    reg [18:0] q_reg [0:3];   // stage 2: eight words each
    reg [16:0] x2_reg;        // s_extra, or 0 when not enabled
    reg        v2_reg;
    reg [21:0] sum_reg;       // stage 3
    reg        v3_reg;

    // stage 2's terms: the pairs, each zero when not enabled
    wire [18:0] t [0:15];
    genvar i;
    generate
        for (i = 0; i < 16; i = i + 1) begin : g_term
            assign t[i] = {2'd0, g_reg[i] & {17{sd_reg}}};
        end
    endgenerate

    // the pairs of pairs (l1, `keep`: two-input adders in yosys), then their pairs (l2)
    (* keep *) wire [18:0] l1 [0:7];
    wire [18:0] l2 [0:3];
    generate
        for (i = 0; i < 8; i = i + 1) begin : g_l1
            assign l1[i] = t[2*i] + t[2*i + 1];
        end
        for (i = 0; i < 4; i = i + 1) begin : g_l2
            assign l2[i] = l1[2*i] + l1[2*i + 1];
        end
    endgenerate

    integer g;
    always @(posedge clk) begin
        for (g = 0; g < 16; g = g + 1) begin
            g_reg[g] <= {1'b0, word(s_data, s_keep, 2*g)} + {1'b0, word(s_data, s_keep, 2*g + 1)};
        end
        x_reg   <= s_extra;
        sd_reg  <= s_sum_data;
        sx_reg  <= s_sum_extra;
        for (g = 0; g < 4; g = g + 1) begin
            q_reg[g] <= l2[g];
        end
        x2_reg  <= x_reg & {17{sx_reg}};
        sum_reg <= {3'd0, q_reg[0]} + {3'd0, q_reg[1]} + {3'd0, q_reg[2]} + {3'd0, q_reg[3]} + {5'd0, x2_reg};
        v1_reg  <= !rst && s_valid;
        v2_reg  <= !rst && v1_reg;
        v3_reg  <= !rst && v2_reg;
    end

    assign m_sum   = sum_reg;
    assign m_valid = v3_reg;

endmodule

`resetall
