// OptimusNIC: ring protocol go-back-N sender with its retransmit buffer (one flow)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * One flow's sender of docs/design.md 8.3, cycle for cycle the state machine of
 * hls.net.reliability.Sender:
 *
 * - Write side: packets enter in sequence order, 0, 1, 2, ... after `start`: the header beat on
 *   s_hdr_* (from onic_net_tx_header), then the payload on s_axis_* up to TLAST. Packet p goes to
 *   slot p mod 2^SLOTS_LOG2 of the retransmit buffer (2^BEATS_LOG2 beats per slot, one inferred
 *   RAM, 512 bits wide: block RAM or UltraRAM); its beat count, last TKEEP and payload length
 *   (header bytes 62-63) go to a small per-slot table. A packet is taken only while its slot is
 *   free (every packet 2^SLOTS_LOG2 back acknowledged and not being read). A packet longer than
 *   a slot is cut to the slot (err_long, sticky until the next start).
 * - UDP checksum: the header beat's checksum field covers the header alone (onic_net_tx_header);
 *   its complement (the header's one's-complement sum) and the payload beats as written go
 *   through onic_net_csum_beat, and 5 clocks after a packet's last beat its checksum (RFC 768,
 *   a computed 0 sent as 0xFFFF) is in a per-slot table, and the packet counts as provided:
 *   sendable. Every send of the packet puts it into the header beat's bytes 40-41.
 * - Read side: the packet next_seq is sent (read from the buffer into a 16-beat output FIFO)
 *   while next_seq < provided and next_seq - base < min(cfg_window, credit).
 * - ACK/NAK on s_ack_* (one per 3 clocks; s_ack_ready drops meanwhile): stale (another step,
 *   or below base) is counted and ignored; one beyond the highest packet sent sets err_proto
 *   (sticky until the next start) and is ignored; otherwise base = max(base, seq) (frees slots), next_seq =
 *   max(next_seq, base), credit = the ACK's credit. A NAK also rewinds next_seq to its sequence
 *   number (go-back-N) and restarts the timer.
 * - Retransmission timer (cfg_rto clocks): started by a send with nothing in flight, restarted
 *   by progress (stopped when nothing is left in flight), by a NAK and by a timeout; when it
 *   expires with packets in flight next_seq goes back to base.
 * - Counters, 32-bit saturating: frames and payload bytes sent, retransmitted frames and bytes
 *   (a send below the highest sequence number sent), timeouts, ACKs, NAKs and stale replies.
 *
 * Decisions use registered comparisons; a send waits until no state changed in the two clocks
 * before, so a frame of n beats costs n + 1 clocks (n + 3 right after an ACK or a new packet).
 * cfg_window, cfg_rto, cfg_credit and cfg_step are quasi-static registers; `start` (a pulse,
 * with the flow idle) begins a new step: every sequence number back to 0, credit = cfg_credit.
 */
module onic_net_tx_retx #(
    // log2 of the packets the retransmit buffer holds (the largest useful window)
    parameter integer SLOTS_LOG2 = 7,
    // log2 of the beats per slot (header beat + payload beats of the largest packet)
    parameter integer BEATS_LOG2 = 5,
    // 1: the retransmit buffer in UltraRAM (ram_style "ultra"), 0: in block RAM
    parameter integer URAM = 0
) (
    input  wire         clk,
    input  wire         rst,

    /* configuration registers */
    input  wire [31:0]  cfg_window,      // packets in flight at most (with the credit)
    input  wire [31:0]  cfg_rto,         // retransmission timeout, clocks
    input  wire [31:0]  cfg_credit,      // the receiver's slots: the credit at start
    input  wire [31:0]  cfg_step,        // the step: ACK/NAKs of another step are stale
    input  wire         start,           // pulse: a new step begins (flow idle)

    /* packets in: the header beat, then the payload */
    input  wire [511:0] s_hdr_data,
    input  wire         s_hdr_valid,
    output wire         s_hdr_ready,
    input  wire [511:0] s_axis_tdata,
    input  wire [63:0]  s_axis_tkeep,
    input  wire         s_axis_tlast,
    input  wire         s_axis_tvalid,
    output wire         s_axis_tready,

    /* ACK/NAK for this flow (from the receive side) */
    input  wire         s_ack_valid,
    output wire         s_ack_ready,
    input  wire         s_ack_nak,
    input  wire [31:0]  s_ack_step,
    input  wire [31:0]  s_ack_seq,       // the next sequence number the receiver expects
    input  wire [31:0]  s_ack_credit,

    /* frames out (to the arbiter) */
    output wire [511:0] m_axis_tdata,
    output wire [63:0]  m_axis_tkeep,
    output wire         m_axis_tlast,
    output wire         m_axis_tvalid,
    input  wire         m_axis_tready,

    /* state */
    output wire [31:0]  stat_base,       // oldest unacknowledged packet
    output wire [31:0]  stat_next,       // next packet to send
    output wire [31:0]  stat_sent_high,  // one past the highest packet sent
    output wire [31:0]  stat_provided,   // packets in the buffer with their checksum: sendable
    output wire [31:0]  stat_written,    // packets written into the buffer (>= stat_provided)
    output wire         err_proto,
    output wire         err_long,

    /* counters, 32-bit saturating, cleared by rst */
    output wire [31:0]  cnt_frames,
    output wire [31:0]  cnt_bytes,
    output wire [31:0]  cnt_retx_frames,
    output wire [31:0]  cnt_retx_bytes,
    output wire [31:0]  cnt_timeouts,
    output wire [31:0]  cnt_acks,
    output wire [31:0]  cnt_naks,
    output wire [31:0]  cnt_stale
);

    localparam integer SLOTS = 1 << SLOTS_LOG2;
    localparam integer BEATS = 1 << BEATS_LOG2;
    localparam [31:0] SLOTS32 = SLOTS;
    localparam integer FIFO_LOG2 = 4;
    localparam [FIFO_LOG2:0] FIFO_ROOM = 12;  // issue a read below this fill (2 more may be on the way)

    initial begin
        if (SLOTS_LOG2 < 1 || SLOTS_LOG2 > 12) begin
            $error("SLOTS_LOG2 must be 1..12 (instance %m)");
            $finish;
        end
        if (URAM != 0 && URAM != 1) begin
            $error("URAM must be 0 or 1 (instance %m)");
            $finish;
        end
        if (BEATS_LOG2 < 1 || BEATS_LOG2 > 9) begin
            $error("BEATS_LOG2 must be 1..9: 2..512 beats per packet (instance %m)");
            $finish;
        end
    end

    /* flow state */
    reg [31:0] base_reg;
    reg [31:0] next_reg;
    reg [31:0] sent_high_reg;
    reg [31:0] provided_reg;
    reg [31:0] credit_reg;
    reg [31:0] limit_reg;        // min(cfg_window, credit)
    reg        sendable_reg;     // next < provided and next - base < limit (registered)
    reg        inflight_reg;     // next != base (registered)
    reg [31:0] low_reg;          // the oldest packet whose slot is still in use
    reg        room_reg;         // the slot of packet `provided` is free
    reg        chg1_reg;         // state changed at the last clock edge
    reg        chg2_reg;         // ... at the one before
    reg        timer_run_reg;
    reg [31:0] timer_cnt_reg;
    reg        timer_hit_reg;
    reg        err_proto_reg;
    reg        err_long_reg;

    /* retransmit buffer and per-slot table */
    reg [BEATS_LOG2-1:0] meta_last [0:SLOTS-1];  // index of the last beat
    reg [63:0]         meta_keep [0:SLOTS-1];
    reg [15:0]         meta_bytes [0:SLOTS-1];
    reg [15:0]         meta_csum [0:SLOTS-1];       // the UDP checksum, into bytes 40-41 at a send

    /* write side */
    reg                  wr_pay_reg;   // 0: waiting for a header beat, 1: payload beats
    reg [BEATS_LOG2:0]   wr_beat_reg;
    reg [15:0]           wr_bytes_reg;
    reg                  wr_hold_reg;  // a packet ended at the last edge: room_reg is stale
    reg [31:0]           written_reg;  // packets written (provided_reg follows once each checksum is in)

    wire [SLOTS_LOG2-1:0] wr_slot = written_reg[SLOTS_LOG2-1:0];
    wire hdr_fire = s_hdr_valid && s_hdr_ready;
    wire pay_fire = s_axis_tvalid && s_axis_tready;
    wire wr_end   = pay_fire && s_axis_tlast;
    wire wr_fits  = !wr_beat_reg[BEATS_LOG2];

    assign s_hdr_ready   = !wr_pay_reg && room_reg && !wr_hold_reg;
    assign s_axis_tready = wr_pay_reg;

    always @(posedge clk) begin
        if (hdr_fire) begin
            wr_bytes_reg <= {s_hdr_data[503:496], s_hdr_data[511:504]};
        end
        if (wr_end) begin
            meta_last[wr_slot]  <= wr_fits ? wr_beat_reg[BEATS_LOG2-1:0] : {BEATS_LOG2{1'b1}};
            meta_keep[wr_slot]  <= s_axis_tkeep;
            meta_bytes[wr_slot] <= wr_bytes_reg;
        end
    end

    always @(posedge clk) begin
        if (rst || start) begin
            wr_pay_reg  <= 1'b0;
            wr_beat_reg <= {(BEATS_LOG2+1){1'b0}};
            wr_hold_reg <= 1'b0;
        end else begin
            wr_hold_reg <= wr_end;
            if (hdr_fire) begin
                wr_pay_reg  <= 1'b1;
                wr_beat_reg <= {{BEATS_LOG2{1'b0}}, 1'b1};
            end else if (wr_end) begin
                wr_pay_reg  <= 1'b0;
            end else if (pay_fire && wr_fits) begin
                wr_beat_reg <= wr_beat_reg + 1'b1;
            end
        end
    end

    /* UDP checksum: the header's sum (the complement of its field, bytes 40-41) enters with the
       header beat as the first term, then the payload beats written (bytes beyond TKEEP as 0) */
    wire [21:0] cs_sum;
    /* verilator lint_off PINCONNECTEMPTY */
    onic_net_csum_beat csum_beat (
        .clk(clk), .rst(rst),
        .s_data(s_axis_tdata), .s_keep(s_axis_tkeep),
        .s_extra({1'b0, ~s_hdr_data[8*40 +: 8], ~s_hdr_data[8*41 +: 8]}),
        .s_sum_data(pay_fire && wr_fits), .s_sum_extra(hdr_fire),
        .s_valid(1'b1),
        .m_sum(cs_sum), .m_valid()
    );
    /* verilator lint_on PINCONNECTEMPTY */

    // beside the adder tree's three stages: a term's packet start / end and slot; then the sum
    // (clock 4 after the beat, a packet of 2^9 beats at most: under 2^30), folded and written to the
    // table (5): a packet stays sendable 5 clocks after its last beat, as with a two-stage tree
    reg [2:0]            cs_first_reg, cs_end_reg;
    reg [3*SLOTS_LOG2-1:0] cs_slot_reg;
    reg [29:0]           cs_acc_reg;
    reg                  cs_end4_reg, cs_done_reg;
    reg [SLOTS_LOG2-1:0] cs_slot4_reg;
    wire                 cs_done = cs_done_reg;
    // cs_acc < 2^30: cs_fold <= 0xFFFF + 0x3FFF, so the second fold cannot carry and the sum is
    // 0xFFFF (checksum 0, sent as 0xFFFF) exactly when cs_fold is
    wire [16:0]          cs_fold = {1'b0, cs_acc_reg[15:0]} + {3'd0, cs_acc_reg[29:16]};

    always @(posedge clk) begin
        cs_slot_reg  <= {cs_slot_reg[2*SLOTS_LOG2-1:0], wr_slot};
        cs_slot4_reg <= cs_slot_reg[3*SLOTS_LOG2-1:2*SLOTS_LOG2];
        if (cs_first_reg[2]) begin
            cs_acc_reg <= {8'd0, cs_sum};
        end else begin
            cs_acc_reg <= cs_acc_reg + {8'd0, cs_sum};
        end
        if (cs_end4_reg) begin
            meta_csum[cs_slot4_reg] <= cs_fold == 17'h0FFFF ? 16'hFFFF
                                       : ~(cs_fold[15:0] + {15'd0, cs_fold[16]});
        end
        if (rst || start) begin
            cs_first_reg <= 3'b000;
            cs_end_reg   <= 3'b000;
            cs_end4_reg  <= 1'b0;
            cs_done_reg  <= 1'b0;
        end else begin
            cs_first_reg <= {cs_first_reg[1:0], hdr_fire};
            cs_end_reg   <= {cs_end_reg[1:0], wr_end};
            cs_end4_reg  <= cs_end_reg[2];
            cs_done_reg  <= cs_end4_reg;
        end
    end

    /* ACK/NAK: registered (ev1), compared (ev2), applied at the end of ev2 */
    reg        ev1_reg;
    reg        ev2_reg;
    reg        ev_nak_reg;
    reg [31:0] ev_step_reg;
    reg [31:0] ev_seq_reg;
    reg [31:0] ev_credit_reg;
    reg        ev_stale_reg;
    reg        ev_bad_reg;
    reg        ev_gt_base_reg;
    reg        ev_lt_next_reg;
    reg        ev_gt_next_reg;

    assign s_ack_ready = !ev1_reg && !ev2_reg;
    wire ev_take = s_ack_valid && s_ack_ready;
    wire ev_busy = ev1_reg || ev2_reg;
    wire ev_ok   = ev2_reg && !ev_stale_reg && !ev_bad_reg;

    always @(posedge clk) begin
        if (ev_take) begin
            ev_nak_reg    <= s_ack_nak;
            ev_step_reg   <= s_ack_step;
            ev_seq_reg    <= s_ack_seq;
            ev_credit_reg <= s_ack_credit;
        end
        if (ev1_reg) begin
            ev_stale_reg   <= ev_step_reg != cfg_step || ev_seq_reg < base_reg;
            ev_bad_reg     <= ev_seq_reg > sent_high_reg;
            ev_gt_base_reg <= ev_seq_reg > base_reg;
            ev_lt_next_reg <= ev_seq_reg < next_reg;
            ev_gt_next_reg <= ev_seq_reg > next_reg;
        end
    end

    /* read side */
    reg                   rd_busy_reg;
    reg [SLOTS_LOG2-1:0]  rd_slot_reg;
    reg [31:0]            rd_seq_reg;
    reg [BEATS_LOG2-1:0]  rd_beat_reg;
    reg [BEATS_LOG2-1:0]  rd_last_reg;
    reg [63:0]            rd_keep_reg;
    reg                   q_valid_reg;  // the RAM's read register holds a beat
    reg                   q_first_reg;  // ... the packet's header beat
    reg [15:0]            rd_csum_reg;  // the packet's UDP checksum
    reg                   q_last_reg;
    reg [63:0]            q_keep_reg;
    wire [511:0]          q_data;       // the RAM's read register

    wire [FIFO_LOG2:0] fifo_count;
    /* verilator lint_off UNUSEDSIGNAL */
    wire               fifo_s_ready;  // never low when written: reads are issued below FIFO_ROOM
    /* verilator lint_on UNUSEDSIGNAL */

    wire [SLOTS_LOG2-1:0] nx_slot = next_reg[SLOTS_LOG2-1:0];
    wire quiet    = !chg1_reg && !chg2_reg;
    wire fire     = timer_run_reg && timer_hit_reg && inflight_reg && quiet && !ev_busy;
    wire send     = !rd_busy_reg && sendable_reg && quiet && !ev_busy && !fire;
    wire rd_issue = rd_busy_reg && fifo_count < FIFO_ROOM;
    wire rd_done  = rd_issue && rd_beat_reg == rd_last_reg;
    wire retx     = next_reg < sent_high_reg;
    wire [15:0] nx_bytes = meta_bytes[nx_slot];

    always @(posedge clk) begin
        if (send) begin
            rd_slot_reg <= nx_slot;
            rd_seq_reg  <= next_reg;
            rd_last_reg <= meta_last[nx_slot];
            rd_keep_reg <= meta_keep[nx_slot];
            rd_csum_reg <= meta_csum[nx_slot];
        end
        if (rd_issue) begin
            q_first_reg <= rd_beat_reg == {BEATS_LOG2{1'b0}};
            q_last_reg <= rd_done;
            q_keep_reg <= rd_done ? rd_keep_reg : {64{1'b1}};
        end
    end

    always @(posedge clk) begin
        if (rst || start) begin
            rd_busy_reg <= 1'b0;
            rd_beat_reg <= {BEATS_LOG2{1'b0}};
            q_valid_reg <= 1'b0;
        end else begin
            q_valid_reg <= rd_issue;
            if (send) begin
                rd_busy_reg <= 1'b1;
                rd_beat_reg <= {BEATS_LOG2{1'b0}};
            end else if (rd_done) begin
                rd_busy_reg <= 1'b0;
            end else if (rd_issue) begin
                rd_beat_reg <= rd_beat_reg + 1'b1;
            end
        end
    end

    onic_fifo #(
        .WIDTH(577),
        .DEPTH_LOG2(FIFO_LOG2)
    ) out_fifo (
        .clk(clk),
        .rst(rst),
        .clear(start),
        .s_data({q_last_reg, q_keep_reg, q_data[511:8*42],
                  q_first_reg ? rd_csum_reg[7:0] : q_data[8*41 +: 8],
                  q_first_reg ? rd_csum_reg[15:8] : q_data[8*40 +: 8], q_data[8*40-1:0]}),
        .s_valid(q_valid_reg),
        .s_ready(fifo_s_ready),
        .m_data({m_axis_tlast, m_axis_tkeep, m_axis_tdata}),
        .m_valid(m_axis_tvalid),
        .m_ready(m_axis_tready),
        .count(fifo_count)
    );

    /* the retransmit buffer: one write port, one registered read port */
    wire                          mem_we    = hdr_fire || (pay_fire && wr_fits);
    wire [SLOTS_LOG2+BEATS_LOG2-1:0] mem_waddr = {wr_slot, hdr_fire ? {BEATS_LOG2{1'b0}} : wr_beat_reg[BEATS_LOG2-1:0]};
    wire [511:0]                  mem_wdata = hdr_fire ? s_hdr_data : s_axis_tdata;
    wire [SLOTS_LOG2+BEATS_LOG2-1:0] mem_raddr = {rd_slot_reg, rd_beat_reg};

    generate
        if (URAM != 0) begin : g_uram
            (* ram_style = "ultra" *)
            reg [511:0] mem [0:SLOTS*BEATS-1];
            reg [511:0] q_reg;
            always @(posedge clk) begin
                if (mem_we) begin
                    mem[mem_waddr] <= mem_wdata;
                end
                if (rd_issue) begin
                    q_reg <= mem[mem_raddr];
                end
            end
            assign q_data = q_reg;
        end else begin : g_bram
            (* ram_style = "block" *)
            reg [511:0] mem [0:SLOTS*BEATS-1];
            reg [511:0] q_reg;
            always @(posedge clk) begin
                if (mem_we) begin
                    mem[mem_waddr] <= mem_wdata;
                end
                if (rd_issue) begin
                    q_reg <= mem[mem_raddr];
                end
            end
            assign q_data = q_reg;
        end
    endgenerate

    /* counters */
    reg [31:0] c_frames_reg;
    reg [31:0] c_bytes_reg;
    reg [31:0] c_retx_frames_reg;
    reg [31:0] c_retx_bytes_reg;
    reg [31:0] c_timeouts_reg;
    reg [31:0] c_acks_reg;
    reg [31:0] c_naks_reg;
    reg [31:0] c_stale_reg;

    wire [32:0] bytes_sum      = {1'b0, c_bytes_reg} + {17'd0, nx_bytes};
    wire [32:0] retx_bytes_sum = {1'b0, c_retx_bytes_reg} + {17'd0, nx_bytes};

    always @(posedge clk) begin
        if (rst) begin
            c_frames_reg      <= 32'd0;
            c_bytes_reg       <= 32'd0;
            c_retx_frames_reg <= 32'd0;
            c_retx_bytes_reg  <= 32'd0;
            c_timeouts_reg    <= 32'd0;
            c_acks_reg        <= 32'd0;
            c_naks_reg        <= 32'd0;
            c_stale_reg       <= 32'd0;
        end else begin
            if (send) begin
                if (c_frames_reg != 32'hFFFFFFFF) c_frames_reg <= c_frames_reg + 1'b1;
                c_bytes_reg <= bytes_sum[32] ? 32'hFFFFFFFF : bytes_sum[31:0];
                if (retx) begin
                    if (c_retx_frames_reg != 32'hFFFFFFFF) c_retx_frames_reg <= c_retx_frames_reg + 1'b1;
                    c_retx_bytes_reg <= retx_bytes_sum[32] ? 32'hFFFFFFFF : retx_bytes_sum[31:0];
                end
            end
            if (fire && c_timeouts_reg != 32'hFFFFFFFF) c_timeouts_reg <= c_timeouts_reg + 1'b1;
            if (ev2_reg && !ev_nak_reg && c_acks_reg != 32'hFFFFFFFF) c_acks_reg <= c_acks_reg + 1'b1;
            if (ev2_reg && ev_nak_reg && c_naks_reg != 32'hFFFFFFFF) c_naks_reg <= c_naks_reg + 1'b1;
            if (ev2_reg && ev_stale_reg && c_stale_reg != 32'hFFFFFFFF) c_stale_reg <= c_stale_reg + 1'b1;
        end
    end

    /* the flow's state machine */
    wire [31:0] inflight_count = next_reg - base_reg;

    always @(posedge clk) begin
        if (rst || start) begin
            base_reg      <= 32'd0;
            next_reg      <= 32'd0;
            sent_high_reg <= 32'd0;
            provided_reg  <= 32'd0;
            written_reg   <= 32'd0;
            credit_reg    <= cfg_credit;
            limit_reg     <= 32'd0;
            sendable_reg  <= 1'b0;
            inflight_reg  <= 1'b0;
            low_reg       <= 32'd0;
            room_reg      <= 1'b0;
            chg1_reg      <= 1'b1;
            chg2_reg      <= 1'b1;
            timer_run_reg <= 1'b0;
            timer_cnt_reg <= 32'd0;
            timer_hit_reg <= 1'b0;
            ev1_reg       <= 1'b0;
            ev2_reg       <= 1'b0;
        end else begin
            ev1_reg <= ev_take;
            ev2_reg <= ev1_reg;
            chg1_reg <= send || fire || ev2_reg || cs_done;
            chg2_reg <= chg1_reg;

            /* registered comparisons */
            limit_reg    <= cfg_window < credit_reg ? cfg_window : credit_reg;
            sendable_reg <= next_reg != provided_reg && inflight_count < limit_reg;
            inflight_reg <= next_reg != base_reg;
            low_reg      <= rd_busy_reg && rd_seq_reg < base_reg ? rd_seq_reg : base_reg;
            room_reg     <= written_reg - low_reg < SLOTS32;
            timer_hit_reg <= timer_cnt_reg >= cfg_rto;

            if (wr_end) begin
                written_reg <= written_reg + 1'b1;
            end
            if (cs_done) begin
                provided_reg <= provided_reg + 1'b1;
            end

            if (timer_run_reg && timer_cnt_reg != 32'hFFFFFFFF) begin
                timer_cnt_reg <= timer_cnt_reg + 1'b1;
            end

            if (send) begin
                next_reg <= next_reg + 1'b1;
                if (!retx) begin
                    sent_high_reg <= next_reg + 1'b1;
                end
                if (!inflight_reg && !timer_run_reg) begin
                    timer_run_reg <= 1'b1;
                    timer_cnt_reg <= 32'd0;
                end
            end else if (fire) begin
                next_reg      <= base_reg;
                timer_cnt_reg <= 32'd0;
            end else if (ev_ok) begin
                credit_reg <= ev_credit_reg;
                if (ev_gt_base_reg) begin
                    base_reg <= ev_seq_reg;
                end
                if (ev_nak_reg) begin
                    next_reg <= ev_seq_reg;
                end else if (ev_gt_next_reg) begin
                    next_reg <= ev_seq_reg;
                end
                if (ev_nak_reg && !ev_lt_next_reg && ev_gt_base_reg) begin
                    timer_run_reg <= 1'b0;             // progress to next_seq: nothing in flight
                end else if (ev_nak_reg && ev_lt_next_reg) begin
                    timer_run_reg <= 1'b1;             // go back: restart
                    timer_cnt_reg <= 32'd0;
                end else if (ev_gt_base_reg) begin
                    timer_run_reg <= ev_lt_next_reg;   // progress restarts the timer
                    timer_cnt_reg <= 32'd0;
                end
            end
        end
    end

    always @(posedge clk) begin
        if (rst) begin
            err_long_reg <= 1'b0;
        end else if (start) begin
            // per step, as STATUS is (sticky within a step, cleared by ap_start)
            err_long_reg <= 1'b0;
        end else if (pay_fire && !wr_fits) begin
            err_long_reg <= 1'b1;
        end
    end

    always @(posedge clk) begin
        if (rst) begin
            err_proto_reg <= 1'b0;
        end else if (start) begin
            err_proto_reg <= 1'b0;
        end else if (ev2_reg && ev_bad_reg && !ev_stale_reg) begin
            err_proto_reg <= 1'b1;
        end
    end

    assign stat_base       = base_reg;
    assign stat_next       = next_reg;
    assign stat_sent_high  = sent_high_reg;
    assign stat_provided   = provided_reg;
    assign stat_written    = written_reg;
    assign err_proto       = err_proto_reg;
    assign err_long        = err_long_reg;
    assign cnt_frames      = c_frames_reg;
    assign cnt_bytes       = c_bytes_reg;
    assign cnt_retx_frames = c_retx_frames_reg;
    assign cnt_retx_bytes  = c_retx_bytes_reg;
    assign cnt_timeouts    = c_timeouts_reg;
    assign cnt_acks        = c_acks_reg;
    assign cnt_naks        = c_naks_reg;
    assign cnt_stale       = c_stale_reg;

endmodule

`resetall
