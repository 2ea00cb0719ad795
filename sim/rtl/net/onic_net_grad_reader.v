// OptimusNIC: the rank's local gradient, read from card memory in ring-schedule order
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * After `start`, delivers the local gradient in ring-schedule order, round by round (design.md
 * 8.2): round q is a run of the same beats, [q x R, q x R + R) of every chunk (the chunk's rest
 * in its last round; R = `cfg_run_beats`, the round's packets x beats per packet), of chunks
 * (r - 1), (r - 2), ..., (r - N + 1) mod N (reduce-scatter hops 0 .. N - 2) and then chunk r (the
 * owner's last addition). R >= the chunk's beats is one round: hop-major order, each chunk whole.
 * TLAST on every run's last beat; `m_tchunk_last` with it when the run ends its chunk (the last
 * round).
 *
 * The gradient buffer is STRIPES stripes (hls/layout.py's rule over the WHOLE buffer: chunk c
 * from beat c x chunk_beats, beat b on stripe b mod STRIPES at index b / STRIPES, stripe k at
 * cfg_grad_addr[k x 64 +: 64]; every chunk starts on a beat; with the bf16 wire and S / 16 odd
 * the host pads each chunk's last beat). STRIPES = 1 is one buffer, chunk c at grad_addr +
 * c x chunk_beats x 64. Ring reads and the host's DMA writes of the same buffer together exceed
 * one HBM pseudo-channel, so sizing plans several (hls.ring_plan, a power of two). A run of
 * beats [g0, g0 + R) starts one onic_axi_rd per stripe at that stripe's first index and count
 * (onic_net_stripe_run: a mask and a shift); a stripe with no beat in the run is not started
 * (its engine stays idle; its FIFO holds nothing the run takes: the merge never turns to it).
 * onic_beat_merge takes the stripes' beats round robin from stripe g0 mod STRIPES. Each FIFO
 * prefetches up to 2^(FIFO_LOG2 - log2 STRIPES) beats (at least MAX_BURST) ahead of the
 * consumer: each stripe carries 1 / STRIPES of the beats. The next run starts when the last beat
 * of the current one has been taken (the engines' FIFOs clear on start): one memory round trip
 * per run without beats, which the receive side's buffer absorbs (runs of a round-major order
 * are its segment's packets long).
 */
module onic_net_grad_reader #(
    // stripes of the gradient buffer: 1, 2, 4 or 8 (onic_net_stripe_run)
    parameter integer STRIPES = 1,
    // log2 of the read FIFO in beats (prefetch depth: latency x bandwidth)
    parameter integer FIFO_LOG2 = 8,
    // longest AXI burst in beats
    parameter integer MAX_BURST = 64,
    // AXI ID width: the read engine's reset epoch (onic_axi_rd)
    parameter integer ID_BITS = 4
) (
    input  wire          clk,
    input  wire          rst,

    /* a step: arguments steady from start until done */
    input  wire          start,
    input  wire [STRIPES*64-1:0] cfg_grad_addr,  // stripe k's base at [k*64 +: 64], 64-byte aligned
    input  wire [7:0]    cfg_rank,
    input  wire [7:0]    cfg_world,
    input  wire [31:0]   cfg_chunk_beats,
    input  wire [31:0]   cfg_run_beats,  // R: a round's beats of a chunk, >= 1 (>= chunk_beats: hop-major)
    output wire          done,           // every chunk delivered (until the next start)
    output wire          resp_err,       // sticky for the step: an RRESP error

    /* gradient beats in ring order */
    output wire [511:0]  m_tdata,
    output wire          m_tlast,        // a run's last beat
    output wire          m_tchunk_last,  // a chunk's last beat (with m_tlast, in the last round)
    output wire          m_tvalid,
    input  wire          m_tready,

    /* AXI4 master per stripe (read channels), stripe k's signals at [k*W +: W] */
    output wire [STRIPES*ID_BITS-1:0] m_axi_arid,
    output wire [STRIPES*64-1:0] m_axi_araddr,
    output wire [STRIPES*8-1:0] m_axi_arlen,
    output wire [STRIPES*3-1:0] m_axi_arsize,
    output wire [STRIPES*2-1:0] m_axi_arburst,
    output wire [STRIPES-1:0] m_axi_arlock,
    output wire [STRIPES*4-1:0] m_axi_arcache,
    output wire [STRIPES*3-1:0] m_axi_arprot,
    output wire [STRIPES*4-1:0] m_axi_arqos,
    output wire [STRIPES-1:0] m_axi_arvalid,
    input  wire [STRIPES-1:0] m_axi_arready,
    input  wire [STRIPES*ID_BITS-1:0] m_axi_rid,
    input  wire [STRIPES*512-1:0] m_axi_rdata,
    input  wire [STRIPES*2-1:0] m_axi_rresp,
    input  wire [STRIPES-1:0] m_axi_rlast,
    input  wire [STRIPES-1:0] m_axi_rvalid,
    output wire [STRIPES-1:0] m_axi_rready
);

    localparam integer SB = (STRIPES >= 8) ? 3 : (STRIPES >= 4) ? 2 : (STRIPES >= 2) ? 1 : 0;
    localparam integer MB_LOG2 = (MAX_BURST > 32) ? 6 : (MAX_BURST > 16) ? 5 : (MAX_BURST > 8) ? 4 :
                                 (MAX_BURST > 4) ? 3 : (MAX_BURST > 2) ? 2 : (MAX_BURST > 1) ? 1 : 0;
    // each stripe's FIFO: its share of the prefetch, at least one burst
    localparam integer ENG_FIFO_LOG2 = (FIFO_LOG2 - SB > MB_LOG2) ? FIFO_LOG2 - SB : MB_LOG2;

    localparam [2:0] S_IDLE = 3'd0, S_ROUND = 3'd1, S_SIZE = 3'd2, S_WAIT = 3'd3, S_RUN = 3'd4;

    reg  [2:0]  state_reg;
    reg  [7:0]  runs_left_reg;     // runs of this round not yet finished, this one included
    reg  [31:0] off_reg;           // the round's first beat within a chunk
    reg  [31:0] rem_reg;           // chunk_beats - off_reg
    reg  [31:0] round_beats_reg;   // beats of each run of this round
    reg         final_reg;         // this round is the last
    reg  [31:0] left_reg;          // beats of this run not yet delivered
    reg         one_reg;           // left_reg == 1
    reg         rd_start_reg;
    reg         advance_reg;
    reg         done_reg;
    reg         err_reg;
    reg  [31:0] first_reg;         // the run's first beat in the buffer: the walker's chunk + the round's offset
    reg  [3:0]  ok_sr;             // clocks the walker has been steady in S_WAIT (onic_net_stripe_run's latency)

    wire        walk_ready;
    wire [63:0] walk_addr;         // the chunk's first beat x 64 (the walker's base is 0)
    wire [STRIPES-1:0] rd_busy_k, rd_err_k, eng_valid, eng_ready;
    wire [STRIPES*512-1:0] eng_data;
    wire        rd_busy = |rd_busy_k;
    wire        rd_err = |rd_err_k;
    wire        rd_valid;
    wire [511:0] rd_data;
    wire [STRIPES*64-1:0] st_addr;
    wire [STRIPES*32-1:0] st_count;
    wire [2:0]  st_turn, st_last;

    wire        beat = state_reg == S_RUN && rd_valid && m_tready;

    always @(posedge clk) begin
        first_reg <= walk_addr[37:6] + off_reg;
        ok_sr     <= {ok_sr[2:0], walk_ready && state_reg == S_WAIT && !rd_start_reg && !advance_reg};
    end

    always @(posedge clk) begin
        rd_start_reg <= 1'b0;
        advance_reg  <= 1'b0;
        if (rst) begin
            state_reg <= S_IDLE;
            done_reg  <= 1'b0;
            err_reg   <= 1'b0;
        end else if (start) begin
            state_reg <= S_ROUND;
            off_reg   <= 32'd0;
            done_reg  <= 1'b0;
            err_reg   <= 1'b0;
        end else begin
            if (rd_err) begin
                err_reg <= 1'b1;
            end
            case (state_reg)
                S_ROUND: begin
                    rem_reg   <= cfg_chunk_beats - off_reg;
                    state_reg <= S_SIZE;
                end
                S_SIZE: begin
                    final_reg       <= rem_reg <= cfg_run_beats;
                    round_beats_reg <= (rem_reg <= cfg_run_beats) ? rem_reg : cfg_run_beats;
                    runs_left_reg   <= cfg_world;
                    state_reg       <= S_WAIT;
                end
                S_WAIT: begin
                    // each stripe's address and count follow the walker's steady address, and
                    // the engines are idle (their FIFOs drained)
                    if (ok_sr == 4'hF && walk_ready && !rd_busy && !rd_start_reg && !advance_reg) begin
                        rd_start_reg <= 1'b1;
                        left_reg     <= round_beats_reg;
                        one_reg      <= round_beats_reg == 32'd1;
                        state_reg    <= S_RUN;
                    end
                end
                S_RUN: begin
                    if (beat) begin
                        left_reg <= left_reg - 32'd1;
                        one_reg  <= left_reg == 32'd2;
                        if (one_reg) begin
                            // the walker is cyclic: after chunk r it is back at r - 1 for the next round
                            advance_reg   <= 1'b1;
                            runs_left_reg <= runs_left_reg - 8'd1;
                            if (runs_left_reg != 8'd1) begin
                                state_reg <= S_WAIT;
                            end else if (final_reg) begin
                                state_reg <= S_IDLE;
                                done_reg  <= 1'b1;
                            end else begin
                                off_reg   <= off_reg + round_beats_reg;
                                state_reg <= S_ROUND;
                            end
                        end
                    end
                end
                default: ;
            endcase
        end
    end

    onic_net_chunk_walk walk_inst (
        .clk(clk),
        .rst(rst),
        .start(start),
        .base(64'd0),
        .rank(cfg_rank),
        .world(cfg_world),
        .chunk_beats(cfg_chunk_beats),
        .advance(advance_reg),
        .ready(walk_ready),
        .addr(walk_addr)
    );

    onic_net_stripe_run #(
        .STRIPES(STRIPES)
    ) run_inst (
        .clk(clk),
        .cfg_base(cfg_grad_addr),
        .first(first_reg),
        .beats(round_beats_reg),
        .addr(st_addr),
        .count(st_count),
        .turn(st_turn),
        .last(st_last)
    );

    genvar k;
    generate
        for (k = 0; k < STRIPES; k = k + 1) begin : g_rd
            // with several stripes each engine has its own registered copy of the reset (a clock
            // later in and out; the engine is idle then): on the one net, 8 engines' registers put the
            // datapath's reset at 1,912 loads (yosys, 4 stripes; goal 1,000)
            wire rst_eng;
            if (STRIPES == 1) begin : g_rst
                assign rst_eng = rst;
            end else begin : g_rst_copy
                onic_dup_reg rst_copy (.clk(clk), .d(rst), .q(rst_eng));
            end
            onic_axi_rd #(
                .FIFO_LOG2(ENG_FIFO_LOG2),
                .MAX_BURST(MAX_BURST),
                .ID_BITS(ID_BITS)
            ) rd_inst (
                .clk(clk),
                .rst(rst_eng),
                // a stripe with no beat in the run is not started
                .start(rd_start_reg && st_count[k*32 +: 32] != 32'd0),
                .addr(st_addr[k*64 +: 64]),
                .beats(st_count[k*32 +: 32]),
                .busy(rd_busy_k[k]),
                .resp_err(rd_err_k[k]),
                .m_data(eng_data[k*512 +: 512]),
                .m_valid(eng_valid[k]),
                .m_ready(eng_ready[k]),
                .m_axi_arid(m_axi_arid[k*ID_BITS +: ID_BITS]),
                .m_axi_araddr(m_axi_araddr[k*64 +: 64]),
                .m_axi_arlen(m_axi_arlen[k*8 +: 8]),
                .m_axi_arsize(m_axi_arsize[k*3 +: 3]),
                .m_axi_arburst(m_axi_arburst[k*2 +: 2]),
                .m_axi_arlock(m_axi_arlock[k]),
                .m_axi_arcache(m_axi_arcache[k*4 +: 4]),
                .m_axi_arprot(m_axi_arprot[k*3 +: 3]),
                .m_axi_arqos(m_axi_arqos[k*4 +: 4]),
                .m_axi_arvalid(m_axi_arvalid[k]),
                .m_axi_arready(m_axi_arready[k]),
                .m_axi_rid(m_axi_rid[k*ID_BITS +: ID_BITS]),
                .m_axi_rdata(m_axi_rdata[k*512 +: 512]),
                .m_axi_rresp(m_axi_rresp[k*2 +: 2]),
                .m_axi_rlast(m_axi_rlast[k]),
                .m_axi_rvalid(m_axi_rvalid[k]),
                .m_axi_rready(m_axi_rready[k])
            );
        end
    endgenerate

    // the run's beats in order, from stripe g0 mod STRIPES
    onic_beat_merge #(
        .STRIPES(STRIPES)
    ) merge_inst (
        .clk(clk),
        .rst(rst),
        .clear(rd_start_reg),
        .start_turn({2'd0, st_turn}),
        .s_data(eng_data),
        .s_valid(eng_valid),
        .s_ready(eng_ready),
        .m_data(rd_data),
        .m_valid(rd_valid),
        .m_ready(state_reg == S_RUN && m_tready)
    );

    assign m_tdata  = rd_data;
    assign m_tlast  = one_reg;
    assign m_tchunk_last = one_reg && final_reg;
    assign m_tvalid = state_reg == S_RUN && rd_valid;
    assign done     = done_reg;
    assign resp_err = err_reg;

    wire _unused_ok = &{1'b0, walk_addr[63:38], walk_addr[5:0], st_last, 1'b0};

endmodule

`resetall
