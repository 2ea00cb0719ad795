// OptimusNIC: the rounds of a flow in round-major order (sizes of each round's runs)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Round-major order (docs/design.md 8.2, `hls.net.wire.seq_of`): a flow of P packets per hop
 * with a segment of B packets goes in rounds; round q holds packets q B .. q B + B - 1 of every
 * hop (the rest, P - q B, in the last round), hop by hop. B = P is hop-major order: one round.
 * This block follows one consumer through the rounds of a chunk: after `start` it describes
 * round 0, after each `next` the round after. Per round (valid while `ready`): its packets per
 * hop (`bq`), `fwd` = bq x (N - 2) (the packets a card forwards in it), whether it is the last
 * round, where it starts in the chunk (beats, elements) and how long a run of it is (beats and
 * bytes: a hop's packets of the round, the chunk's rest in the last round). Each round is sized in
 * two clocks after start/next (one subtraction or compare per stage, and the 8-bit product).
 * The arguments must be steady from start until the last round.
 */
module onic_net_rounds (
    input  wire          clk,
    input  wire          rst,

    input  wire          start,          // pulse: round 0
    input  wire          next,           // pulse: the next round (only while ready)
    input  wire [31:0]   cfg_packets,    // P: packets per hop, >= 1
    input  wire [31:0]   cfg_seg,        // B: packets per round, 1 .. P
    input  wire [31:0]   cfg_seg_beats,  // B x beats per packet
    input  wire [31:0]   cfg_seg_elems,  // B x elements per packet
    input  wire [31:0]   cfg_chunk_beats,
    input  wire [31:0]   cfg_chunk_bytes,
    input  wire [7:0]    cfg_fwd_hops,   // N - 2: hops a card forwards

    output wire          ready,
    output wire          last,           // this round is the last
    output wire [31:0]   bq,
    output wire [31:0]   fwd,
    output wire [31:0]   off_beats,
    output wire [31:0]   off_elems,
    output wire [31:0]   run_beats,
    output wire [31:0]   run_bytes
);

    reg  [31:0] left_reg;        // P - q B
    reg  [31:0] off_beats_reg, off_elems_reg;
    reg  [31:0] rem_beats_reg, rem_bytes_reg;
    reg  [31:0] bq_reg, fwd_reg, run_beats_reg, run_bytes_reg;
    reg         final_reg;
    reg  [1:0]  calc_reg;        // stages left; 0: ready
    reg         ready_reg;

    always @(posedge clk) begin
        if (rst) begin
            calc_reg  <= 2'd0;
            ready_reg <= 1'b0;
        end else if (start) begin
            left_reg      <= cfg_packets;
            off_beats_reg <= 32'd0;
            off_elems_reg <= 32'd0;
            calc_reg      <= 2'd2;
            ready_reg     <= 1'b0;
        end else if (next && ready_reg) begin
            left_reg      <= left_reg - cfg_seg;
            off_beats_reg <= off_beats_reg + cfg_seg_beats;
            off_elems_reg <= off_elems_reg + cfg_seg_elems;
            calc_reg      <= 2'd2;
            ready_reg     <= 1'b0;
        end else if (calc_reg == 2'd2) begin
            final_reg     <= left_reg <= cfg_seg;
            bq_reg        <= (left_reg <= cfg_seg) ? left_reg : cfg_seg;
            rem_beats_reg <= cfg_chunk_beats - off_beats_reg;
            rem_bytes_reg <= cfg_chunk_bytes - {off_beats_reg[25:0], 6'd0};
            calc_reg      <= 2'd1;
        end else if (calc_reg == 2'd1) begin
            fwd_reg       <= bq_reg * {24'd0, cfg_fwd_hops};
            run_beats_reg <= final_reg ? rem_beats_reg : cfg_seg_beats;
            run_bytes_reg <= final_reg ? rem_bytes_reg : {cfg_seg_beats[25:0], 6'd0};
            calc_reg      <= 2'd0;
            ready_reg     <= 1'b1;
        end
    end

    assign ready     = ready_reg;
    assign last      = final_reg;
    assign bq        = bq_reg;
    assign fwd       = fwd_reg;
    assign off_beats = off_beats_reg;
    assign off_elems = off_elems_reg;
    assign run_beats = run_beats_reg;
    assign run_bytes = run_bytes_reg;

    wire _unused_ok = &{1'b0, cfg_seg_beats[31:26], off_beats_reg[31:26], 1'b0};

endmodule

`resetall
