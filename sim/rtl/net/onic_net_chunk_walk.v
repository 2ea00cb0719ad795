// OptimusNIC: card-memory address of each chunk in ring order (r-1, r-2, ..., r+1, r)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * A buffer of N chunks, chunk c at base + c x chunk_beats x 64 (each chunk starts on a 64-byte
 * beat). The reduce-scatter reads the local gradient and the all-gather receives the other
 * owners' parameters in the same order: chunk (r - 1 - k) mod N for k = 0, 1, ... (then chunk r,
 * the owner's, for the gradient). `addr` is the current chunk's address; `advance` moves to the
 * next (c - 1, from chunk 0 to chunk N - 1). After `start` the two products (r - 1 mod N) x
 * chunk_beats and N x chunk_beats are formed by shift and add, one bit of the 8-bit factor per
 * clock (no multiplier, one adder between registers); `ready` rises 10 clocks after `start`.
 * The arguments must be steady from start until ready.
 */
module onic_net_chunk_walk (
    input  wire          clk,
    input  wire          rst,

    input  wire          start,
    input  wire [63:0]   base,          // 64-byte aligned
    input  wire [7:0]    rank,          // r, 0 .. world - 1
    input  wire [7:0]    world,         // N, 2 .. 255
    input  wire [31:0]   chunk_beats,   // beats per chunk, >= 1

    input  wire          advance,       // pulse: the next chunk in ring order
    output wire          ready,
    output wire [63:0]   addr
);

    reg  [3:0]  phase_reg;      // 0: idle/ready, 1..8: multiplying, 9: sums
    reg  [7:0]  fa_reg, fb_reg; // factors, shifted right one bit per clock
    reg  [39:0] ma_reg, mb_reg; // chunk_beats shifted left one bit per clock
    reg  [39:0] pa_reg, pb_reg; // (r - 1) x chunk_beats, N x chunk_beats
    reg  [39:0] cur_reg;        // current chunk's beat offset
    reg  [39:0] step_reg;       // chunk_beats
    reg  [39:0] top_reg;        // (N - 1) x chunk_beats: chunk N - 1
    reg         at_zero_reg;    // the current chunk is chunk 0
    reg  [7:0]  chunk_reg;      // the current chunk
    reg  [63:0] addr_reg;
    reg         ready_reg;

    wire [7:0] prev_rank = (rank == 8'd0) ? world - 8'd1 : rank - 8'd1;

    always @(posedge clk) begin
        if (rst) begin
            phase_reg <= 4'd0;
            ready_reg <= 1'b0;
        end else if (start) begin
            phase_reg <= 4'd1;
            ready_reg <= 1'b0;
            fa_reg    <= prev_rank;
            fb_reg    <= world;
            ma_reg    <= {8'd0, chunk_beats};
            mb_reg    <= {8'd0, chunk_beats};
            pa_reg    <= 40'd0;
            pb_reg    <= 40'd0;
            step_reg  <= {8'd0, chunk_beats};
            chunk_reg <= prev_rank;
        end else if (phase_reg != 4'd0 && phase_reg != 4'd10) begin
            phase_reg <= phase_reg + 4'd1;
            if (phase_reg <= 4'd8) begin
                if (fa_reg[0]) pa_reg <= pa_reg + ma_reg;
                if (fb_reg[0]) pb_reg <= pb_reg + mb_reg;
                fa_reg <= fa_reg >> 1;
                fb_reg <= fb_reg >> 1;
                ma_reg <= ma_reg << 1;
                mb_reg <= mb_reg << 1;
            end else begin
                cur_reg     <= pa_reg;
                top_reg     <= pb_reg - step_reg;
                at_zero_reg <= chunk_reg == 8'd0;
            end
        end else if (phase_reg == 4'd10) begin
            phase_reg <= 4'd0;
            ready_reg <= 1'b1;
        end else if (advance) begin
            cur_reg     <= at_zero_reg ? top_reg : cur_reg - step_reg;
            chunk_reg   <= at_zero_reg ? world - 8'd1 : chunk_reg - 8'd1;
            at_zero_reg <= chunk_reg == 8'd1;
        end
    end

    // the address is a register: one add of the base after the offset moved
    always @(posedge clk) begin
        addr_reg <= {base[63:6], 6'd0} + {18'd0, cur_reg, 6'd0};
    end

    // ready waits one clock more for addr_reg to follow cur_reg
    reg ready_q;
    always @(posedge clk) begin
        ready_q <= rst ? 1'b0 : ready_reg && !advance && !start;
    end

    assign ready = ready_q && ready_reg;
    assign addr  = addr_reg;

    wire _unused_ok = &{1'b0, base[5:0], 1'b0};

endmodule

`resetall
