// OptimusNIC: ring-protocol receive path (parse, verdict, store-and-forward frame buffer)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The card's receive side (docs/design.md 8): the 100G MAC's receive AXI4-Stream (512-bit, no
 * TREADY, TUSER = frame-check failed on the last beat) in; out, per delivered frame, its
 * decoded header on m_axis_hdr_* and its payload beats (bytes 64.., beat-aligned as in card
 * memory, TLAST on the last; none for a frame without payload) on m_axis_payload_*, both
 * with back-pressure; the replies due (ACK/NAK/re-ACK with the credit) on evt_*; counters.
 *   onic_net_rx_parse  first beat: field checks, IPv4 checksum (5 stages); UDP checksum
 *   onic_net_rx_seq    drop causes in the codec's order, go-back-N per flow, replies, counters
 *   onic_net_rx_fifo   payload beats, committed or discarded whole at the frame's end
 *   onic_fifo          the headers of delivered frames (2^SLOT_LOG2 slots: the credit)
 * A frame is delivered only whole: a failed FCS, any check, or no room (payload beats or a
 * header slot; the MAC cannot wait) drops it and counts it by cause. The credit counts frames,
 * each flow's first one against an empty buffer: with the payload RAM at least (2 x 2^SLOT_LOG2 + 1)
 * x FRAME_BEATS beats (two flows of a peer at once: onic_net_kernel), peers within their credits
 * never overflow it.
 */
module onic_net_rx #(
    // log2 of the payload buffer in 512-bit beats
    parameter integer PAYLOAD_DEPTH_LOG2 = 10,
    // log2 of the frames the buffer holds (header slots): the credit advertised
    parameter integer SLOT_LOG2 = 5,
    // the largest payload of a data frame, in beats (22 for 1408 bytes)
    parameter integer FRAME_BEATS = 22,
    // UDP destination port of ring frames
    parameter [15:0]  UDP_PORT = 16'h4F4E,
    // clocks a coalesced ACK may be held at most (onic_net_rx_seq)
    parameter integer ACK_HOLD = 256
) (
    input  wire          clk,
    input  wire          rst,

    /* configuration (steady while frames arrive) */
    input  wire [47:0]   local_mac,
    input  wire [31:0]   local_ip,
    input  wire [15:0]   local_comm,
    input  wire          step_start,
    input  wire [31:0]   step_id,
    input  wire [31:0]   step_next,      // step_id's value from the next clock on (onic_net_rx_seq)
    // accepted frames per cumulative ACK (0, 1: every frame; onic_net_rx_seq)
    input  wire [7:0]    cfg_ack_every,
    // N - 2: a flow's final packet is its LAST frame at this hop (its ACK goes twice; onic_net_rx_seq)
    input  wire [7:0]    cfg_last_hop,

    /* MAC receive stream (no tready) */
    input  wire [511:0]  s_axis_tdata,
    input  wire [63:0]   s_axis_tkeep,
    input  wire          s_axis_tvalid,
    input  wire          s_axis_tlast,
    input  wire          s_axis_tuser,

    /* delivered headers */
    output wire          m_axis_hdr_tvalid,
    input  wire          m_axis_hdr_tready,
    output wire [47:0]   m_axis_hdr_src_mac,
    output wire [31:0]   m_axis_hdr_src_ip,
    output wire [15:0]   m_axis_hdr_src_port,
    output wire [3:0]    m_axis_hdr_version,
    output wire [3:0]    m_axis_hdr_opcode,
    output wire [1:0]    m_axis_hdr_dtype,
    output wire [5:0]    m_axis_hdr_flags,
    output wire [15:0]   m_axis_hdr_comm,
    output wire [7:0]    m_axis_hdr_src,
    output wire [7:0]    m_axis_hdr_hop,
    output wire [15:0]   m_axis_hdr_chunk,
    output wire [31:0]   m_axis_hdr_step,
    output wire [31:0]   m_axis_hdr_seq,
    output wire [31:0]   m_axis_hdr_offset,
    output wire [15:0]   m_axis_hdr_length,

    /* delivered payload beats */
    output wire [511:0]  m_axis_payload_tdata,
    output wire [63:0]   m_axis_payload_tkeep,
    output wire          m_axis_payload_tlast,
    output wire          m_axis_payload_tvalid,
    input  wire          m_axis_payload_tready,

    /* replies due (see onic_net_rx_seq) */
    output wire          evt_valid,
    input  wire          evt_ready,
    output wire          evt_nak,
    output wire [1:0]    evt_flow,
    output wire [31:0]   evt_step,
    output wire [31:0]   evt_seq,
    output wire [31:0]   evt_credit,
    output wire          evt_now,        // evt_step == step_id, from registers
    input  wire [31:0]   ack_credit,     // the credit the reply taken carries

    /* counters */
    output wire [31:0]   frames_in,
    output wire [31:0]   bytes_in,
    output wire [31:0]   frames_accepted,
    output wire [31:0]   dropped_truncated,
    output wire [31:0]   dropped_fcs,
    output wire [31:0]   dropped_mac,
    output wire [31:0]   dropped_ethertype,
    output wire [31:0]   dropped_ip_header,
    output wire [31:0]   dropped_ip_checksum,
    output wire [31:0]   dropped_ip_address,
    output wire [31:0]   dropped_protocol,
    output wire [31:0]   dropped_port,
    output wire [31:0]   dropped_version,
    output wire [31:0]   dropped_opcode,
    output wire [31:0]   dropped_dtype,
    output wire [31:0]   dropped_udp_checksum,
    output wire [31:0]   dropped_comm,
    output wire [31:0]   dropped_step,
    output wire [31:0]   dropped_previous_step,
    output wire [31:0]   dropped_duplicate,
    output wire [31:0]   dropped_gap,
    output wire [31:0]   dropped_overflow
);

    initial begin
        if (SLOT_LOG2 < 1 || SLOT_LOG2 > 12 || FRAME_BEATS < 1) begin
            $error("SLOT_LOG2 must be 1..12 and FRAME_BEATS >= 1 (instance %m)");
            $finish;
        end
        if ((1 << PAYLOAD_DEPTH_LOG2) < (1 << SLOT_LOG2) * FRAME_BEATS) begin
            $error("the payload buffer must hold 2^SLOT_LOG2 frames of FRAME_BEATS beats (instance %m)");
            $finish;
        end
    end

    wire [511:0] p_data;
    wire [63:0]  p_keep;
    wire         p_valid, p_last, p_user, p_first;
    wire         p_bad_mac, p_bad_ethertype, p_bad_ip_header, p_bad_ip_checksum, p_bad_ip_address;
    wire         p_bad_protocol, p_short_ip_len, p_bad_port, p_bad_udp_len, p_bad_version;
    wire         p_bad_opcode, p_bad_dtype, p_bad_length, p_bad_comm;
    wire [10:0]  p_exp_beats;
    wire [63:0]  p_exp_keep;
    wire         p_bad_udp_csum;

    onic_net_rx_parse #(
        .UDP_PORT(UDP_PORT),
        .VERSION(4'd1)
    ) parse (
        .clk(clk), .rst(rst),
        .local_mac(local_mac), .local_ip(local_ip), .local_comm(local_comm),
        .s_axis_tdata(s_axis_tdata), .s_axis_tkeep(s_axis_tkeep), .s_axis_tvalid(s_axis_tvalid),
        .s_axis_tlast(s_axis_tlast), .s_axis_tuser(s_axis_tuser),
        .m_data(p_data), .m_keep(p_keep), .m_valid(p_valid), .m_last(p_last), .m_user(p_user),
        .m_first(p_first), .m_bad_mac(p_bad_mac), .m_bad_ethertype(p_bad_ethertype),
        .m_bad_ip_header(p_bad_ip_header), .m_bad_ip_checksum(p_bad_ip_checksum),
        .m_bad_ip_address(p_bad_ip_address), .m_bad_protocol(p_bad_protocol),
        .m_short_ip_len(p_short_ip_len), .m_bad_port(p_bad_port), .m_bad_udp_len(p_bad_udp_len),
        .m_bad_version(p_bad_version), .m_bad_opcode(p_bad_opcode), .m_bad_dtype(p_bad_dtype),
        .m_bad_length(p_bad_length), .m_bad_comm(p_bad_comm),
        .m_exp_beats(p_exp_beats), .m_exp_keep(p_exp_keep), .m_bad_udp_csum(p_bad_udp_csum)
    );

    wire [511:0]          b_data;
    wire [63:0]           b_keep;
    wire                  b_last, b_valid, b_end, b_commit, b_fits;
    wire [271:0]          h_data;
    wire                  h_push, h_ready;
    wire [SLOT_LOG2:0]    h_count;

    onic_net_rx_seq #(
        .SLOT_LOG2(SLOT_LOG2),
        .ACK_HOLD(ACK_HOLD)
    ) seq (
        .clk(clk), .rst(rst), .step_start(step_start), .step_id(step_id), .step_next(step_next),
        .cfg_ack_every(cfg_ack_every), .ack_credit(ack_credit), .cfg_last_hop(cfg_last_hop),
        .s_data(p_data), .s_keep(p_keep), .s_valid(p_valid), .s_last(p_last), .s_user(p_user),
        .s_first(p_first), .s_bad_mac(p_bad_mac), .s_bad_ethertype(p_bad_ethertype),
        .s_bad_ip_header(p_bad_ip_header), .s_bad_ip_checksum(p_bad_ip_checksum),
        .s_bad_ip_address(p_bad_ip_address), .s_bad_protocol(p_bad_protocol),
        .s_short_ip_len(p_short_ip_len), .s_bad_port(p_bad_port), .s_bad_udp_len(p_bad_udp_len),
        .s_bad_version(p_bad_version), .s_bad_opcode(p_bad_opcode), .s_bad_dtype(p_bad_dtype),
        .s_bad_length(p_bad_length), .s_bad_comm(p_bad_comm),
        .s_exp_beats(p_exp_beats), .s_exp_keep(p_exp_keep), .s_bad_udp_csum(p_bad_udp_csum),
        .buf_data(b_data), .buf_keep(b_keep), .buf_last(b_last), .buf_valid(b_valid),
        .buf_end(b_end), .buf_commit(b_commit), .buf_fits(b_fits),
        .hdr_data(h_data), .hdr_push(h_push), .hdr_ready(h_ready), .hdr_count(h_count),
        .evt_valid(evt_valid), .evt_ready(evt_ready), .evt_nak(evt_nak), .evt_flow(evt_flow),
        .evt_step(evt_step), .evt_seq(evt_seq), .evt_credit(evt_credit), .evt_now(evt_now),
        .frames_in(frames_in), .bytes_in(bytes_in), .frames_accepted(frames_accepted),
        .dropped_truncated(dropped_truncated), .dropped_fcs(dropped_fcs), .dropped_mac(dropped_mac),
        .dropped_ethertype(dropped_ethertype), .dropped_ip_header(dropped_ip_header),
        .dropped_ip_checksum(dropped_ip_checksum), .dropped_ip_address(dropped_ip_address),
        .dropped_protocol(dropped_protocol), .dropped_port(dropped_port),
        .dropped_version(dropped_version), .dropped_opcode(dropped_opcode),
        .dropped_dtype(dropped_dtype), .dropped_udp_checksum(dropped_udp_checksum),
        .dropped_comm(dropped_comm), .dropped_step(dropped_step),
        .dropped_previous_step(dropped_previous_step), .dropped_duplicate(dropped_duplicate),
        .dropped_gap(dropped_gap), .dropped_overflow(dropped_overflow)
    );

    /* verilator lint_off PINCONNECTEMPTY */
    onic_net_rx_fifo #(
        .DATA_W(512),
        .KEEP_W(64),
        .DEPTH_LOG2(PAYLOAD_DEPTH_LOG2)
    ) payload_buf (
        .clk(clk), .rst(rst),
        .wr_data(b_data), .wr_keep(b_keep), .wr_last(b_last), .wr_valid(b_valid),
        .wr_end(b_end), .wr_commit(b_commit), .wr_fits(b_fits),
        .m_axis_tdata(m_axis_payload_tdata), .m_axis_tkeep(m_axis_payload_tkeep),
        .m_axis_tlast(m_axis_payload_tlast), .m_axis_tvalid(m_axis_payload_tvalid),
        .m_axis_tready(m_axis_payload_tready),
        .count()
    );
    /* verilator lint_on PINCONNECTEMPTY */

    wire [271:0] h_out;
    wire         h_in_ready;

    onic_fifo #(
        .WIDTH(272),
        .DEPTH_LOG2(SLOT_LOG2)
    ) hdr_buf (
        .clk(clk), .rst(rst), .clear(1'b0),
        .s_data(h_data), .s_valid(h_push), .s_ready(h_in_ready),
        .m_data(h_out), .m_valid(m_axis_hdr_tvalid), .m_ready(m_axis_hdr_tready),
        .count(h_count)
    );

    assign h_ready = h_in_ready;

    // h_out: src MAC, src IP, src port, version|opcode, dtype|flags, comm, src, hop, chunk,
    // step, seq, offset, length (from the top bit down)
    assign m_axis_hdr_src_mac  = h_out[271:224];
    assign m_axis_hdr_src_ip   = h_out[223:192];
    assign m_axis_hdr_src_port = h_out[191:176];
    assign m_axis_hdr_version  = h_out[175:172];
    assign m_axis_hdr_opcode   = h_out[171:168];
    assign m_axis_hdr_dtype    = h_out[167:166];
    assign m_axis_hdr_flags    = h_out[165:160];
    assign m_axis_hdr_comm     = h_out[159:144];
    assign m_axis_hdr_src      = h_out[143:136];
    assign m_axis_hdr_hop      = h_out[135:128];
    assign m_axis_hdr_chunk    = h_out[127:112];
    assign m_axis_hdr_step     = h_out[111:80];
    assign m_axis_hdr_seq      = h_out[79:48];
    assign m_axis_hdr_offset   = h_out[47:16];
    assign m_axis_hdr_length   = h_out[15:0];

endmodule

`resetall
