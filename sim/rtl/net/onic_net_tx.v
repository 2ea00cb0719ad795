// OptimusNIC: ring protocol transmit side (headers, two go-back-N flows, arbiter)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The card's transmit path of docs/design.md 8 (sim/rtl/net/README.md "Transmit"):
 *
 *   s_rs_desc_* ─> onic_net_tx_header ─> onic_net_tx_retx (RS) ─┐
 *   s_rs_axis_* (payload) ─────────────────────^                 │
 *   s_ag_desc_* ─> onic_net_tx_header ─> onic_net_tx_retx (AG) ─┼─> onic_net_tx_arb ─> m_axis_* (MAC)
 *   s_ag_axis_* (payload) ─────────────────────^                 │
 *   s_ctl_* (ACK/NAK to send) ─> onic_net_tx_header ─────────────┘  (one 64-byte beat each)
 *
 * Data packets of a flow enter in sequence order from 0 after `start` (seq = hop x packets per
 * chunk + index, so each flow's packets are numbered 0, 1, 2, ...): a descriptor (the header's
 * per-packet fields; opcode and step are set here) and the payload, LAST on its last beat. The
 * The two-phase step's scalar flow (design.md 8.1) borrows the AG sender: its flow is idle until
 * the update, which waits for every scalar entry. Its packets enter on s_ag_* with
 * s_ag_desc_scalar set (opcode SCALAR; seq from 0); once every one is acknowledged `start_ag`
 * restarts the AG sender alone (sequence numbers from 0, the credit from cfg_ag_credit, its
 * sticky errors cleared; its counters run on) for the all-gather. Routing the scalar flow's
 * ACK/NAKs to s_ag_ack_* during the exchange is the caller's.
 * ACK/NAKs the receive side takes for this card's flows arrive on s_rs_ack_* / s_ag_ack_*;
 * the ones it wants sent (to the predecessor, cfg_pred_*) arrive on s_ctl_* (flow 1 RS, 2 AG,
 * 3 scalar; seq = the next expected,
 * credit = free slots; dtype, hop, chunk and length 0).
 *
 * Counter buses (32 bits each, saturating, cleared by rst), counter k at [32k +: 32]:
 * rs_counters / ag_counters: 0 frames sent, 1 payload bytes sent, 2 retransmitted frames,
 * 3 retransmitted bytes, 4 timeouts, 5 ACKs received, 6 NAKs received, 7 stale replies;
 * tx_counters: 0 ACK/NAK frames, 1 RS frames, 2 AG frames (into the frame FIFO).
 * Reset: rst is registered once per block (hold it 2 clocks or more).
 * State buses: [31:0] base, [63:32] next, [95:64] sent high, [127:96] packets provided.
 */
module onic_net_tx #(
    // log2 of the packets each retransmit buffer holds (the largest useful window)
    parameter integer SLOTS_LOG2 = 7,
    // log2 of the beats per retransmit slot (header beat + payload beats of the largest packet)
    parameter integer BEATS_LOG2 = 5,
    // 1: the retransmit buffers in UltraRAM (8 URAM288 each at the defaults), 0: block RAM
    parameter integer URAM = 1,
    // log2 of the output frame FIFO's depth in beats (holds the largest frame)
    parameter integer FIFO_LOG2 = 9
) (
    input  wire          clk,
    input  wire          rst,

    /* configuration registers */
    input  wire [47:0]   cfg_local_mac,
    input  wire [47:0]   cfg_peer_mac,     // the successor's
    input  wire [31:0]   cfg_local_ip,
    input  wire [31:0]   cfg_peer_ip,
    input  wire [47:0]   cfg_pred_mac,     // the predecessor's: ACK/NAKs answer its frames
    input  wire [31:0]   cfg_pred_ip,
    input  wire [15:0]   cfg_udp_sport,
    input  wire [15:0]   cfg_comm,
    input  wire [7:0]    cfg_rank,
    input  wire [31:0]   cfg_step,
    input  wire [31:0]   cfg_rto,          // retransmission timeout, clocks
    input  wire [31:0]   cfg_rs_window,
    input  wire [31:0]   cfg_rs_credit,    // the successor's RS receive slots
    input  wire [31:0]   cfg_ag_window,
    input  wire [31:0]   cfg_ag_credit,
    input  wire          start,            // pulse: a new step, both flows from sequence number 0
    input  wire          start_ag,         // pulse: the AG sender alone from sequence number 0 (two-phase step)

    /* reduce-scatter packets: descriptor, then payload */
    input  wire [1:0]    s_rs_desc_dtype,
    input  wire [5:0]    s_rs_desc_flags,
    input  wire [7:0]    s_rs_desc_hop,
    input  wire [15:0]   s_rs_desc_chunk,
    input  wire [31:0]   s_rs_desc_seq,
    input  wire [31:0]   s_rs_desc_offset,
    input  wire [15:0]   s_rs_desc_len,
    input  wire          s_rs_desc_valid,
    output wire          s_rs_desc_ready,
    input  wire [511:0]  s_rs_axis_tdata,
    input  wire [63:0]   s_rs_axis_tkeep,
    input  wire          s_rs_axis_tlast,
    input  wire          s_rs_axis_tvalid,
    output wire          s_rs_axis_tready,

    /* all-gather packets (or the two-phase step's scalar packets): descriptor, then payload */
    input  wire          s_ag_desc_scalar, // 1: a scalar packet (opcode SCALAR), 0: an AG packet
    input  wire [1:0]    s_ag_desc_dtype,
    input  wire [5:0]    s_ag_desc_flags,
    input  wire [7:0]    s_ag_desc_hop,
    input  wire [15:0]   s_ag_desc_chunk,
    input  wire [31:0]   s_ag_desc_seq,
    input  wire [31:0]   s_ag_desc_offset,
    input  wire [15:0]   s_ag_desc_len,
    input  wire          s_ag_desc_valid,
    output wire          s_ag_desc_ready,
    input  wire [511:0]  s_ag_axis_tdata,
    input  wire [63:0]   s_ag_axis_tkeep,
    input  wire          s_ag_axis_tlast,
    input  wire          s_ag_axis_tvalid,
    output wire          s_ag_axis_tready,

    /* ACK/NAKs received for the RS flow and for the AG flow */
    input  wire          s_rs_ack_valid,
    output wire          s_rs_ack_ready,
    input  wire          s_rs_ack_nak,
    input  wire [31:0]   s_rs_ack_step,
    input  wire [31:0]   s_rs_ack_seq,
    input  wire [31:0]   s_rs_ack_credit,
    input  wire          s_ag_ack_valid,
    output wire          s_ag_ack_ready,
    input  wire          s_ag_ack_nak,
    input  wire [31:0]   s_ag_ack_step,
    input  wire [31:0]   s_ag_ack_seq,
    input  wire [31:0]   s_ag_ack_credit,

    /* ACK/NAKs to send (from the receive side) */
    input  wire          s_ctl_valid,
    output wire          s_ctl_ready,
    input  wire          s_ctl_nak,
    input  wire [1:0]    s_ctl_flow,
    input  wire [31:0]   s_ctl_step,
    input  wire [31:0]   s_ctl_seq,
    input  wire [31:0]   s_ctl_credit,

    /* to the MAC's transmit side */
    output wire [511:0]  m_axis_tdata,
    output wire [63:0]   m_axis_tkeep,
    output wire          m_axis_tlast,
    output wire          m_axis_tvalid,
    input  wire          m_axis_tready,

    /* state, errors and counters */
    output wire [127:0]  rs_state,
    output wire [127:0]  ag_state,
    output wire [3:0]    errors,           // RS proto, RS long, AG proto, AG long (sticky)
    output wire [255:0]  rs_counters,
    output wire [255:0]  ag_counters,
    output wire [95:0]   tx_counters
);

    initial begin
        if (SLOTS_LOG2 < 1 || BEATS_LOG2 < 1 || FIFO_LOG2 < BEATS_LOG2) begin
            $error("SLOTS_LOG2, BEATS_LOG2 >= 1 and FIFO_LOG2 >= BEATS_LOG2 (instance %m)");
            $finish;
        end
    end

    localparam [3:0] OP_RS  = 4'd1;
    localparam [3:0] OP_AG  = 4'd2;
    localparam [3:0] OP_ACK = 4'd3;
    localparam [3:0] OP_NAK = 4'd4;
    localparam [3:0] OP_SCALAR = 4'd5;

    /* a registered copy of the reset per block (onic_dup_reg: synthesis keeps each copy) */
    wire rst_rs_hdr_reg, rst_ag_hdr_reg, rst_ctl_hdr_reg, rst_rs_reg, rst_ag_reg, rst_arb_reg;
    onic_dup_reg rst_dup_rs_hdr  (.clk(clk), .d(rst), .q(rst_rs_hdr_reg));
    onic_dup_reg rst_dup_ag_hdr  (.clk(clk), .d(rst), .q(rst_ag_hdr_reg));
    onic_dup_reg rst_dup_ctl_hdr (.clk(clk), .d(rst), .q(rst_ctl_hdr_reg));
    onic_dup_reg rst_dup_rs      (.clk(clk), .d(rst), .q(rst_rs_reg));
    onic_dup_reg rst_dup_ag      (.clk(clk), .d(rst), .q(rst_ag_reg));
    onic_dup_reg rst_dup_arb     (.clk(clk), .d(rst), .q(rst_arb_reg));

    /* header builders */
    wire [511:0] rs_hdr_data, ag_hdr_data, ctl_hdr_data;
    wire         rs_hdr_valid, ag_hdr_valid, ctl_hdr_valid;
    wire         rs_hdr_ready, ag_hdr_ready, ctl_hdr_ready;

    onic_net_tx_header rs_header (
        .clk(clk), .rst(rst_rs_hdr_reg),
        .cfg_local_mac(cfg_local_mac), .cfg_peer_mac(cfg_peer_mac), .cfg_local_ip(cfg_local_ip),
        .cfg_peer_ip(cfg_peer_ip), .cfg_udp_sport(cfg_udp_sport), .cfg_comm(cfg_comm), .cfg_rank(cfg_rank),
        .s_hdr_opcode(OP_RS), .s_hdr_dtype(s_rs_desc_dtype), .s_hdr_flags(s_rs_desc_flags),
        .s_hdr_hop(s_rs_desc_hop), .s_hdr_chunk(s_rs_desc_chunk), .s_hdr_step(cfg_step),
        .s_hdr_seq(s_rs_desc_seq), .s_hdr_offset(s_rs_desc_offset), .s_hdr_len(s_rs_desc_len),
        .s_hdr_valid(s_rs_desc_valid), .s_hdr_ready(s_rs_desc_ready),
        .m_hdr_data(rs_hdr_data), .m_hdr_valid(rs_hdr_valid), .m_hdr_ready(rs_hdr_ready)
    );

    onic_net_tx_header ag_header (
        .clk(clk), .rst(rst_ag_hdr_reg),
        .cfg_local_mac(cfg_local_mac), .cfg_peer_mac(cfg_peer_mac), .cfg_local_ip(cfg_local_ip),
        .cfg_peer_ip(cfg_peer_ip), .cfg_udp_sport(cfg_udp_sport), .cfg_comm(cfg_comm), .cfg_rank(cfg_rank),
        .s_hdr_opcode(s_ag_desc_scalar ? OP_SCALAR : OP_AG), .s_hdr_dtype(s_ag_desc_dtype), .s_hdr_flags(s_ag_desc_flags),
        .s_hdr_hop(s_ag_desc_hop), .s_hdr_chunk(s_ag_desc_chunk), .s_hdr_step(cfg_step),
        .s_hdr_seq(s_ag_desc_seq), .s_hdr_offset(s_ag_desc_offset), .s_hdr_len(s_ag_desc_len),
        .s_hdr_valid(s_ag_desc_valid), .s_hdr_ready(s_ag_desc_ready),
        .m_hdr_data(ag_hdr_data), .m_hdr_valid(ag_hdr_valid), .m_hdr_ready(ag_hdr_ready)
    );

    onic_net_tx_header ctl_header (
        .clk(clk), .rst(rst_ctl_hdr_reg),
        .cfg_local_mac(cfg_local_mac), .cfg_peer_mac(cfg_pred_mac), .cfg_local_ip(cfg_local_ip),
        .cfg_peer_ip(cfg_pred_ip), .cfg_udp_sport(cfg_udp_sport), .cfg_comm(cfg_comm), .cfg_rank(cfg_rank),
        .s_hdr_opcode(s_ctl_nak ? OP_NAK : OP_ACK), .s_hdr_dtype(2'd0), .s_hdr_flags({3'd0, s_ctl_flow, 1'b0}),
        .s_hdr_hop(8'd0), .s_hdr_chunk(16'd0), .s_hdr_step(s_ctl_step),
        .s_hdr_seq(s_ctl_seq), .s_hdr_offset(s_ctl_credit), .s_hdr_len(16'd0),
        .s_hdr_valid(s_ctl_valid), .s_hdr_ready(s_ctl_ready),
        .m_hdr_data(ctl_hdr_data), .m_hdr_valid(ctl_hdr_valid), .m_hdr_ready(ctl_hdr_ready)
    );

    /* the two flows */
    wire [511:0] rs_tdata, ag_tdata;
    wire [63:0]  rs_tkeep, ag_tkeep;
    wire         rs_tlast, ag_tlast, rs_tvalid, ag_tvalid, rs_tready, ag_tready;

    /* verilator lint_off PINCONNECTEMPTY */
    onic_net_tx_retx #(
        .SLOTS_LOG2(SLOTS_LOG2),
        .BEATS_LOG2(BEATS_LOG2),
        .URAM(URAM)
    ) rs_retx (
        .clk(clk), .rst(rst_rs_reg),
        .cfg_window(cfg_rs_window), .cfg_rto(cfg_rto), .cfg_credit(cfg_rs_credit), .cfg_step(cfg_step),
        .start(start),
        .s_hdr_data(rs_hdr_data), .s_hdr_valid(rs_hdr_valid), .s_hdr_ready(rs_hdr_ready),
        .s_axis_tdata(s_rs_axis_tdata), .s_axis_tkeep(s_rs_axis_tkeep), .s_axis_tlast(s_rs_axis_tlast),
        .s_axis_tvalid(s_rs_axis_tvalid), .s_axis_tready(s_rs_axis_tready),
        .s_ack_valid(s_rs_ack_valid), .s_ack_ready(s_rs_ack_ready), .s_ack_nak(s_rs_ack_nak),
        .s_ack_step(s_rs_ack_step), .s_ack_seq(s_rs_ack_seq), .s_ack_credit(s_rs_ack_credit),
        .m_axis_tdata(rs_tdata), .m_axis_tkeep(rs_tkeep), .m_axis_tlast(rs_tlast),
        .m_axis_tvalid(rs_tvalid), .m_axis_tready(rs_tready),
        .stat_base(rs_state[31:0]), .stat_next(rs_state[63:32]), .stat_sent_high(rs_state[95:64]),
        .stat_provided(rs_state[127:96]), .stat_written(), .err_proto(errors[0]), .err_long(errors[1]),
        .cnt_frames(rs_counters[31:0]), .cnt_bytes(rs_counters[63:32]),
        .cnt_retx_frames(rs_counters[95:64]), .cnt_retx_bytes(rs_counters[127:96]),
        .cnt_timeouts(rs_counters[159:128]), .cnt_acks(rs_counters[191:160]),
        .cnt_naks(rs_counters[223:192]), .cnt_stale(rs_counters[255:224])
    );
    /* verilator lint_on PINCONNECTEMPTY */

    /* verilator lint_off PINCONNECTEMPTY */
    onic_net_tx_retx #(
        .SLOTS_LOG2(SLOTS_LOG2),
        .BEATS_LOG2(BEATS_LOG2),
        .URAM(URAM)
    ) ag_retx (
        .clk(clk), .rst(rst_ag_reg),
        .cfg_window(cfg_ag_window), .cfg_rto(cfg_rto), .cfg_credit(cfg_ag_credit), .cfg_step(cfg_step),
        .start(start || start_ag),
        .s_hdr_data(ag_hdr_data), .s_hdr_valid(ag_hdr_valid), .s_hdr_ready(ag_hdr_ready),
        .s_axis_tdata(s_ag_axis_tdata), .s_axis_tkeep(s_ag_axis_tkeep), .s_axis_tlast(s_ag_axis_tlast),
        .s_axis_tvalid(s_ag_axis_tvalid), .s_axis_tready(s_ag_axis_tready),
        .s_ack_valid(s_ag_ack_valid), .s_ack_ready(s_ag_ack_ready), .s_ack_nak(s_ag_ack_nak),
        .s_ack_step(s_ag_ack_step), .s_ack_seq(s_ag_ack_seq), .s_ack_credit(s_ag_ack_credit),
        .m_axis_tdata(ag_tdata), .m_axis_tkeep(ag_tkeep), .m_axis_tlast(ag_tlast),
        .m_axis_tvalid(ag_tvalid), .m_axis_tready(ag_tready),
        .stat_base(ag_state[31:0]), .stat_next(ag_state[63:32]), .stat_sent_high(ag_state[95:64]),
        .stat_provided(ag_state[127:96]), .stat_written(), .err_proto(errors[2]), .err_long(errors[3]),
        .cnt_frames(ag_counters[31:0]), .cnt_bytes(ag_counters[63:32]),
        .cnt_retx_frames(ag_counters[95:64]), .cnt_retx_bytes(ag_counters[127:96]),
        .cnt_timeouts(ag_counters[159:128]), .cnt_acks(ag_counters[191:160]),
        .cnt_naks(ag_counters[223:192]), .cnt_stale(ag_counters[255:224])
    );
    /* verilator lint_on PINCONNECTEMPTY */

    /* the arbiter and frame FIFO */
    onic_net_tx_arb #(
        .FIFO_LOG2(FIFO_LOG2),
        .MAX_FRAME_BEATS(1 << BEATS_LOG2)
    ) arb (
        .clk(clk), .rst(rst_arb_reg),
        .s_ctl_axis_tdata(ctl_hdr_data), .s_ctl_axis_tkeep({64{1'b1}}), .s_ctl_axis_tlast(1'b1),
        .s_ctl_axis_tvalid(ctl_hdr_valid), .s_ctl_axis_tready(ctl_hdr_ready),
        .s_rs_axis_tdata(rs_tdata), .s_rs_axis_tkeep(rs_tkeep), .s_rs_axis_tlast(rs_tlast),
        .s_rs_axis_tvalid(rs_tvalid), .s_rs_axis_tready(rs_tready),
        .s_ag_axis_tdata(ag_tdata), .s_ag_axis_tkeep(ag_tkeep), .s_ag_axis_tlast(ag_tlast),
        .s_ag_axis_tvalid(ag_tvalid), .s_ag_axis_tready(ag_tready),
        .m_axis_tdata(m_axis_tdata), .m_axis_tkeep(m_axis_tkeep), .m_axis_tlast(m_axis_tlast),
        .m_axis_tvalid(m_axis_tvalid), .m_axis_tready(m_axis_tready),
        .cnt_ctl_frames(tx_counters[31:0]), .cnt_rs_frames(tx_counters[63:32]), .cnt_ag_frames(tx_counters[95:64])
    );

endmodule

`resetall
