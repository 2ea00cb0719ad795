// OptimusNIC: the card's ring datapath (reduce-scatter adds and forwards, owner's stream, all-gather)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Between onic_net_rx (delivered data headers and payload beats) and onic_net_tx (the RS and AG
 * flows' descriptors and payloads), docs/design.md 8.1 for rank r of N, chunk size S:
 *
 *   card memory ─> onic_net_grad_reader: per round, runs of chunks r-1, r-2, ..., r+1, r
 *                     ├ chunk r-1 ─> onic_net_packetize (RS hop 0) ───────────────> RS tx
 *                     └ the rest ─> onic_net_reduce (b) ─┬ hops 1..N-2 (forward) ─> RS tx
 *   rx RS payload ──────────────> onic_net_reduce (a)    └ hop N-2's sum (owner) ─> m_grad_* (Adam kernel)
 *   s_param_* (Adam kernel out) ─> onic_net_packetize (AG hop 0, after ag_release) ─> AG tx
 *   rx AG payload ─┬─> onic_beat_split ─> onic_axi_wr per stripe: chunk c from beat c x beats(S)
 *                  └─> AG tx (hop + 1), unless this rank is c - 1 (the chunk's last receiver)
 *
 * Both flows go in rounds (design.md 8.2, round-major order with a segment of B packets per
 * flow, `cfg_*_seg`; B = the packets per hop is hop-major order, one round): round q is the own
 * chunk's packets q B .. q B + B - 1 (hop 0), then the same packets of every later hop as they
 * arrive from the predecessor, then round q + 1. onic_net_rounds sizes each round.
 *
 * Received packets are taken one at a time in the order onic_net_rx delivers them (go-back-N:
 * each flow in sequence order). A forwarded packet's descriptor is the received header with
 * hop + 1; offset, length and the LAST flag are kept. A flow's sequence numbers count its
 * descriptors in the order they go, which is the round-major order (`hls.net.wire.seq_of`).
 * Headers must be data frames (opcode 1 RS or 2 AG; the network kernel top routes ACK/NAKs to
 * the transmit side): anything else sets err_opcode and its payload is dropped. The header fields
 * are trusted (onic_net_rx checks step and sequence, not the chunk, hop or length a sequence
 * number implies).
 *
 * Sequence order into the transmit flows, per round: the round's hop-0 packets all go before its
 * first forwarded one (a forward's descriptor waits for the round's last hop-0 descriptor; its
 * beats come after the round's run of chunk r-1 in the reader's order), and the next round's
 * hop-0 packets after its last forwarded one. The AG flow's rounds start with the card's own
 * packets; a received AG packet to forward waits until the round's own packets are handed over,
 * which cannot deadlock only because they need nothing more from the receive stream: `ag_release`
 * (the top drives it when the RS sender has every packet acknowledged) holds the own chunk back
 * until then, so the predecessor's first AG frame reaches this card after every RS frame it sent.
 * In more than one round the Adam kernel's stream must not wait on the ring: the top runs such
 * steps only as two-phase steps, whose phase two feeds the Adam kernel from card memory. Stalls
 * (the Adam kernel's input, a memory port, the transmit side) back up into onic_net_rx's buffer;
 * nothing is dropped.
 *
 * Card memory: the local gradient (wire dtype) and the gathered parameters (param dtype) are
 * STRIPES stripes each, hls/layout.py's rule over the whole buffer: chunk c from beat
 * c x beats(S), beat b on stripe b mod STRIPES at index b / STRIPES, stripe k at
 * cfg_grad_addr[k x 64 +: 64] / cfg_gather_addr[k x 64 +: 64] (STRIPES = 1: chunk c at
 * addr + c x beats(S) x 64); each chunk starts on a 64-byte beat (see onic_net_grad_reader).
 * One write run per received run (a hop's packets of a round): onic_net_stripe_run gives each
 * stripe's first index and count, onic_beat_split deals the run's beats from stripe g0 mod
 * STRIPES, one onic_axi_wr per stripe with beats (a stripe with none is not started); the last
 * beat's bytes past the chunk are not written (the stripe holding the run's last beat).
 *
 * Configuration is steady from `start` until the step is done (rs_done and ag_done).
 */
module onic_net_ring_dp #(
    // stripes of the local-gradient and gathered-parameter buffers: 1, 2, 4 or 8
    parameter integer STRIPES = 1,
    // wire dtype (the RS payload and the Adam kernel's gradient stream): 0 fp32, 1 bf16
    parameter integer WIRE_BF16 = 0,
    // parameter dtype (the Adam kernel's output, the AG payload, the gathered buffer): 0 fp32, 1 bf16
    parameter integer PARAM_BF16 = 0,
    // log2 of the gradient reader's prefetch FIFO in beats
    parameter integer RD_FIFO_LOG2 = 8,
    // log2 of the gather write engine's FIFO in beats (two bursts at least)
    parameter integer WR_FIFO_LOG2 = 7,
    // longest AXI burst in beats (both memory ports)
    parameter integer MAX_BURST = 64,
    // AXI ID width of both ports: the engines' reset epoch (onic_axi_rd / onic_axi_wr)
    parameter integer ID_BITS = 4
) (
    input  wire          clk,
    input  wire          rst,

    /* a step */
    input  wire          start,
    input  wire [7:0]    cfg_rank,
    input  wire [7:0]    cfg_world,          // N, 2 .. 255
    input  wire [31:0]   cfg_chunk_elems,    // S: a multiple of 16, > 0
    input  wire [15:0]   cfg_pkt_beats,      // payload bytes of a full packet / 64
    input  wire [STRIPES*64-1:0] cfg_grad_addr,    // stripe k's base at [k*64 +: 64]
    input  wire [STRIPES*64-1:0] cfg_gather_addr,  // stripe k's base at [k*64 +: 64]
    // round-major order (onic_net_rounds): per flow P packets per hop, B packets per round
    // (1 .. P; P: hop-major), B x beats per packet, B x elements per packet
    input  wire [31:0]   cfg_rs_packets,
    input  wire [31:0]   cfg_rs_seg,
    input  wire [31:0]   cfg_rs_seg_beats,
    input  wire [31:0]   cfg_rs_seg_elems,
    input  wire [31:0]   cfg_ag_packets,
    input  wire [31:0]   cfg_ag_seg,
    input  wire [31:0]   cfg_ag_seg_beats,
    input  wire [31:0]   cfg_ag_seg_elems,
    input  wire          ag_release,         // level: the own AG chunk may go (RS flow all ACKed)
    output wire          rs_done,            // the owner's sum is in the Adam kernel (its TLAST taken)
    output wire          ag_done,            // own chunk handed over, every received chunk forwarded and written
    output wire [4:0]    errors,             // sticky per step: opcode, param length, RS gen length, RRESP, BRESP

    /* from onic_net_rx: delivered headers (data frames) and payload */
    input  wire [3:0]    s_hdr_opcode,
    input  wire [5:0]    s_hdr_flags,
    input  wire [7:0]    s_hdr_hop,
    input  wire [15:0]   s_hdr_chunk,
    input  wire [31:0]   s_hdr_seq,
    input  wire [31:0]   s_hdr_offset,
    input  wire [15:0]   s_hdr_length,
    input  wire          s_hdr_valid,
    output wire          s_hdr_ready,
    input  wire [511:0]  s_pay_tdata,
    input  wire [63:0]   s_pay_tkeep,
    input  wire          s_pay_tlast,
    input  wire          s_pay_tvalid,
    output wire          s_pay_tready,

    /* to the Adam kernel: the reduced gradient of chunk r (TLAST on the shard's last beat) */
    output wire [511:0]  m_grad_tdata,
    output wire [63:0]   m_grad_tkeep,
    output wire          m_grad_tlast,
    output wire          m_grad_tvalid,
    input  wire          m_grad_tready,

    /* from the Adam kernel: the updated parameters of chunk r (TLAST on the shard's last beat) */
    input  wire [511:0]  s_param_tdata,
    input  wire [63:0]   s_param_tkeep,
    input  wire          s_param_tlast,
    input  wire          s_param_tvalid,
    output wire          s_param_tready,

    /* to onic_net_tx: reduce-scatter descriptors and payload */
    output wire [1:0]    m_rs_desc_dtype,
    output wire [5:0]    m_rs_desc_flags,
    output wire [7:0]    m_rs_desc_hop,
    output wire [15:0]   m_rs_desc_chunk,
    output wire [31:0]   m_rs_desc_seq,
    output wire [31:0]   m_rs_desc_offset,
    output wire [15:0]   m_rs_desc_len,
    output wire          m_rs_desc_valid,
    input  wire          m_rs_desc_ready,
    output wire [511:0]  m_rs_axis_tdata,
    output wire [63:0]   m_rs_axis_tkeep,
    output wire          m_rs_axis_tlast,
    output wire          m_rs_axis_tvalid,
    input  wire          m_rs_axis_tready,

    /* to onic_net_tx: all-gather descriptors and payload */
    output wire [1:0]    m_ag_desc_dtype,
    output wire [5:0]    m_ag_desc_flags,
    output wire [7:0]    m_ag_desc_hop,
    output wire [15:0]   m_ag_desc_chunk,
    output wire [31:0]   m_ag_desc_seq,
    output wire [31:0]   m_ag_desc_offset,
    output wire [15:0]   m_ag_desc_len,
    output wire          m_ag_desc_valid,
    input  wire          m_ag_desc_ready,
    output wire [511:0]  m_ag_axis_tdata,
    output wire [63:0]   m_ag_axis_tkeep,
    output wire          m_ag_axis_tlast,
    output wire          m_ag_axis_tvalid,
    input  wire          m_ag_axis_tready,

    /* AXI4 master per stripe: local gradient (read), stripe k's signals at [k*W +: W] */
    output wire [STRIPES*ID_BITS-1:0] m_axi_grad_arid,
    output wire [STRIPES*64-1:0] m_axi_grad_araddr,
    output wire [STRIPES*8-1:0] m_axi_grad_arlen,
    output wire [STRIPES*3-1:0] m_axi_grad_arsize,
    output wire [STRIPES*2-1:0] m_axi_grad_arburst,
    output wire [STRIPES-1:0] m_axi_grad_arlock,
    output wire [STRIPES*4-1:0] m_axi_grad_arcache,
    output wire [STRIPES*3-1:0] m_axi_grad_arprot,
    output wire [STRIPES*4-1:0] m_axi_grad_arqos,
    output wire [STRIPES-1:0] m_axi_grad_arvalid,
    input  wire [STRIPES-1:0] m_axi_grad_arready,
    input  wire [STRIPES*ID_BITS-1:0] m_axi_grad_rid,
    input  wire [STRIPES*512-1:0] m_axi_grad_rdata,
    input  wire [STRIPES*2-1:0] m_axi_grad_rresp,
    input  wire [STRIPES-1:0] m_axi_grad_rlast,
    input  wire [STRIPES-1:0] m_axi_grad_rvalid,
    output wire [STRIPES-1:0] m_axi_grad_rready,

    /* AXI4 master per stripe: gathered parameters (write), stripe k's signals at [k*W +: W] */
    output wire [STRIPES*ID_BITS-1:0] m_axi_gather_awid,
    output wire [STRIPES*64-1:0] m_axi_gather_awaddr,
    output wire [STRIPES*8-1:0] m_axi_gather_awlen,
    output wire [STRIPES*3-1:0] m_axi_gather_awsize,
    output wire [STRIPES*2-1:0] m_axi_gather_awburst,
    output wire [STRIPES-1:0] m_axi_gather_awlock,
    output wire [STRIPES*4-1:0] m_axi_gather_awcache,
    output wire [STRIPES*3-1:0] m_axi_gather_awprot,
    output wire [STRIPES*4-1:0] m_axi_gather_awqos,
    output wire [STRIPES-1:0] m_axi_gather_awvalid,
    input  wire [STRIPES-1:0] m_axi_gather_awready,
    output wire [STRIPES*512-1:0] m_axi_gather_wdata,
    output wire [STRIPES*64-1:0] m_axi_gather_wstrb,
    output wire [STRIPES-1:0] m_axi_gather_wlast,
    output wire [STRIPES-1:0] m_axi_gather_wvalid,
    input  wire [STRIPES-1:0] m_axi_gather_wready,
    input  wire [STRIPES*ID_BITS-1:0] m_axi_gather_bid,
    input  wire [STRIPES*2-1:0] m_axi_gather_bresp,
    input  wire [STRIPES-1:0] m_axi_gather_bvalid,
    output wire [STRIPES-1:0] m_axi_gather_bready
);

    localparam [3:0] OP_RS = 4'd1;
    localparam [3:0] OP_AG = 4'd2;
    localparam [1:0] WIRE_CODE  = (WIRE_BF16 != 0) ? 2'd1 : 2'd0;
    localparam [1:0] PARAM_CODE = (PARAM_BF16 != 0) ? 2'd1 : 2'd0;

    /* ---- configuration, derived once per clock from the steady arguments ---- */
    reg  [31:0] rs_bytes_reg, ag_bytes_reg;     // S x element bytes
    reg  [31:0] rs_beats_reg, ag_beats_reg;     // beats per chunk
    reg  [31:0] rs_pelems_reg, ag_pelems_reg;   // elements per full packet
    reg  [6:0]  ag_last_bytes_reg;
    reg  [7:0]  owner_hop_reg;                  // N - 2: the hop whose sum is this card's
    reg  [7:0]  world_m1_reg;                   // N - 1: the reader's runs per round, less one
    reg  [15:0] rs_chunk0_reg;                  // (r - 1) mod N
    reg  [2:0]  go_sr;                          // start, delayed until the values above are current
    reg         run_reg;                        // a step is running

    wire [31:0] rs_bytes = (WIRE_BF16 != 0) ? {cfg_chunk_elems[30:0], 1'b0} : {cfg_chunk_elems[29:0], 2'b00};
    wire [31:0] ag_bytes = (PARAM_BF16 != 0) ? {cfg_chunk_elems[30:0], 1'b0} : {cfg_chunk_elems[29:0], 2'b00};

    always @(posedge clk) begin
        rs_bytes_reg      <= rs_bytes;
        ag_bytes_reg      <= ag_bytes;
        rs_beats_reg      <= (rs_bytes_reg + 32'd63) >> 6;
        ag_beats_reg      <= (ag_bytes_reg + 32'd63) >> 6;
        rs_pelems_reg     <= (WIRE_BF16 != 0) ? {11'd0, cfg_pkt_beats, 5'd0} : {12'd0, cfg_pkt_beats, 4'd0};
        ag_pelems_reg     <= (PARAM_BF16 != 0) ? {11'd0, cfg_pkt_beats, 5'd0} : {12'd0, cfg_pkt_beats, 4'd0};
        ag_last_bytes_reg <= (ag_bytes_reg[5:0] == 6'd0) ? 7'd64 : {1'b0, ag_bytes_reg[5:0]};
        owner_hop_reg     <= cfg_world - 8'd2;
        world_m1_reg      <= cfg_world - 8'd1;
        rs_chunk0_reg     <= {8'd0, (cfg_rank == 8'd0) ? cfg_world - 8'd1 : cfg_rank - 8'd1};
        go_sr             <= rst ? 3'd0 : {go_sr[1:0], start};
    end

    wire go = go_sr[2];

    /* ---- the local gradient, in ring order ---- */
    wire [511:0] lg_tdata;
    wire         lg_tlast, lg_tchunk, lg_tvalid, lg_tready;
    wire         lg_done, rd_err;
    reg          lg_to_gen_reg;   // the round's run of chunk r - 1 is coming: it is RS hop 0
    reg  [7:0]   lg_run_reg;      // the reader's run within its round: 0 (chunk r - 1) .. N - 1 (chunk r)

    onic_net_grad_reader #(
        .STRIPES(STRIPES),
        .FIFO_LOG2(RD_FIFO_LOG2),
        .MAX_BURST(MAX_BURST),
        .ID_BITS(ID_BITS)
    ) reader_inst (
        .clk(clk), .rst(rst),
        .start(go),
        .cfg_grad_addr(cfg_grad_addr),
        .cfg_rank(cfg_rank),
        .cfg_world(cfg_world),
        .cfg_chunk_beats(rs_beats_reg),
        .cfg_run_beats(cfg_rs_seg_beats),
        .done(lg_done),
        .resp_err(rd_err),
        .m_tdata(lg_tdata), .m_tlast(lg_tlast), .m_tchunk_last(lg_tchunk), .m_tvalid(lg_tvalid), .m_tready(lg_tready),
        .m_axi_arid(m_axi_grad_arid), .m_axi_araddr(m_axi_grad_araddr), .m_axi_arlen(m_axi_grad_arlen),
        .m_axi_arsize(m_axi_grad_arsize), .m_axi_arburst(m_axi_grad_arburst), .m_axi_arlock(m_axi_grad_arlock),
        .m_axi_arcache(m_axi_grad_arcache), .m_axi_arprot(m_axi_grad_arprot), .m_axi_arqos(m_axi_grad_arqos),
        .m_axi_arvalid(m_axi_grad_arvalid), .m_axi_arready(m_axi_grad_arready),
        .m_axi_rid(m_axi_grad_rid), .m_axi_rdata(m_axi_grad_rdata), .m_axi_rresp(m_axi_grad_rresp),
        .m_axi_rlast(m_axi_grad_rlast), .m_axi_rvalid(m_axi_grad_rvalid), .m_axi_rready(m_axi_grad_rready)
    );

    /* ---- the rounds of each flow: the transmit side's (RS, AG) and the gather writer's ---- */
    localparam [1:0] DM_SETUP = 2'd0, DM_OWN = 2'd1, DM_FWD = 2'd2, DM_END = 2'd3;

    wire         rsr_ready, rsr_last, agr_ready, agr_last, awr_ready, awr_last;
    wire [31:0]  rsr_bq, rsr_fwd, rsr_off_beats, rsr_off_elems, rsr_run_beats, rsr_run_bytes;
    wire [31:0]  agr_bq, agr_fwd, agr_off_beats, agr_off_elems, agr_run_beats, agr_run_bytes;
    wire [31:0]  awr_bq, awr_fwd, awr_off_beats, awr_off_elems, awr_run_beats, awr_run_bytes;
    reg          rsr_next_reg, agr_next_reg, awr_next_reg;

    onic_net_rounds rs_rounds_inst (
        .clk(clk), .rst(rst), .start(go), .next(rsr_next_reg),
        .cfg_packets(cfg_rs_packets), .cfg_seg(cfg_rs_seg), .cfg_seg_beats(cfg_rs_seg_beats),
        .cfg_seg_elems(cfg_rs_seg_elems), .cfg_chunk_beats(rs_beats_reg), .cfg_chunk_bytes(rs_bytes_reg),
        .cfg_fwd_hops(owner_hop_reg),
        .ready(rsr_ready), .last(rsr_last), .bq(rsr_bq), .fwd(rsr_fwd), .off_beats(rsr_off_beats),
        .off_elems(rsr_off_elems), .run_beats(rsr_run_beats), .run_bytes(rsr_run_bytes)
    );

    onic_net_rounds ag_rounds_inst (
        .clk(clk), .rst(rst), .start(go), .next(agr_next_reg),
        .cfg_packets(cfg_ag_packets), .cfg_seg(cfg_ag_seg), .cfg_seg_beats(cfg_ag_seg_beats),
        .cfg_seg_elems(cfg_ag_seg_elems), .cfg_chunk_beats(ag_beats_reg), .cfg_chunk_bytes(ag_bytes_reg),
        .cfg_fwd_hops(owner_hop_reg),
        .ready(agr_ready), .last(agr_last), .bq(agr_bq), .fwd(agr_fwd), .off_beats(agr_off_beats),
        .off_elems(agr_off_elems), .run_beats(agr_run_beats), .run_bytes(agr_run_bytes)
    );

    // the gather writer's rounds: received AG runs (N - 1 per round, bq packets each)
    onic_net_rounds aw_rounds_inst (
        .clk(clk), .rst(rst), .start(go), .next(awr_next_reg),
        .cfg_packets(cfg_ag_packets), .cfg_seg(cfg_ag_seg), .cfg_seg_beats(cfg_ag_seg_beats),
        .cfg_seg_elems(cfg_ag_seg_elems), .cfg_chunk_beats(ag_beats_reg), .cfg_chunk_bytes(ag_bytes_reg),
        .cfg_fwd_hops(owner_hop_reg),
        .ready(awr_ready), .last(awr_last), .bq(awr_bq), .fwd(awr_fwd), .off_beats(awr_off_beats),
        .off_elems(awr_off_elems), .run_beats(awr_run_beats), .run_bytes(awr_run_bytes)
    );

    /* ---- RS hop 0: the own gradient of chunk r - 1, a round's run at a time ---- */
    wire         rg_tready;
    wire         rg_desc_done, rg_pay_done, rg_err;
    wire [1:0]   rg_d_dtype;
    wire [5:0]   rg_d_flags;
    wire [7:0]   rg_d_hop;
    wire [15:0]  rg_d_chunk, rg_d_len;
    wire [31:0]  rg_d_offset;
    wire         rg_d_valid;
    wire [511:0] rg_tdata;
    wire [63:0]  rg_tkeep;
    wire         rg_tlast, rg_tvalid;
    reg          rg_start_reg;     // the packetizer starts the round's run
    reg          rg_on_reg;        // it has started in this step (its state before is the last step's)
    reg  [1:0]   rs_dm_reg;        // descriptors: the round's own, then its forwards
    reg  [31:0]  rs_fwd_left_reg;  // the round's forwarded descriptors not yet taken
    reg  [31:0]  rs_round_fwd_reg; // the round's forwards (for the payload side)
    reg          rs_fwd_mode_reg;  // the payload: the round's own is out, its forwarded sums go
    reg          rs_pp_armed_reg;  // the payload side waits for the started run's own payload
    reg  [31:0]  rs_pp_left_reg;   // forwarded payloads of the round still to go
    reg  [31:0]  rs_seq_reg;       // the RS flow's next sequence number

    onic_net_packetize rs_gen_inst (
        .clk(clk), .rst(rst),
        .start(rg_start_reg),
        .cfg_chunk_bytes(rsr_run_bytes), .cfg_offset(rsr_off_elems), .cfg_last_run(rsr_last),
        .cfg_pkt_beats(cfg_pkt_beats), .cfg_pkt_elems(rs_pelems_reg),
        .cfg_dtype(WIRE_CODE), .cfg_chunk(rs_chunk0_reg), .enable(run_reg && rg_on_reg),
        .desc_done(rg_desc_done), .pay_done(rg_pay_done), .err_len(rg_err),
        .s_tdata(lg_tdata), .s_tlast(lg_tchunk), .s_tvalid(lg_tvalid && lg_to_gen_reg), .s_tready(rg_tready),
        .m_desc_dtype(rg_d_dtype), .m_desc_flags(rg_d_flags), .m_desc_hop(rg_d_hop), .m_desc_chunk(rg_d_chunk),
        .m_desc_offset(rg_d_offset), .m_desc_len(rg_d_len), .m_desc_valid(rg_d_valid),
        .m_desc_ready(m_rs_desc_ready),
        .m_tdata(rg_tdata), .m_tkeep(rg_tkeep), .m_tlast(rg_tlast), .m_tvalid(rg_tvalid),
        .m_tready(m_rs_axis_tready && !rs_fwd_mode_reg)
    );

    /* ---- AG hop 0: the own updated chunk r, a round's run at a time, once the RS flow is acknowledged ---- */
    wire         ag_desc_done, ag_pay_done, ag_err;
    wire [1:0]   ao_d_dtype;
    wire [5:0]   ao_d_flags;
    wire [7:0]   ao_d_hop;
    wire [15:0]  ao_d_chunk, ao_d_len;
    wire [31:0]  ao_d_offset;
    wire         ao_d_valid;
    wire [511:0] ao_tdata;
    wire [63:0]  ao_tkeep;
    wire         ao_tlast, ao_tvalid;
    reg          ao_start_reg;
    reg          ao_on_reg;
    reg  [1:0]   ag_dm_reg;
    reg  [31:0]  ag_fwd_left_reg;
    reg  [31:0]  ag_round_fwd_reg;
    reg          ag_fwd_mode_reg;  // the payload: the round's own is out, its forwarded packets go
    reg          ag_pp_armed_reg;
    reg  [31:0]  ag_pp_left_reg;
    reg  [31:0]  ag_seq_reg;

    onic_net_packetize ag_gen_inst (
        .clk(clk), .rst(rst),
        .start(ao_start_reg),
        .cfg_chunk_bytes(agr_run_bytes), .cfg_offset(agr_off_elems), .cfg_last_run(agr_last),
        .cfg_pkt_beats(cfg_pkt_beats), .cfg_pkt_elems(ag_pelems_reg),
        .cfg_dtype(PARAM_CODE), .cfg_chunk({8'd0, cfg_rank}), .enable(run_reg && ao_on_reg && ag_release),
        .desc_done(ag_desc_done), .pay_done(ag_pay_done), .err_len(ag_err),
        .s_tdata(s_param_tdata), .s_tlast(s_param_tlast), .s_tvalid(s_param_tvalid), .s_tready(s_param_tready),
        .m_desc_dtype(ao_d_dtype), .m_desc_flags(ao_d_flags), .m_desc_hop(ao_d_hop), .m_desc_chunk(ao_d_chunk),
        .m_desc_offset(ao_d_offset), .m_desc_len(ao_d_len), .m_desc_valid(ao_d_valid),
        .m_desc_ready(m_ag_desc_ready),
        .m_tdata(ao_tdata), .m_tkeep(ao_tkeep), .m_tlast(ao_tlast), .m_tvalid(ao_tvalid),
        .m_tready(m_ag_axis_tready && !ag_fwd_mode_reg)
    );

    wire rs_desc_fire = m_rs_desc_valid && m_rs_desc_ready;
    wire ag_desc_fire = m_ag_desc_valid && m_ag_desc_ready;
    wire rs_fwd_pay_end = rs_fwd_mode_reg && m_rs_axis_tvalid && m_rs_axis_tready && m_rs_axis_tlast;
    wire ag_fwd_pay_end = ag_fwd_mode_reg && m_ag_axis_tvalid && m_ag_axis_tready && m_ag_axis_tlast;

    // the rounds of the transmit side: a round's own descriptors, then its forwards, then the next
    // round's packetizer run once its own payload is out too (a restart clears the packetizer)
    always @(posedge clk) begin
        rg_start_reg <= 1'b0;
        ao_start_reg <= 1'b0;
        rsr_next_reg <= 1'b0;
        agr_next_reg <= 1'b0;
        if (rst || go) begin
            rs_dm_reg  <= DM_SETUP;
            ag_dm_reg  <= DM_SETUP;
            rg_on_reg  <= 1'b0;
            ao_on_reg  <= 1'b0;
            rs_seq_reg <= 32'd0;
            ag_seq_reg <= 32'd0;
        end else begin
            if (rs_desc_fire) rs_seq_reg <= rs_seq_reg + 32'd1;
            if (ag_desc_fire) ag_seq_reg <= ag_seq_reg + 32'd1;
            case (rs_dm_reg)
                DM_SETUP: if (run_reg && rsr_ready && !rsr_next_reg) begin
                    rg_start_reg     <= 1'b1;
                    rg_on_reg        <= 1'b1;
                    rs_fwd_left_reg  <= rsr_fwd;
                    rs_round_fwd_reg <= rsr_fwd;
                    rs_dm_reg        <= DM_OWN;
                end
                DM_OWN: if (!rg_start_reg && rg_desc_done) rs_dm_reg <= DM_FWD;
                DM_FWD: begin
                    if (rf_valid_reg && m_rs_desc_ready) rs_fwd_left_reg <= rs_fwd_left_reg - 32'd1;
                    if (rs_fwd_left_reg == 32'd0 && rg_pay_done) begin
                        rsr_next_reg <= !rsr_last;
                        rs_dm_reg    <= rsr_last ? DM_END : DM_SETUP;
                    end
                end
                default: ;
            endcase
            case (ag_dm_reg)
                DM_SETUP: if (run_reg && agr_ready && !agr_next_reg) begin
                    ao_start_reg     <= 1'b1;
                    ao_on_reg        <= 1'b1;
                    ag_fwd_left_reg  <= agr_fwd;
                    ag_round_fwd_reg <= agr_fwd;
                    ag_dm_reg        <= DM_OWN;
                end
                DM_OWN: if (!ao_start_reg && ag_desc_done) ag_dm_reg <= DM_FWD;
                DM_FWD: begin
                    if (af_valid_reg && m_ag_desc_ready) ag_fwd_left_reg <= ag_fwd_left_reg - 32'd1;
                    if (ag_fwd_left_reg == 32'd0 && ag_pay_done) begin
                        agr_next_reg <= !agr_last;
                        ag_dm_reg    <= agr_last ? DM_END : DM_SETUP;
                    end
                end
                default: ;
            endcase
        end
    end

    // the payload side follows: a round's own payload, then its forwarded packets' payload
    always @(posedge clk) begin
        if (rst || go) begin
            rs_fwd_mode_reg <= 1'b0;
            ag_fwd_mode_reg <= 1'b0;
            rs_pp_armed_reg <= 1'b0;
            ag_pp_armed_reg <= 1'b0;
        end else begin
            // (a run started while the last round's forwards still go arms the next own payload)
            if (rs_fwd_mode_reg) begin
                if (rs_pp_left_reg == 32'd0) rs_fwd_mode_reg <= 1'b0;
                else if (rs_fwd_pay_end) rs_pp_left_reg <= rs_pp_left_reg - 32'd1;
            end else if (rs_pp_armed_reg && !rg_start_reg && rg_pay_done) begin
                rs_pp_armed_reg <= 1'b0;
                rs_fwd_mode_reg <= 1'b1;
                rs_pp_left_reg  <= rs_round_fwd_reg;
            end
            if (rg_start_reg) rs_pp_armed_reg <= 1'b1;
            if (ag_fwd_mode_reg) begin
                if (ag_pp_left_reg == 32'd0) ag_fwd_mode_reg <= 1'b0;
                else if (ag_fwd_pay_end) ag_pp_left_reg <= ag_pp_left_reg - 32'd1;
            end else if (ag_pp_armed_reg && !ao_start_reg && ag_pay_done) begin
                ag_pp_armed_reg <= 1'b0;
                ag_fwd_mode_reg <= 1'b1;
                ag_pp_left_reg  <= ag_round_fwd_reg;
            end
            if (ao_start_reg) ag_pp_armed_reg <= 1'b1;
        end
    end

    /* ---- received packets, one at a time ---- */
    localparam [2:0] D_IDLE = 3'd0, D_RS_WAIT = 3'd1, D_RS_PAY = 3'd2, D_AG_WAIT = 3'd3,
                     D_AG_PAY = 3'd4, D_DROP = 3'd5;

    reg  [2:0]   d_state_reg;
    reg  [3:0]   h_opcode_reg;
    reg  [5:0]   h_flags_reg;
    reg  [7:0]   h_hop_reg;
    reg  [15:0]  h_chunk_reg;
    reg  [31:0]  h_seq_reg;
    reg  [31:0]  h_offset_reg;
    reg  [15:0]  h_length_reg;
    reg          h_owner_reg;      // RS: the last hop (the sum is this card's)
    reg          h_fwd_reg;        // AG: forward (not the chunk's last receiver)
    reg          hdr_take_reg;     // s_hdr_ready for one clock

    // forwarded descriptors, one at a time (valid until the transmit side takes it)
    reg          rf_valid_reg, af_valid_reg;
    reg  [5:0]   f_flags_reg;
    reg  [7:0]   f_hop_reg;
    reg  [15:0]  f_chunk_reg;
    reg  [31:0]  f_offset_reg;
    reg  [15:0]  f_len_reg;

    // the gather write engine
    reg          wr_start_reg;
    reg          walk_adv_reg;
    reg  [7:0]   ag_chunks_reg;    // received AG chunks completed
    reg  [31:0]  aw_left_reg;      // packets of the current received run still to come (0: a run starts)
    reg  [7:0]   aw_runs_reg;      // received runs of the round not yet complete, this one included
    reg  [31:0]  wr_first_reg;     // the run's first beat: the walker's chunk + the round's offset
    reg  [3:0]   wr_ok_sr;         // clocks the walker and the round have been steady (onic_net_stripe_run)
    wire         wr_addr_ok = wr_ok_sr == 4'hF;
    reg          err_op_reg;
    reg          rs_done_reg;
    wire         wr_busy, wr_err, wr_s_ready;
    wire         walk_ready;
    wire [63:0]  walk_addr;

    // reduce
    wire         red_a_tready, red_b_tready;
    wire [511:0] red_tdata;
    wire [63:0]  red_tkeep;
    wire         red_tlast, red_tvalid;
    wire [0:0]   red_tuser;

    wire pay_fire = s_pay_tvalid && s_pay_tready;

    // a new step stops the dispatcher at once; it runs again once everything is restarted
    always @(posedge clk) begin
        if (rst || start) begin
            run_reg <= 1'b0;
        end else if (go) begin
            run_reg <= 1'b1;
        end
    end

    always @(posedge clk) begin
        hdr_take_reg <= 1'b0;
        wr_start_reg <= 1'b0;
        walk_adv_reg <= 1'b0;
        awr_next_reg <= 1'b0;
        if (rst) begin
            d_state_reg   <= D_IDLE;
            rf_valid_reg  <= 1'b0;
            af_valid_reg  <= 1'b0;
            err_op_reg    <= 1'b0;
            rs_done_reg   <= 1'b0;
            ag_chunks_reg <= 8'd0;
            lg_to_gen_reg <= 1'b0;
            lg_run_reg    <= 8'd0;
            aw_left_reg   <= 32'd0;
            aw_runs_reg   <= 8'd0;
        end else if (go) begin
            d_state_reg   <= D_IDLE;
            rf_valid_reg  <= 1'b0;
            af_valid_reg  <= 1'b0;
            err_op_reg    <= 1'b0;
            rs_done_reg   <= 1'b0;
            ag_chunks_reg <= 8'd0;
            lg_to_gen_reg <= 1'b1;
            lg_run_reg    <= 8'd0;
            aw_left_reg   <= 32'd0;
            aw_runs_reg   <= owner_hop_reg + 8'd1;
        end else begin
            if (lg_tvalid && lg_tready && lg_tlast) begin
                // the reader's runs: N per round, the first (chunk r - 1) the round's hop 0
                lg_run_reg    <= (lg_run_reg == world_m1_reg) ? 8'd0 : lg_run_reg + 8'd1;
                lg_to_gen_reg <= lg_run_reg == world_m1_reg;
            end
            if (rf_valid_reg && m_rs_desc_ready) begin
                rf_valid_reg <= 1'b0;
            end
            if (af_valid_reg && m_ag_desc_ready) begin
                af_valid_reg <= 1'b0;
            end
            if (m_grad_tvalid && m_grad_tready && m_grad_tlast) begin
                rs_done_reg <= 1'b1;
            end
            case (d_state_reg)
                D_IDLE: begin
                    if (run_reg && s_hdr_valid && !hdr_take_reg) begin
                        hdr_take_reg <= 1'b1;
                        h_opcode_reg <= s_hdr_opcode;
                        h_flags_reg  <= s_hdr_flags;
                        h_hop_reg    <= s_hdr_hop;
                        h_chunk_reg  <= s_hdr_chunk;
                        h_seq_reg    <= s_hdr_seq;
                        h_offset_reg <= s_hdr_offset;
                        h_length_reg <= s_hdr_length;
                        h_owner_reg  <= s_hdr_hop == owner_hop_reg;
                        h_fwd_reg    <= s_hdr_hop != owner_hop_reg;
                        if (s_hdr_length == 16'd0) begin
                            // a data frame always carries payload; none follows this one
                            err_op_reg  <= 1'b1;
                            d_state_reg <= D_IDLE;
                        end else if (s_hdr_opcode == OP_RS) begin
                            d_state_reg <= D_RS_WAIT;
                        end else if (s_hdr_opcode == OP_AG) begin
                            d_state_reg <= D_AG_WAIT;
                        end else begin
                            err_op_reg  <= 1'b1;
                            d_state_reg <= D_DROP;
                        end
                    end
                end
                D_RS_WAIT: begin
                    if (h_owner_reg) begin
                        d_state_reg <= D_RS_PAY;
                    end else if (rs_dm_reg == DM_FWD && rs_fwd_left_reg != 32'd0 && !rf_valid_reg) begin
                        // the round's own descriptors are all out
                        rf_valid_reg <= 1'b1;
                        f_flags_reg  <= h_flags_reg;
                        f_hop_reg    <= h_hop_reg + 8'd1;
                        f_chunk_reg  <= h_chunk_reg;
                        f_offset_reg <= h_offset_reg;
                        f_len_reg    <= h_length_reg;
                        d_state_reg  <= D_RS_PAY;
                    end
                end
                D_RS_PAY: begin
                    if (pay_fire && s_pay_tlast) begin
                        d_state_reg <= D_IDLE;
                    end
                end
                D_AG_WAIT: begin
                    // a run's first packet starts its write run (the previous run finished); a
                    // packet to forward waits for the round's own descriptors
                    if ((aw_left_reg != 32'd0 || (wr_addr_ok && walk_ready && awr_ready && !wr_busy
                                                  && !wr_start_reg && !walk_adv_reg && !awr_next_reg))
                        && (!h_fwd_reg || (ag_dm_reg == DM_FWD && ag_fwd_left_reg != 32'd0 && !af_valid_reg))) begin
                        if (aw_left_reg == 32'd0) begin
                            wr_start_reg <= 1'b1;
                            aw_left_reg  <= awr_bq - 32'd1;
                        end else begin
                            aw_left_reg  <= aw_left_reg - 32'd1;
                        end
                        if (h_fwd_reg) begin
                            af_valid_reg <= 1'b1;
                            f_flags_reg  <= h_flags_reg;
                            f_hop_reg    <= h_hop_reg + 8'd1;
                            f_chunk_reg  <= h_chunk_reg;
                            f_offset_reg <= h_offset_reg;
                            f_len_reg    <= h_length_reg;
                        end
                        d_state_reg <= D_AG_PAY;
                    end
                end
                D_AG_PAY: begin
                    if (wr_start_reg) begin
                        walk_adv_reg <= 1'b1;  // the engine took the address with its start
                    end
                    if (pay_fire && s_pay_tlast) begin
                        d_state_reg <= D_IDLE;
                        if (h_flags_reg[0]) begin
                            ag_chunks_reg <= ag_chunks_reg + 8'd1;
                        end
                        if (aw_left_reg == 32'd0) begin
                            // the run is complete; after the round's N - 1 runs the walker skips
                            // chunk r (this card's own) back to r - 1, and the next round is sized
                            if (aw_runs_reg == 8'd1) begin
                                aw_runs_reg  <= owner_hop_reg + 8'd1;
                                walk_adv_reg <= 1'b1;
                                awr_next_reg <= !awr_last;
                            end else begin
                                aw_runs_reg <= aw_runs_reg - 8'd1;
                            end
                        end
                    end
                end
                D_DROP: begin
                    if (pay_fire && s_pay_tlast) begin
                        d_state_reg <= D_IDLE;
                    end
                end
                default: d_state_reg <= D_IDLE;
            endcase
        end
    end

    assign s_hdr_ready = hdr_take_reg;

    /* payload routing */
    wire in_rs  = d_state_reg == D_RS_PAY;
    wire in_ag  = d_state_reg == D_AG_PAY && !wr_start_reg;  // the engine's FIFO clears on start
    // AG: every beat to memory and, when forwarded, to the AG transmit side; each side takes it
    // in its own clock (a beat already taken by one is marked), so neither TVALID ever drops
    reg  agw_done_reg, agt_done_reg;
    wire ag_w_valid = s_pay_tvalid && in_ag && !agw_done_reg;
    // (a forwarded beat goes only once the round's own payload is out: the transmit side's order)
    wire ag_t_valid = s_pay_tvalid && in_ag && h_fwd_reg && !agt_done_reg && ag_fwd_mode_reg;
    wire ag_w_ok    = agw_done_reg || wr_s_ready;
    wire ag_t_ok    = !h_fwd_reg || agt_done_reg || (m_ag_axis_tready && ag_fwd_mode_reg);
    wire ag_ready   = in_ag && ag_w_ok && ag_t_ok;

    always @(posedge clk) begin
        if (rst || go || (s_pay_tvalid && ag_ready)) begin
            agw_done_reg <= 1'b0;
            agt_done_reg <= 1'b0;
        end else begin
            if (ag_w_valid && wr_s_ready) agw_done_reg <= 1'b1;
            if (ag_t_valid && m_ag_axis_tready) agt_done_reg <= 1'b1;
        end
    end

    assign s_pay_tready = (in_rs && red_a_tready) || ag_ready || d_state_reg == D_DROP;

    /* ---- the adders ---- */
    onic_net_reduce #(
        .WIRE_BF16(WIRE_BF16),
        .USER_WIDTH(1)
    ) reduce_inst (
        .clk(clk), .rst(rst),
        .s_a_tdata(s_pay_tdata), .s_a_tkeep(s_pay_tkeep),
        // the owner's stream ends at the chunk's end, a forwarded packet at its own
        .s_a_tlast(s_pay_tlast && (!h_owner_reg || h_flags_reg[0])),
        .s_a_tuser(h_owner_reg), .s_a_tvalid(s_pay_tvalid && in_rs), .s_a_tready(red_a_tready),
        .s_b_tdata(lg_tdata), .s_b_tvalid(lg_tvalid && !lg_to_gen_reg && run_reg), .s_b_tready(red_b_tready),
        .m_tdata(red_tdata), .m_tkeep(red_tkeep), .m_tlast(red_tlast), .m_tuser(red_tuser),
        .m_tvalid(red_tvalid), .m_tready(red_tuser[0] ? m_grad_tready : (m_rs_axis_tready && rs_fwd_mode_reg))
    );

    assign lg_tready = lg_to_gen_reg ? rg_tready : (red_b_tready && in_rs);

    assign m_grad_tdata  = red_tdata;
    assign m_grad_tkeep  = red_tkeep;
    assign m_grad_tlast  = red_tlast;
    assign m_grad_tvalid = red_tvalid && red_tuser[0];

    /* ---- transmit side: hop 0 first, then the forwarded packets ---- */
    assign m_rs_desc_dtype  = WIRE_CODE;
    assign m_rs_desc_flags  = rf_valid_reg ? f_flags_reg : rg_d_flags;
    assign m_rs_desc_hop    = rf_valid_reg ? f_hop_reg : rg_d_hop;
    assign m_rs_desc_chunk  = rf_valid_reg ? f_chunk_reg : rg_d_chunk;
    assign m_rs_desc_seq    = rs_seq_reg;
    assign m_rs_desc_offset = rf_valid_reg ? f_offset_reg : rg_d_offset;
    assign m_rs_desc_len    = rf_valid_reg ? f_len_reg : rg_d_len;
    assign m_rs_desc_valid  = rf_valid_reg || rg_d_valid;

    assign m_rs_axis_tdata  = rs_fwd_mode_reg ? red_tdata : rg_tdata;
    assign m_rs_axis_tkeep  = rs_fwd_mode_reg ? red_tkeep : rg_tkeep;
    assign m_rs_axis_tlast  = rs_fwd_mode_reg ? red_tlast : rg_tlast;
    assign m_rs_axis_tvalid = rs_fwd_mode_reg ? (red_tvalid && !red_tuser[0]) : rg_tvalid;

    assign m_ag_desc_dtype  = PARAM_CODE;
    assign m_ag_desc_flags  = af_valid_reg ? f_flags_reg : ao_d_flags;
    assign m_ag_desc_hop    = af_valid_reg ? f_hop_reg : ao_d_hop;
    assign m_ag_desc_chunk  = af_valid_reg ? f_chunk_reg : ao_d_chunk;
    assign m_ag_desc_seq    = ag_seq_reg;
    assign m_ag_desc_offset = af_valid_reg ? f_offset_reg : ao_d_offset;
    assign m_ag_desc_len    = af_valid_reg ? f_len_reg : ao_d_len;
    assign m_ag_desc_valid  = af_valid_reg || ao_d_valid;

    assign m_ag_axis_tdata  = ag_fwd_mode_reg ? s_pay_tdata : ao_tdata;
    assign m_ag_axis_tkeep  = ag_fwd_mode_reg ? s_pay_tkeep : ao_tkeep;
    assign m_ag_axis_tlast  = ag_fwd_mode_reg ? s_pay_tlast : ao_tlast;
    assign m_ag_axis_tvalid = ag_fwd_mode_reg ? ag_t_valid : ao_tvalid;

    /* ---- received AG runs into card memory ---- */
    wire [STRIPES-1:0]     wr_busy_k, wr_err_k, sw_valid, sw_ready;
    wire [511:0]           sw_data;
    wire [STRIPES*64-1:0]  wst_addr;
    wire [STRIPES*32-1:0]  wst_count;
    wire [2:0]             wst_turn, wst_last;

    assign wr_busy = |wr_busy_k;
    assign wr_err  = |wr_err_k;

    always @(posedge clk) begin
        wr_first_reg <= walk_addr[37:6] + awr_off_beats;
        wr_ok_sr     <= {wr_ok_sr[2:0], walk_ready && awr_ready && !walk_adv_reg && !awr_next_reg};
    end

    // the walker's base is 0: its address is the chunk's first beat x 64
    onic_net_chunk_walk ag_walk_inst (
        .clk(clk), .rst(rst),
        .start(go),
        .base(64'd0),
        .rank(cfg_rank),
        .world(cfg_world),
        .chunk_beats(ag_beats_reg),
        .advance(walk_adv_reg),
        .ready(walk_ready),
        .addr(walk_addr)
    );

    onic_net_stripe_run #(
        .STRIPES(STRIPES)
    ) wr_run_inst (
        .clk(clk),
        .cfg_base(cfg_gather_addr),
        .first(wr_first_reg),
        .beats(awr_run_beats),
        .addr(wst_addr),
        .count(wst_count),
        .turn(wst_turn),
        .last(wst_last)
    );

    // the run's beats dealt to the stripes from stripe g0 mod STRIPES
    onic_beat_split #(
        .STRIPES(STRIPES)
    ) split_inst (
        .clk(clk), .rst(rst),
        .clear(wr_start_reg),
        .start_turn({2'd0, wst_turn}),
        .s_data(s_pay_tdata),
        .s_valid(ag_w_valid),
        .s_ready(wr_s_ready),
        .m_data(sw_data),
        .m_valid(sw_valid),
        .m_ready(sw_ready)
    );

    genvar k;
    generate
        for (k = 0; k < STRIPES; k = k + 1) begin : g_wr
            localparam [2:0] KT = k;
            // several stripes: each engine on its own registered copy of the reset (the reader's rule)
            wire rst_eng;
            if (STRIPES == 1) begin : g_rst
                assign rst_eng = rst;
            end else begin : g_rst_copy
                onic_dup_reg rst_copy (.clk(clk), .d(rst), .q(rst_eng));
            end
            onic_axi_wr #(
                .FIFO_LOG2(WR_FIFO_LOG2),
                .MAX_BURST(MAX_BURST),
                .ID_BITS(ID_BITS)
            ) wr_inst (
                .clk(clk), .rst(rst_eng),
                // a stripe with no beat in the run is not started
                .start(wr_start_reg && wst_count[k*32 +: 32] != 32'd0),
                .addr(wst_addr[k*64 +: 64]),
                .beats(wst_count[k*32 +: 32]),
                .last_bytes((awr_last && wst_last == KT) ? ag_last_bytes_reg : 7'd64),
                .busy(wr_busy_k[k]),
                .suppress(1'b0),
                .resp_err(wr_err_k[k]),
                .s_data(sw_data),
                .s_valid(sw_valid[k]),
                .s_ready(sw_ready[k]),
                .m_axi_awid(m_axi_gather_awid[k*ID_BITS +: ID_BITS]),
                .m_axi_awaddr(m_axi_gather_awaddr[k*64 +: 64]),
                .m_axi_awlen(m_axi_gather_awlen[k*8 +: 8]),
                .m_axi_awsize(m_axi_gather_awsize[k*3 +: 3]),
                .m_axi_awburst(m_axi_gather_awburst[k*2 +: 2]),
                .m_axi_awlock(m_axi_gather_awlock[k]),
                .m_axi_awcache(m_axi_gather_awcache[k*4 +: 4]),
                .m_axi_awprot(m_axi_gather_awprot[k*3 +: 3]),
                .m_axi_awqos(m_axi_gather_awqos[k*4 +: 4]),
                .m_axi_awvalid(m_axi_gather_awvalid[k]),
                .m_axi_awready(m_axi_gather_awready[k]),
                .m_axi_wdata(m_axi_gather_wdata[k*512 +: 512]),
                .m_axi_wstrb(m_axi_gather_wstrb[k*64 +: 64]),
                .m_axi_wlast(m_axi_gather_wlast[k]),
                .m_axi_wvalid(m_axi_gather_wvalid[k]),
                .m_axi_wready(m_axi_gather_wready[k]),
                .m_axi_bid(m_axi_gather_bid[k*ID_BITS +: ID_BITS]),
                .m_axi_bresp(m_axi_gather_bresp[k*2 +: 2]),
                .m_axi_bvalid(m_axi_gather_bvalid[k]),
                .m_axi_bready(m_axi_gather_bready[k])
            );
        end
    endgenerate

    /* ---- status ---- */
    reg rd_err_reg, wr_err_reg;
    always @(posedge clk) begin
        if (rst || go) begin
            rd_err_reg <= 1'b0;
            wr_err_reg <= 1'b0;
        end else begin
            if (rd_err) rd_err_reg <= 1'b1;
            if (wr_err) wr_err_reg <= 1'b1;
        end
    end

    reg ag_done_reg;
    always @(posedge clk) begin
        ag_done_reg <= run_reg && !go && ag_dm_reg == DM_END && !ag_fwd_mode_reg && !ag_pp_armed_reg
                       && ag_chunks_reg == owner_hop_reg + 8'd1
                       && !wr_busy && !wr_start_reg && !af_valid_reg && d_state_reg == D_IDLE;
    end

    assign rs_done = rs_done_reg && run_reg;
    assign ag_done = ag_done_reg;
    assign errors  = {wr_err_reg, rd_err_reg, rg_err, ag_err, err_op_reg};

    wire _unused_ok = &{1'b0, walk_addr[63:38], walk_addr[5:0], lg_done, s_param_tkeep, cfg_chunk_elems[31:30], rg_d_dtype, ao_d_dtype, h_opcode_reg, h_length_reg,
                       h_seq_reg, rg_d_offset[0], rsr_bq, rsr_off_beats, rsr_run_beats, agr_bq, agr_off_beats,
                       agr_run_beats, awr_fwd, awr_off_elems, awr_run_bytes, 1'b0};

endmodule

`resetall
