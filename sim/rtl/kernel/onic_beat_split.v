// OptimusNIC: round-robin split of an array's beat stream into its stripe streams
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The inverse of onic_beat_merge: beat b of the array goes to stripe b % STRIPES, so each
 * stripe's write engine gets its beats in order. The turn waits for its stripe's engine. No
 * register: the data bus is shared by every stripe, valid and ready pass through the turn.
 * `clear` starts the next run at stripe `start_turn` (0 for an array written whole; a run of a
 * striped network buffer from beat g0: g0 mod STRIPES).
 */
module onic_beat_split #(
    // stripes of the array (1 to 32)
    parameter integer STRIPES = 2
) (
    input  wire                   clk,
    input  wire                   rst,
    input  wire                   clear,
    input  wire [4:0]             start_turn,  // the first stripe of the run, < STRIPES; taken with clear

    /* the array's beats, in order */
    input  wire [511:0]           s_data,
    input  wire                   s_valid,
    output wire                   s_ready,

    /* one beat stream per stripe (one data bus for all) */
    output wire [511:0]           m_data,
    output wire [STRIPES-1:0]     m_valid,
    input  wire [STRIPES-1:0]     m_ready
);

    initial begin
        if (STRIPES < 1 || STRIPES > 32) begin
            $error("STRIPES must be 1..32 (instance %m)");
            $finish;
        end
    end

    assign m_data = s_data;

    generate
        if (STRIPES == 1) begin : g_pass
            assign m_valid = s_valid;
            assign s_ready = m_ready;
            wire _unused_ok = &{1'b0, clk, rst, clear, start_turn, 1'b0};
        end else begin : g_turns
            localparam integer TB = $clog2(STRIPES);
            localparam integer LAST_I = STRIPES - 1;
            localparam [TB-1:0] LAST = LAST_I[TB-1:0];

            wire [TB-1:0] first_turn = start_turn[TB-1:0];
            wire _unused_turn = &{1'b0, start_turn, 1'b0};

            reg [TB-1:0] turn_reg;

            assign s_ready = m_ready[turn_reg];

            always @(posedge clk) begin
                if (rst || clear) begin
                    turn_reg <= rst ? {TB{1'b0}} : first_turn;
                end else if (s_valid && s_ready) begin
                    turn_reg <= (turn_reg == LAST) ? {TB{1'b0}} : turn_reg + 1'b1;
                end
            end

            genvar k;
            for (k = 0; k < STRIPES; k = k + 1) begin : g_valid
                localparam [TB-1:0] KT = k;
                assign m_valid[k] = s_valid && turn_reg == KT;
            end
        end
    endgenerate

endmodule

`resetall
