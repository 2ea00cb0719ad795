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
 * The gradient buffer is ONE stripe: chunk c at grad_addr + c x chunk_beats x 64 (every chunk
 * starts on a beat; with the bf16 wire and S / 16 odd the host pads each chunk's last beat).
 * One port reads at 64 bytes per clock, more than a 100 Gb/s ring port's goodput, so the ring
 * needs no striping. One onic_axi_rd runs per run; its FIFO prefetches up to 2^FIFO_LOG2 beats
 * ahead of the consumer, and the next run starts when the last beat of the current one has been
 * taken (the engine's FIFO clears on start): one memory round trip per run without beats, which
 * the receive side's buffer absorbs (runs of a round-major order are its segment's packets long).
 */
module onic_net_grad_reader #(
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
    input  wire [63:0]   cfg_grad_addr,
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

    /* AXI4 master (read channels) */
    output wire [ID_BITS-1:0] m_axi_arid,
    output wire [63:0]   m_axi_araddr,
    output wire [7:0]    m_axi_arlen,
    output wire [2:0]    m_axi_arsize,
    output wire [1:0]    m_axi_arburst,
    output wire          m_axi_arlock,
    output wire [3:0]    m_axi_arcache,
    output wire [2:0]    m_axi_arprot,
    output wire [3:0]    m_axi_arqos,
    output wire          m_axi_arvalid,
    input  wire          m_axi_arready,
    input  wire [ID_BITS-1:0] m_axi_rid,
    input  wire [511:0]  m_axi_rdata,
    input  wire [1:0]    m_axi_rresp,
    input  wire          m_axi_rlast,
    input  wire          m_axi_rvalid,
    output wire          m_axi_rready
);

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
    reg  [63:0] run_addr_reg;      // the walker's chunk address + the round's offset
    reg         addr_ok_reg;       // run_addr_reg follows a steady walker address

    wire        walk_ready;
    wire [63:0] walk_addr;
    wire        rd_busy;
    wire        rd_err;
    wire        rd_valid;
    wire [511:0] rd_data;

    wire        beat = state_reg == S_RUN && rd_valid && m_tready;

    always @(posedge clk) begin
        run_addr_reg <= walk_addr + {26'd0, off_reg, 6'd0};
        addr_ok_reg  <= walk_ready && state_reg == S_WAIT && !rd_start_reg && !advance_reg;
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
                    // the walker's address is current and the engine idle (its FIFO drained)
                    if (addr_ok_reg && walk_ready && !rd_busy && !rd_start_reg && !advance_reg) begin
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
        .base(cfg_grad_addr),
        .rank(cfg_rank),
        .world(cfg_world),
        .chunk_beats(cfg_chunk_beats),
        .advance(advance_reg),
        .ready(walk_ready),
        .addr(walk_addr)
    );

    onic_axi_rd #(
        .FIFO_LOG2(FIFO_LOG2),
        .MAX_BURST(MAX_BURST),
        .ID_BITS(ID_BITS)
    ) rd_inst (
        .clk(clk),
        .rst(rst),
        .start(rd_start_reg),
        .addr(run_addr_reg),
        .beats(round_beats_reg),
        .busy(rd_busy),
        .resp_err(rd_err),
        .m_data(rd_data),
        .m_valid(rd_valid),
        .m_ready(state_reg == S_RUN && m_tready),
        .m_axi_arid(m_axi_arid),
        .m_axi_araddr(m_axi_araddr),
        .m_axi_arlen(m_axi_arlen),
        .m_axi_arsize(m_axi_arsize),
        .m_axi_arburst(m_axi_arburst),
        .m_axi_arlock(m_axi_arlock),
        .m_axi_arcache(m_axi_arcache),
        .m_axi_arprot(m_axi_arprot),
        .m_axi_arqos(m_axi_arqos),
        .m_axi_arvalid(m_axi_arvalid),
        .m_axi_arready(m_axi_arready),
        .m_axi_rid(m_axi_rid),
        .m_axi_rdata(m_axi_rdata),
        .m_axi_rresp(m_axi_rresp),
        .m_axi_rlast(m_axi_rlast),
        .m_axi_rvalid(m_axi_rvalid),
        .m_axi_rready(m_axi_rready)
    );

    assign m_tdata  = rd_data;
    assign m_tlast  = one_reg;
    assign m_tchunk_last = one_reg && final_reg;
    assign m_tvalid = state_reg == S_RUN && rd_valid;
    assign done     = done_reg;
    assign resp_err = err_reg;

endmodule

`resetall
