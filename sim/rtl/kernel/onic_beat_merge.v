// OptimusNIC: round-robin merge of an array's stripe streams into its beat stream
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Beat b of an array comes from stripe b % STRIPES (hls/layout.py), so the array's beat stream
 * is the stripes' streams taken in turn: one beat from stripe 0, one from stripe 1, ... The
 * turn waits for its stripe (order is data, never skipped). One beat per clock through a
 * register; `clear` starts the next run at stripe `start_turn` (0 for an array read whole, as
 * the Adam kernel reads; the network kernel's runs start at any beat g0 of a striped buffer:
 * g0 mod STRIPES). With one stripe it is a wire.
 */
module onic_beat_merge #(
    // stripes of the array (1 to 32)
    parameter integer STRIPES = 2
) (
    input  wire                   clk,
    input  wire                   rst,
    input  wire                   clear,
    input  wire [4:0]             start_turn,  // the first stripe of the run, < STRIPES; taken with clear

    /* one beat stream per stripe */
    input  wire [STRIPES*512-1:0] s_data,
    input  wire [STRIPES-1:0]     s_valid,
    output wire [STRIPES-1:0]     s_ready,

    /* the array's beats, in order */
    output wire [511:0]           m_data,
    output wire                   m_valid,
    input  wire                   m_ready
);

    initial begin
        if (STRIPES < 1 || STRIPES > 32) begin
            $error("STRIPES must be 1..32 (instance %m)");
            $finish;
        end
    end

    generate
        if (STRIPES == 1) begin : g_pass
            assign m_data  = s_data;
            assign m_valid = s_valid;
            assign s_ready = m_ready;
            wire _unused_ok = &{1'b0, clk, rst, clear, start_turn, 1'b0};
        end else begin : g_turns
            localparam integer TB = $clog2(STRIPES);
            localparam integer LAST_I = STRIPES - 1;
            localparam [TB-1:0] LAST = LAST_I[TB-1:0];

            wire [TB-1:0] first_turn = start_turn[TB-1:0];
            wire _unused_turn = &{1'b0, start_turn, 1'b0};

            reg  [TB-1:0] turn_reg;
            reg  [511:0]  out_data_reg;
            reg           out_valid_reg;

            wire take = s_valid[turn_reg] && (!out_valid_reg || m_ready);

            always @(posedge clk) begin
                if (take) begin
                    out_data_reg <= s_data[turn_reg * 512 +: 512];
                end
            end

            always @(posedge clk) begin
                if (rst || clear) begin
                    turn_reg      <= rst ? {TB{1'b0}} : first_turn;
                    out_valid_reg <= 1'b0;
                end else begin
                    if (m_ready) begin
                        out_valid_reg <= 1'b0;
                    end
                    if (take) begin
                        out_valid_reg <= 1'b1;
                        turn_reg      <= (turn_reg == LAST) ? {TB{1'b0}} : turn_reg + 1'b1;
                    end
                end
            end

            genvar k;
            for (k = 0; k < STRIPES; k = k + 1) begin : g_ready
                localparam [TB-1:0] KT = k;
                assign s_ready[k] = take && turn_reg == KT;
            end

            assign m_data  = out_data_reg;
            assign m_valid = out_valid_reg;
        end
    endgenerate

endmodule

`resetall
