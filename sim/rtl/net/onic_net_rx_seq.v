// OptimusNIC: ring-protocol receive verdict: drop causes, go-back-N per flow, replies, counters
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Follows onic_net_rx_parse: latches the first beat's fields and checks, writes the payload
 * beats (every beat after the first) tentatively into the frame buffer (onic_net_rx_fifo) one
 * clock later, and at the frame's last beat decides, in one clock from registers:
 *   1. the codec's drop cause, in hls.net.wire.parse_frame's order: FCS (TUSER on the last
 *      beat), truncated (< 14 bytes), MAC, EtherType, truncated (< 34 bytes), IPv4 version/IHL,
 *      header checksum, IP address, protocol, truncated (IPv4 total length below our headers, or
 *      the frame shorter than 14 + IPv4 total length), port, truncated (UDP length), version,
 *      opcode, dtype, truncated (ring length != IPv4 length - 50), the UDP checksum (its
 *      verdict, s_bad_udp_csum, comes a clock after the last beat, at stage W); then the
 *      communicator.
 *      Bytes after the IPv4 length (Ethernet padding) are not delivered, as parse_frame cuts them;
 *   2. for data frames (RS, AG, scalar): the step (current: go on; the previous step: dropped
 *      and re-ACKed with that step's final sequence number, design 8.3; anything else: dropped),
 *      then hls.net.reliability.Receiver per flow: seq == expected is accepted, below is a
 *      duplicate (re-ACK), above is a gap (one NAK per gap), and an accepted frame that does not
 *      fit the buffer (payload beats or a header slot) is an overflow (re-ACK);
 *   3. ACK/NAK frames that pass 1 are delivered (header only) for the transmit side to judge.
 * A delivered frame is committed in the buffer and its header pushed (hdr_push); anything else
 * is discarded whole. Replies: per flow a pending ACK or NAK (coalesced exactly as Receiver's
 * `reply`) and a pending re-ACK of the previous step; evt_* shows the first pending one
 * (previous-step re-ACKs first, then RS, AG, scalar) with the flow's CURRENT next-expected
 * number and credit, and evt_ready takes it (Receiver.take_reply): evt_* may change while
 * evt_valid waits (always the newest state), so it is an event port, not a strict AXI4-Stream.
 * ACK coalescing (cfg_ack_every = K >= 2): an ACK after an accepted frame is held until K frames
 * of its flow were accepted since the flow's last reply, the frame carries LAST (a chunk's end),
 * or it has waited ACK_HOLD clocks; NAKs, duplicate / overflow re-ACKs and previous-step re-ACKs
 * go at once. K drops to half the credit the flow's last reply carried (at least 1), so a sender
 * within that credit is never stalled waiting for a held ACK. A held flow does not block the
 * others' replies. The ACK after a flow's final packet (LAST at hop cfg_last_hop = N - 2) is
 * offered twice, the copy right after the first is taken (Receiver's `final`): nothing follows
 * it that could carry a later ACK, so one lost copy no longer costs the sender a timeout.
 * Counters are 32-bit, saturating, named as hls.net.card's (bytes_in: without the FCS, which
 * the MAC strips; the card counts it). step_start begins step step_id: expected numbers
 * restart at 0 and the old step becomes the previous one. A frame whose end comes after
 * step_start is judged in the new step (its latched comparisons are redone); one ending in the
 * same clock is judged in the old step (its reply is dropped with the old step's replies).
 */
module onic_net_rx_seq #(
    // log2 of the header slots (frames) in the buffer: the credit is the free slots
    parameter integer SLOT_LOG2 = 5,
    // clocks a coalesced ACK may be held at most (cfg_ack_every >= 2); 2..65535
    parameter integer ACK_HOLD = 256
) (
    input  wire                 clk,
    input  wire                 rst,

    /* ACK coalescing: one cumulative ACK per cfg_ack_every accepted frames of a flow (0, 1:
       every frame, Receiver's own rule); ack_credit is the credit the reply taken at evt_ready
       carries (the sender may not run further than that before the next ACK) */
    input  wire [7:0]           cfg_ack_every,
    input  wire [31:0]          ack_credit,
    // the hop of every flow's final packet (N - 2; steady while frames arrive)
    input  wire [7:0]           cfg_last_hop,

    /* step control */
    input  wire                 step_start,
    input  wire [31:0]          step_id,
    input  wire [31:0]          step_next,     // step_id's value from the next clock on (evt_now)

    /* from onic_net_rx_parse */
    input  wire [511:0]         s_data,
    input  wire [63:0]          s_keep,
    input  wire                 s_valid,
    input  wire                 s_last,
    input  wire                 s_user,
    input  wire                 s_first,
    input  wire                 s_bad_mac,
    input  wire                 s_bad_ethertype,
    input  wire                 s_bad_ip_header,
    input  wire                 s_bad_ip_checksum,
    input  wire                 s_bad_ip_address,
    input  wire                 s_bad_protocol,
    input  wire                 s_short_ip_len,
    input  wire                 s_bad_port,
    input  wire                 s_bad_udp_len,
    input  wire                 s_bad_version,
    input  wire                 s_bad_opcode,
    input  wire                 s_bad_dtype,
    input  wire                 s_bad_length,
    input  wire                 s_bad_comm,
    input  wire [10:0]          s_exp_beats,
    input  wire [63:0]          s_exp_keep,
    input  wire                 s_bad_udp_csum,   // at stage W of a frame's last beat (a clock after s_last)

    /* to the payload buffer (onic_net_rx_fifo) */
    output wire [511:0]         buf_data,
    output wire [63:0]          buf_keep,
    output wire                 buf_last,
    output wire                 buf_valid,
    output wire                 buf_end,
    output wire                 buf_commit,
    input  wire                 buf_fits,

    /* to the header buffer: the decoded header of a delivered frame */
    output wire [271:0]         hdr_data,
    output wire                 hdr_push,
    input  wire                 hdr_ready,
    input  wire [SLOT_LOG2:0]   hdr_count,

    /* replies for the transmit side */
    output wire                 evt_valid,
    input  wire                 evt_ready,
    output wire                 evt_nak,       // 0 ACK, 1 NAK
    output wire [1:0]           evt_flow,      // 1 RS, 2 AG, 3 scalar (hls.net.wire.Flow)
    output wire [31:0]          evt_step,
    output wire [31:0]          evt_seq,       // the next sequence number expected
    output wire [31:0]          evt_credit,    // free slots, in packets
    output wire                 evt_now,       // evt_step == step_id, from registered compares

    /* counters (hls.net.card names) */
    output wire [31:0]          frames_in,
    output wire [31:0]          bytes_in,
    output wire [31:0]          frames_accepted,
    output wire [31:0]          dropped_truncated,
    output wire [31:0]          dropped_fcs,
    output wire [31:0]          dropped_mac,
    output wire [31:0]          dropped_ethertype,
    output wire [31:0]          dropped_ip_header,
    output wire [31:0]          dropped_ip_checksum,
    output wire [31:0]          dropped_ip_address,
    output wire [31:0]          dropped_protocol,
    output wire [31:0]          dropped_port,
    output wire [31:0]          dropped_version,
    output wire [31:0]          dropped_opcode,
    output wire [31:0]          dropped_dtype,
    output wire [31:0]          dropped_udp_checksum,
    output wire [31:0]          dropped_comm,
    output wire [31:0]          dropped_step,
    output wire [31:0]          dropped_previous_step,
    output wire [31:0]          dropped_duplicate,
    output wire [31:0]          dropped_gap,
    output wire [31:0]          dropped_overflow
);

    initial begin
        if (SLOT_LOG2 < 1 || SLOT_LOG2 > 16) begin
            $error("SLOT_LOG2 must be 1..16 (instance %m)");
            $finish;
        end
        if (ACK_HOLD < 2 || ACK_HOLD > 65535) begin
            $error("ACK_HOLD must be 2..65535 (instance %m)");
            $finish;
        end
    end

    // verdict codes; 1 .. 19 index the drop counters (19: the UDP checksum, added last)
    localparam [4:0] C_ACCEPT = 5'd0, C_TRUNC = 5'd1, C_FCS = 5'd2, C_MAC = 5'd3, C_ETYPE = 5'd4,
                     C_IPHDR = 5'd5, C_CSUM = 5'd6, C_IPADDR = 5'd7, C_PROTO = 5'd8, C_PORT = 5'd9,
                     C_VER = 5'd10, C_OPC = 5'd11, C_DTYPE = 5'd12, C_COMM = 5'd13, C_STEP = 5'd14,
                     C_PREV = 5'd15, C_DUP = 5'd16, C_GAP = 5'd17, C_OVF = 5'd18, C_UCSUM = 5'd19;
    localparam integer NCNT = 22;  // 19 causes, frames_in (20), bytes_in (21), frames_accepted (0)
    localparam [1:0] R_NONE = 2'd0, R_ACK = 2'd1, R_NAK = 2'd2;

    function [15:0] be16;
        input [511:0] d;
        input integer b;
        begin
            be16 = {d[8*b +: 8], d[8*(b+1) +: 8]};
        end
    endfunction

    function [31:0] be32;
        input [511:0] d;
        input integer b;
        begin
            be32 = {d[8*b +: 8], d[8*(b+1) +: 8], d[8*(b+2) +: 8], d[8*(b+3) +: 8]};
        end
    endfunction

    // bytes in a contiguous TKEEP (ones from bit 0): the position of the first zero
    function [6:0] keep_bytes;
        input [63:0] k;
        integer j, i;
        reg b;
        begin
            keep_bytes = 7'd0;
            keep_bytes[6] = k[63];
            for (j = 0; j < 6; j = j + 1) begin
                b = 1'b0;
                for (i = 0; i < 64; i = i + (2 << j)) begin
                    b = b | (k[i + (1 << j) - 1] & ~k[i + (2 << j) - 1]);
                end
                keep_bytes[j] = b;
            end
        end
    endfunction

    /* per-flow receiver state (flow f in bits [32f +: 32] / [2f +: 2]) */
    reg [95:0] expected_reg;
    reg [95:0] expected1_reg;        // expected_reg + 1 per flow
    reg [95:0] prev_expected_reg;
    reg [5:0]  reply_reg;
    reg [2:0]  nak_sent_reg;
    reg [2:0]  late_reg;             // a re-ACK of the previous step is due
    reg [31:0] cur_step_reg, prev_step_reg;
    reg        cur_valid_reg, prev_valid_reg;

    /* stage W registers the verdict needs at the latch */
    reg [511:0] w_data_reg;
    reg [63:0]  w_keep_reg;
    reg         w_valid_reg, w_last_reg, w_user_reg, w_first_reg;
    wire        accept;
    reg         is_data_reg;
    reg [1:0]   flow_reg;           // 0 RS, 1 AG, 2 scalar

    /* the frame's header, latched at its first beat (cause parts A: before the frame-length
       check, B: after it, C: after the UDP checksum) */
    wire short14 = s_last && !s_keep[13];
    wire short34 = s_last && !s_keep[33];
    wire [4:0] cause_a = short14 ? C_TRUNC : s_bad_mac ? C_MAC : s_bad_ethertype ? C_ETYPE :
                         short34 ? C_TRUNC : s_bad_ip_header ? C_IPHDR : s_bad_ip_checksum ? C_CSUM :
                         s_bad_ip_address ? C_IPADDR : s_bad_protocol ? C_PROTO : C_ACCEPT;
    wire [4:0] cause_b = s_bad_port ? C_PORT : s_bad_udp_len ? C_TRUNC : s_bad_version ? C_VER :
                         s_bad_opcode ? C_OPC : s_bad_dtype ? C_DTYPE : s_bad_length ? C_TRUNC : C_ACCEPT;
    wire [4:0] cause_c = s_bad_comm ? C_COMM : C_ACCEPT;
    wire [3:0]  s_opcode = s_data[8*42 +: 4];
    wire [1:0]  s_flow   = s_opcode == 4'd1 ? 2'd0 : s_opcode == 4'd2 ? 2'd1 : 2'd2;
    wire [31:0] s_step   = be32(s_data, 50);
    wire [31:0] s_seq    = be32(s_data, 54);
    /* seq against every flow's expected number (and + 1, kept in a register of its own), then the
       frame's flow picks one: no flow mux and no adder between the frame's bytes and a compare */
    reg  [2:0]  s_lt_f, s_eq0_f, s_eq1_f;
    integer e;
    always @(*) begin
        for (e = 0; e < 3; e = e + 1) begin
            s_lt_f[e]  = s_seq < expected_reg[32*e +: 32];
            s_eq0_f[e] = s_seq == expected_reg[32*e +: 32];
            s_eq1_f[e] = s_seq == expected1_reg[32*e +: 32];
        end
    end
    wire        s_rs     = s_opcode == 4'd1;
    wire        s_ag     = s_opcode == 4'd2;
    wire        s_lt     = s_rs ? s_lt_f[0] : s_ag ? s_lt_f[1] : s_lt_f[2];
    wire        s_eq0    = s_rs ? s_eq0_f[0] : s_ag ? s_eq0_f[1] : s_eq0_f[2];
    wire        s_eq1    = s_rs ? s_eq1_f[0] : s_ag ? s_eq1_f[1] : s_eq1_f[2];
    // the steps this frame is matched against: the new ones when step_start loads them in this clock
    wire [31:0] m_cur_step  = step_start ? step_id : cur_step_reg;
    wire        m_cur_valid = step_start || cur_valid_reg;
    wire [31:0] m_prev_step = step_start ? cur_step_reg : prev_step_reg;
    wire        m_prev_valid = step_start ? cur_valid_reg : prev_valid_reg;

    wire [31:0] hdr_step;   // the latched frame's step and sequence number (in hdr_reg)
    wire [31:0] hdr_seq;
    // what the frame's end must look like: its IPv4 length, the first beat's or the latched one
    wire [63:0] exp_k   = s_first ? s_exp_keep : exp_keep_reg;
    /* the beat's number (1 at the first; else beat_nx_reg, the number after the last beat's) against
       the IPv4 length's beats (beat > expected, ==) and the TKEEP check, each worked out for the
       first beat and for the others, then picked: no adder or operand mux before the compares */
    wire        b_gt = s_first ? s_exp_beats == 11'd0 : beat_nx_reg > exp_beats_reg;
    wire        b_eq = s_first ? s_exp_beats == 11'd1 : beat_nx_reg == exp_beats_reg;
    wire        k_ok = s_first ? (s_keep & s_exp_keep) == s_exp_keep : (s_keep & exp_keep_reg) == exp_keep_reg;

    reg [271:0] hdr_reg;
    reg [4:0]   cause_a_reg, cause_b_reg, cause_c_reg;
    reg         short_ip_reg;
    reg [10:0]  exp_beats_reg;
    reg [63:0]  exp_keep_reg;
    reg         hdr_ok_reg;         // no header cause: worth buffering
    reg [10:0]  beat_nx_reg;        // the number of the beat now in stage W (1 = the first) + 1
    reg         len_ok_reg;         // the beat in W, if last, ends at or after where IPv4 says
    reg         in_pay_reg;         // the beat in W is within the IPv4 length (not Ethernet padding)
    reg         pay_last_reg;       // ... and the last such beat
    reg [63:0]  pay_keep_reg;       // its TKEEP trimmed to the IPv4 length
    reg         lt0_reg, eq0_reg, eq1_reg;  // seq vs the flow's expected number (and + 1) at the latch
    reg         bump_reg;           // the frame in W at the latch was accepted in this flow
    reg         cur_match_reg, prv_match_reg;
    reg         fin_hop_reg;        // the frame's hop is the last (its LAST frame is the flow's final one)

    always @(posedge clk) begin
        if (s_valid && s_first) begin
            hdr_reg       <= {be32(s_data, 6), be16(s_data, 10), be32(s_data, 26), be16(s_data, 34),        // src MAC, IP, port
                              s_data[8*42 +: 8], s_data[8*43 +: 8], be16(s_data, 44),     // opcode|ver, dtype|flags, comm
                              s_data[8*46 +: 8], s_data[8*47 +: 8], be16(s_data, 48),     // src, hop, chunk
                              be32(s_data, 50), be32(s_data, 54), be32(s_data, 58),       // step, seq, offset
                              be16(s_data, 62)};                                          // length
            cause_a_reg   <= cause_a;
            cause_b_reg   <= cause_b;
            cause_c_reg   <= cause_c;
            short_ip_reg  <= s_short_ip_len;
            exp_beats_reg <= s_exp_beats;
            exp_keep_reg  <= s_exp_keep;
            is_data_reg   <= s_opcode == 4'd1 || s_opcode == 4'd2 || s_opcode == 4'd5;
            flow_reg      <= s_flow;
            hdr_ok_reg    <= cause_a == C_ACCEPT && cause_b == C_ACCEPT && cause_c == C_ACCEPT;
            fin_hop_reg   <= s_data[8*47 +: 8] == cfg_last_hop;
            cur_match_reg <= m_cur_valid && s_step == m_cur_step;
            prv_match_reg <= m_prev_valid && s_step == m_prev_step;
            if (step_start) begin
                // the new step applies to this frame: every expected number restarts at 0
                lt0_reg       <= 1'b0;
                eq0_reg       <= s_seq == 32'd0;
                eq1_reg       <= s_seq == 32'd1;
                bump_reg      <= 1'b0;
            end else begin
                lt0_reg       <= s_lt;
                eq0_reg       <= s_eq0;
                eq1_reg       <= s_eq1;
                // at most one frame ends between the latch and this frame's end: the one in W now
                bump_reg      <= accept && is_data_reg && flow_reg == s_flow;
            end
        end else if (step_start) begin
            // a frame past its latch whose end is still to come is judged in the new step
            lt0_reg       <= 1'b0;
            eq0_reg       <= hdr_seq == 32'd0;
            eq1_reg       <= hdr_seq == 32'd1;
            bump_reg      <= 1'b0;
            cur_match_reg <= hdr_step == step_id;
            prv_match_reg <= cur_match_reg;
        end
        if (s_valid) begin
            beat_nx_reg <= s_first ? 11'd2 : beat_nx_reg + 11'd1;
        end
        len_ok_reg   <= b_gt || (b_eq && k_ok);
        in_pay_reg   <= !b_gt;
        pay_last_reg <= b_eq;
        pay_keep_reg <= b_eq ? exp_k : s_keep;
    end

    assign hdr_step = hdr_reg[111:80];
    assign hdr_seq  = hdr_reg[79:48];

    /* stage W: the beat goes to the buffer; the verdict at the last beat */
    always @(posedge clk) begin
        w_data_reg  <= s_data;
        w_keep_reg  <= s_keep;
        w_last_reg  <= s_last;
        w_user_reg  <= s_user;
        w_first_reg <= s_first;
        w_valid_reg <= rst ? 1'b0 : s_valid;
    end

    wire w_end = w_valid_reg && w_last_reg;


    wire        seq_eq    = bump_reg ? eq1_reg : eq0_reg;
    wire        seq_lt    = bump_reg ? lt0_reg || eq0_reg : lt0_reg;
    wire        cur_match = cur_match_reg;
    wire        prv_match = prv_match_reg;
    wire        trunc_end = short_ip_reg || !len_ok_reg;
    wire        fits      = buf_fits && hdr_ready;

    reg [4:0] verdict;
    always @(*) begin
        if (w_user_reg) begin
            verdict = C_FCS;
        end else if (cause_a_reg != C_ACCEPT) begin
            verdict = cause_a_reg;
        end else if (trunc_end) begin
            verdict = C_TRUNC;
        end else if (cause_b_reg != C_ACCEPT) begin
            verdict = cause_b_reg;
        end else if (s_bad_udp_csum) begin
            verdict = C_UCSUM;
        end else if (cause_c_reg != C_ACCEPT) begin
            verdict = cause_c_reg;
        end else if (!is_data_reg) begin
            verdict = fits ? C_ACCEPT : C_OVF;
        end else if (!cur_match) begin
            verdict = prv_match ? C_PREV : C_STEP;
        end else if (seq_lt) begin
            verdict = C_DUP;
        end else if (!seq_eq) begin
            verdict = C_GAP;
        end else begin
            verdict = fits ? C_ACCEPT : C_OVF;
        end
    end

    assign accept = w_end && verdict == C_ACCEPT;

    assign buf_data   = w_data_reg;
    assign buf_keep   = pay_keep_reg;
    assign buf_last   = pay_last_reg;
    assign buf_valid  = w_valid_reg && !w_first_reg && hdr_ok_reg && in_pay_reg;
    assign buf_end    = w_end;
    assign buf_commit = accept;
    assign hdr_data   = hdr_reg;
    assign hdr_push   = accept;

    /* replies: the first pending one, taken by evt_ready */
    wire [SLOT_LOG2:0] slots = {1'b1, {SLOT_LOG2{1'b0}}};
    wire [SLOT_LOG2:0] free_slots = slots - hdr_count;
    wire [31:0] credit = {{(31-SLOT_LOG2){1'b0}}, free_slots};

    /* coalescing state per flow: accepted frames since the last reply, the threshold, a reply
       that may go now, the clocks a held one has waited */
    reg        co_off_reg;            // cfg_ack_every <= 1: every reply goes at once
    reg [2:0]  due_reg;
    reg [23:0] acc_reg;               // flow f in [8f +: 8]
    reg [23:0] thr_m1_reg;            // the threshold K - 1 (flow f in [8f +: 8])
    reg [2:0]  thr_le1_reg;           // K <= 1
    reg [47:0] hold_reg;              // flow f in [16f +: 16]
    wire [2:0] due = due_reg | {3{co_off_reg}};

    reg [2:0] sel;     // 0..2: a previous-step re-ACK of flow sel; 4..6: flow sel - 4's reply
    reg       sel_valid;
    always @(*) begin
        sel_valid = 1'b1;
        if (late_reg[0]) begin
            sel = 3'd0;
        end else if (late_reg[1]) begin
            sel = 3'd1;
        end else if (late_reg[2]) begin
            sel = 3'd2;
        end else if (reply_reg[1:0] != R_NONE && due[0]) begin
            sel = 3'd4;
        end else if (reply_reg[3:2] != R_NONE && due[1]) begin
            sel = 3'd5;
        end else if (reply_reg[5:4] != R_NONE && due[2]) begin
            sel = 3'd6;
        end else begin
            sel = 3'd7;
            sel_valid = 1'b0;
        end
    end

    wire [1:0] sel_f = sel[1:0] == 2'd3 ? 2'd0 : sel[1:0];
    /* the selected flow's fields by explicit muxes (a computed part-select such as
       reply_reg[2*sel_f +: 2] becomes a 32-bit offset computation and $shiftx in yosys) */
    reg [1:0]  sel_reply;
    reg [31:0] sel_exp, sel_prev_exp;
    reg [1:0]  sel_flow;
    always @(*) begin
        case (sel_f)
            2'd1: begin
                sel_reply    = reply_reg[3:2];
                sel_exp      = expected_reg[63:32];
                sel_prev_exp = prev_expected_reg[63:32];
                sel_flow     = 2'd2;
            end
            2'd2: begin
                sel_reply    = reply_reg[5:4];
                sel_exp      = expected_reg[95:64];
                sel_prev_exp = prev_expected_reg[95:64];
                sel_flow     = 2'd3;
            end
            default: begin
                sel_reply    = reply_reg[1:0];
                sel_exp      = expected_reg[31:0];
                sel_prev_exp = prev_expected_reg[31:0];
                sel_flow     = 2'd1;
            end
        endcase
    end
    assign evt_valid  = sel_valid;
    assign evt_nak    = sel[2] && sel_reply == R_NAK;
    assign evt_flow   = sel_flow;
    assign evt_step   = sel[2] ? cur_step_reg : prev_step_reg;
    assign evt_seq    = sel[2] ? sel_exp : sel_prev_exp;
    assign evt_credit = credit;

    /* evt_now = (evt_step == step_id) without a 32-bit compare behind the reply state: each step
     * register's next value (as the block below loads it) is compared with step_id's next value
     * (step_next, the caller's) and registered, so the flags hold the compares of this clock's
     * values; the caller's decision on evt_* then stays a few LUTs from registers (README "Timing
     * shape"). Holds from the first clock after a reset on (the flags are loaded in every clock). */
    reg         cur_now_reg, prev_now_reg;
    wire [31:0] cur_step_nx  = rst ? 32'd0 : step_start ? step_id : cur_step_reg;
    wire [31:0] prev_step_nx = rst ? 32'd0 : step_start ? cur_step_reg : prev_step_reg;
    always @(posedge clk) begin
        cur_now_reg  <= cur_step_nx == step_next;
        prev_now_reg <= prev_step_nx == step_next;
    end
    assign evt_now = sel[2] ? cur_now_reg : prev_now_reg;
    wire take = evt_valid && evt_ready;

    // next reply, expected number and NAK flag of each flow (Receiver.on_frame / take_reply)
    reg [5:0]  reply_next;
    reg [95:0] expected_next;
    reg [95:0] expected1_next;
    reg [2:0]  nak_sent_next;
    reg [2:0]  again_reg, again_next;   // the flow's final ACK is to go once more
    reg [1:0]  r;
    wire       last_flag = hdr_reg[160];   // the frame ends its chunk (wire.FLAG_LAST)
    wire       final_flag = last_flag && fin_hop_reg;
    // the taken reply is a final ACK with its copy to come: the flow's reply stays pending
    wire [2:0] repeat_f = {3{take && sel[2] && sel_reply == R_ACK}} & again_reg
                          & {sel_f == 2'd2, sel_f == 2'd1, sel_f == 2'd0};
    integer f;
    always @(*) begin
        expected_next = expected_reg;
        expected1_next = expected1_reg;
        nak_sent_next = nak_sent_reg;
        again_next = again_reg & ~repeat_f;
        for (f = 0; f < 3; f = f + 1) begin
            r = (take && sel[2] && sel_f == f[1:0] && !repeat_f[f]) ? R_NONE : reply_reg[2*f +: 2];
            if (w_end && is_data_reg && flow_reg == f[1:0]) begin
                if (verdict == C_ACCEPT) begin
                    r = R_ACK;               // a NAK not yet sent is moot: the gap is filled
                    expected_next[32*f +: 32] = expected_reg[32*f +: 32] + 32'd1;
                    expected1_next[32*f +: 32] = expected1_reg[32*f +: 32] + 32'd1;
                    nak_sent_next[f] = 1'b0;
                    again_next[f] = final_flag;
                end else if (verdict == C_DUP || verdict == C_OVF) begin
                    r = r == R_NONE ? R_ACK : r;
                end else if (verdict == C_GAP && !nak_sent_reg[f]) begin
                    r = R_NAK;
                    nak_sent_next[f] = 1'b1;
                end
            end
            reply_next[2*f +: 2] = r;
        end
    end

    // half the credit just sent (at least 1), capped at cfg_ack_every: the next threshold
    wire [31:0] half_credit = ack_credit >> 1;
    wire [7:0]  thr_take = half_credit == 32'd0 ? 8'd1
                         : half_credit < {24'd0, cfg_ack_every} ? half_credit[7:0] : cfg_ack_every;
    reg  [2:0]  due_next;
    reg  [23:0] acc_next;
    reg  [47:0] hold_next;
    reg  [7:0]  acc_h, acc_inc;
    reg         took, acc_ge;
    integer h;
    always @(*) begin
        for (h = 0; h < 3; h = h + 1) begin
            took = take && sel[2] && sel_f == h[1:0];
            due_next[h] = took ? repeat_f[h] : due_reg[h];
            acc_h       = took ? 8'd0 : acc_reg[8*h +: 8];
            hold_next[16*h +: 16] = took ? 16'd0 : hold_reg[16*h +: 16];
            /* the count after an accepted frame and its threshold compare for both cases of took
               (count restarted: 1; else the register's + 1, saturating), both from registers, so
               the reply selection (took) only picks one */
            acc_inc = acc_reg[8*h +: 8] == 8'hFF ? 8'hFF : acc_reg[8*h +: 8] + 8'd1;
            // acc + 1 >= K (saturating at 255, K <= 255) as K <= 1 || acc >= K - 1, K - 1 registered
            acc_ge  = thr_le1_reg[h] || (!took && acc_reg[8*h +: 8] >= thr_m1_reg[8*h +: 8]);
            if (w_end && is_data_reg && flow_reg == h[1:0]) begin
                if (verdict == C_ACCEPT) begin
                    acc_h = took ? 8'd1 : acc_inc;
                    if (last_flag || acc_ge) begin
                        due_next[h] = 1'b1;
                    end
                end else if (verdict == C_DUP || verdict == C_OVF) begin
                    due_next[h] = 1'b1;
                end else if (verdict == C_GAP && !nak_sent_reg[h]) begin
                    due_next[h] = 1'b1;
                end
            end
            acc_next[8*h +: 8] = acc_h;
            // a held ACK goes after ACK_HOLD clocks at most
            if (reply_reg[2*h +: 2] != R_NONE && !took && !due_reg[h]) begin
                hold_next[16*h +: 16] = hold_reg[16*h +: 16] + 16'd1;
                if (hold_reg[16*h +: 16] == ACK_HOLD[15:0] - 16'd2) begin
                    due_next[h] = 1'b1;
                end
            end
        end
    end

    integer q;
    always @(posedge clk) begin
        co_off_reg <= cfg_ack_every <= 8'd1;
        for (q = 0; q < 3; q = q + 1) begin
            if (rst || step_start) begin
                due_reg[q]             <= 1'b0;
                acc_reg[8*q +: 8]      <= 8'd0;
                hold_reg[16*q +: 16]   <= 16'd0;
                thr_m1_reg[8*q +: 8]   <= cfg_ack_every - 8'd1;
                thr_le1_reg[q]         <= cfg_ack_every <= 8'd1;
            end else begin
                due_reg[q]             <= due_next[q];
                acc_reg[8*q +: 8]      <= acc_next[8*q +: 8];
                hold_reg[16*q +: 16]   <= due_next[q] ? 16'd0 : hold_next[16*q +: 16];
                if (take && sel[2] && sel_f == q[1:0]) begin
                    thr_m1_reg[8*q +: 8] <= thr_take - 8'd1;
                    thr_le1_reg[q]       <= thr_take <= 8'd1;
                end
            end
        end
    end

    reg [2:0] late_next;
    integer g;
    always @(*) begin
        late_next = late_reg;
        for (g = 0; g < 3; g = g + 1) begin
            if (take && !sel[2] && sel_f == g[1:0]) begin
                late_next[g] = 1'b0;
            end
            if (w_end && verdict == C_PREV && flow_reg == g[1:0]) begin
                late_next[g] = 1'b1;
            end
        end
    end

    always @(posedge clk) begin
        if (rst) begin
            expected_reg      <= 96'd0;
            expected1_reg     <= {3{32'd1}};
            prev_expected_reg <= 96'd0;
            reply_reg         <= 6'd0;
            nak_sent_reg      <= 3'd0;
            again_reg         <= 3'd0;
            late_reg          <= 3'd0;
            cur_step_reg      <= 32'd0;
            prev_step_reg     <= 32'd0;
            cur_valid_reg     <= 1'b0;
            prev_valid_reg    <= 1'b0;
        end else if (step_start) begin
            expected_reg      <= 96'd0;
            expected1_reg     <= {3{32'd1}};
            prev_expected_reg <= expected_next;  // with a frame accepted in this clock
            reply_reg         <= 6'd0;
            nak_sent_reg      <= 3'd0;
            again_reg         <= 3'd0;
            late_reg          <= 3'd0;
            cur_step_reg      <= step_id;
            prev_step_reg     <= cur_step_reg;
            cur_valid_reg     <= 1'b1;
            prev_valid_reg    <= cur_valid_reg;
        end else begin
            expected_reg <= expected_next;
            expected1_reg <= expected1_next;
            reply_reg    <= reply_next;
            nak_sent_reg <= nak_sent_next;
            again_reg    <= again_next;
            late_reg     <= late_next;
        end
    end

    /* counters: the verdict registered, then the increment */
    reg        cnt_end_reg;
    reg [4:0]  cnt_cause_reg;
    reg [10:0] cnt_bm1_reg;            // the frame's beats - 1
    reg [6:0]  cnt_kb_reg;             // the bytes of its last beat
    reg [31:0] cnt_reg [0:NCNT-1];
    reg [31:0] frame_bytes;

    always @(*) begin
        frame_bytes = {15'd0, cnt_bm1_reg, 6'd0} + {25'd0, cnt_kb_reg};
    end

    function [31:0] sat_add;
        input [31:0] a;
        input [31:0] b;
        reg [32:0] s;
        begin
            s = {1'b0, a} + {1'b0, b};
            sat_add = s[32] ? 32'hFFFFFFFF : s[31:0];
        end
    endfunction

    // the counters' own reset, a clock later (no frame ends that soon): rst drives fewer loads
    reg cnt_rst_reg;

    integer c;
    always @(posedge clk) begin
        cnt_rst_reg   <= rst;
        cnt_cause_reg <= verdict;
        // the byte count of the last beat's TKEEP and beats - 1 registered here, the sum and the
        // saturating add a clock later (all three in one clock were 7 LUT levels)
        cnt_bm1_reg   <= beat_nx_reg - 11'd2;
        cnt_kb_reg    <= keep_bytes(w_keep_reg);
        cnt_end_reg   <= rst ? 1'b0 : w_end;
        if (cnt_rst_reg) begin
            for (c = 0; c < NCNT; c = c + 1) begin
                cnt_reg[c] <= 32'd0;
            end
        end else begin
            if (cnt_end_reg) begin
                for (c = 0; c < 20; c = c + 1) begin
                    if (cnt_cause_reg == c[4:0] && cnt_reg[c] != 32'hFFFFFFFF) begin
                        cnt_reg[c] <= cnt_reg[c] + 32'd1;
                    end
                end
                if (cnt_reg[20] != 32'hFFFFFFFF) begin
                    cnt_reg[20] <= cnt_reg[20] + 32'd1;
                end
                cnt_reg[21] <= sat_add(cnt_reg[21], frame_bytes);
            end
        end
    end

    assign frames_accepted       = cnt_reg[0];
    assign dropped_truncated     = cnt_reg[1];
    assign dropped_fcs           = cnt_reg[2];
    assign dropped_mac           = cnt_reg[3];
    assign dropped_ethertype     = cnt_reg[4];
    assign dropped_ip_header     = cnt_reg[5];
    assign dropped_ip_checksum   = cnt_reg[6];
    assign dropped_ip_address    = cnt_reg[7];
    assign dropped_protocol      = cnt_reg[8];
    assign dropped_port          = cnt_reg[9];
    assign dropped_version       = cnt_reg[10];
    assign dropped_opcode        = cnt_reg[11];
    assign dropped_dtype         = cnt_reg[12];
    assign dropped_udp_checksum  = cnt_reg[19];
    assign dropped_comm          = cnt_reg[13];
    assign dropped_step          = cnt_reg[14];
    assign dropped_previous_step = cnt_reg[15];
    assign dropped_duplicate     = cnt_reg[16];
    assign dropped_gap           = cnt_reg[17];
    assign dropped_overflow      = cnt_reg[18];
    assign frames_in             = cnt_reg[20];
    assign bytes_in              = cnt_reg[21];

endmodule

`resetall
