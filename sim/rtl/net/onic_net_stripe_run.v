// OptimusNIC: a run of beats of a striped network buffer, per stripe: address and beat count
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The network kernel's local-gradient and gathered-parameter buffers follow hls/layout.py's one
 * rule over the whole buffer (N chunks, chunk c from beat c x chunk_beats): beat b is on stripe
 * b mod STRIPES at index b / STRIPES, stripe k at base k (cfg_base[k x 64 +: 64], 64-byte
 * aligned). For the run of beats [first, first + beats) this block gives each stripe's part,
 * with s = log2(STRIPES) (hls.layout.run_stripes, bit for bit):
 *
 *   index of its first beat  f_k = (first + STRIPES - 1 - k) >> s   (= ceil((first - k) / STRIPES))
 *   its beats                n_k = ((first + beats + STRIPES - 1 - k) >> s) - f_k   (0 for a short run)
 *   address                  cfg_base[k] + f_k x 64
 *
 * and the stripe of the run's first beat (`turn` = first mod STRIPES, onic_beat_merge's and
 * onic_beat_split's start turn) and of its last (`last` = (first + beats - 1) mod STRIPES, the
 * one whose last beat may be partial). STRIPES is a power of two (1, 2, 4 or 8): a mask and a
 * shift, no divider, one adder between registers. The outputs are registers that follow the
 * inputs held steady for LATENCY = 3 clocks (a user waits that long after changing them).
 */
module onic_net_stripe_run #(
    // stripes of the buffer: 1, 2, 4 or 8
    parameter integer STRIPES = 2
) (
    input  wire                    clk,

    input  wire [STRIPES*64-1:0]   cfg_base,   // stripe k's base at [k*64 +: 64]
    input  wire [31:0]             first,      // the run's first beat within the buffer
    input  wire [31:0]             beats,      // the run's beats

    output wire [STRIPES*64-1:0]   addr,       // stripe k's first byte of the run at [k*64 +: 64]
    output wire [STRIPES*32-1:0]   count,      // stripe k's beats of the run at [k*32 +: 32]
    output wire [2:0]              turn,       // first mod STRIPES
    output wire [2:0]              last        // (first + beats - 1) mod STRIPES
);

    localparam integer SB = (STRIPES >= 8) ? 3 : (STRIPES >= 4) ? 2 : (STRIPES >= 2) ? 1 : 0;
    localparam [31:0]  MASK = STRIPES - 1;

    initial begin
        if (STRIPES != 1 && STRIPES != 2 && STRIPES != 4 && STRIPES != 8) begin
            $error("STRIPES must be 1, 2, 4 or 8 (instance %m)");
            $finish;
        end
    end

    reg  [31:0] g0_reg, ge_reg;       // stage 1: first, first + beats
    reg  [2:0]  turn1_reg, turn2_reg, last2_reg;
    reg  [2:0]  turn_reg, last_reg;

    always @(posedge clk) begin
        g0_reg    <= first;
        ge_reg    <= first + beats;
        turn1_reg <= first[2:0] & MASK[2:0];
        turn2_reg <= turn1_reg;
        last2_reg <= (ge_reg[2:0] - 3'd1) & MASK[2:0];
        turn_reg  <= turn2_reg;
        last_reg  <= last2_reg;
    end

    genvar k;
    generate
        for (k = 0; k < STRIPES; k = k + 1) begin : g_stripe
            localparam [31:0] UP = STRIPES - 1 - k;
            reg  [31:0] f_reg, e_reg;     // stage 2: first and end index in stripe k
            reg  [31:0] n_reg;            // stage 3: beats
            reg  [63:0] a_reg;            // stage 3: address
            wire [31:0] f_sum = g0_reg + UP;
            wire [31:0] e_sum = ge_reg + UP;
            always @(posedge clk) begin
                f_reg <= f_sum >> SB;
                e_reg <= e_sum >> SB;
                n_reg <= e_reg - f_reg;
                a_reg <= {cfg_base[k*64+6 +: 58], 6'd0} + {26'd0, f_reg, 6'd0};
            end
            assign addr[k*64 +: 64]  = a_reg;
            assign count[k*32 +: 32] = n_reg;
            wire _unused_stripe = &{1'b0, cfg_base[k*64 +: 6], 1'b0};
        end
    endgenerate

    assign turn = turn_reg;
    assign last = last_reg;

endmodule

`resetall
