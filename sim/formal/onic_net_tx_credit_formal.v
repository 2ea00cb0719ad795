// OptimusNIC: formal properties of onic_net_tx_retx's credit bound (SymbiYosys, bounded model check)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The credit of design.md 8.3 in one flow's sender (onic_net_tx_retx, where the credit is
 * applied; the window, slot and timeout properties are onic_net_tx_retx_formal's). A 4-slot
 * buffer of 2-beat packets (the 512-bit storage cut to free values), packets offered at any
 * clock, ACK/NAKs of any step, sequence number and credit (also beyond what was sent, also
 * shrinking), the output's TREADY free. Assumed: reset first, no `start`, configuration fixed:
 * cfg_window 2, no timeout within the depth (cfg_rto >= 64), one payload beat per packet;
 * credits (cfg_credit, each ACK/NAK's) below 4: the RTL uses a credit only as
 * min(cfg_window, credit), so 0 .. 3 stand for every value (below, at and above the window);
 * ACK/NAK sequence numbers below 16: compared only with base, next and the highest sent, and
 * within the proof's 24 steps at most 12 frames leave (a frame is two beats on the output).
 *
 * From the ports alone, a shadow takes each ACK/NAK at its handshake and applies it as the
 * protocol says (ignored if of another step, below the last ACK or beyond the highest packet
 * sent; otherwise the last ACK = max(last ACK, its sequence number) and the credit = its
 * credit; cfg_credit after reset). Asserted: the sender's base is the shadow's last ACK; no send
 * while an ACK taken is not yet applied; at every send next - base < min(cfg_window, the latest
 * credit); and when a later ACK shrinks the credit below the packets already in flight, nothing
 * is sent until next - base is below it again (in flight > min(window, credit) only with no send
 * since that ACK). Covers: an ACK shrinking the credit below the packets in flight, a
 * credit-limited stall (a packet waiting, the window open, the credit closed, for 4 clocks), and
 * a credit growth (an ACK not moving the base) resuming the sends past that stall (the cover
 * task narrows the scene, COVER_SCENE: the output always ready, ACK/NAKs of the current step).
 */
module onic_net_tx_credit_formal #(
    parameter integer SLOTS_LOG2 = 2,
    parameter integer BEATS_LOG2 = 1
) (
    input  wire          clk,
    input  wire          rst,
    input  wire [31:0]   cfg_window,
    input  wire [31:0]   cfg_rto,
    input  wire [31:0]   cfg_credit,
    input  wire [31:0]   cfg_step,
    input  wire [511:0]  s_hdr_data,
    input  wire          s_hdr_valid,
    input  wire [511:0]  s_axis_tdata,
    input  wire [63:0]   s_axis_tkeep,
    input  wire          s_axis_tlast,
    input  wire          s_axis_tvalid,
    input  wire          s_ack_valid,
    input  wire          s_ack_nak,
    input  wire [31:0]   s_ack_step,
    input  wire [31:0]   s_ack_seq,
    input  wire [31:0]   s_ack_credit,
    input  wire          m_axis_tready
);
    wire         s_hdr_ready, s_axis_tready, s_ack_ready;
    wire [511:0] m_axis_tdata;
    wire [63:0]  m_axis_tkeep;
    wire         m_axis_tlast, m_axis_tvalid;
    wire [31:0]  base, next, sent_high, provided;
    wire         err_proto, err_long;
    wire [31:0]  cnt_frames, cnt_bytes, cnt_retx_frames, cnt_retx_bytes, cnt_timeouts, cnt_acks,
                 cnt_naks, cnt_stale;

    onic_net_tx_retx #(
        .SLOTS_LOG2(SLOTS_LOG2),
        .BEATS_LOG2(BEATS_LOG2),
        .URAM(0)
    ) dut (
        .clk(clk), .rst(rst), .cfg_window(cfg_window), .cfg_rto(cfg_rto), .cfg_credit(cfg_credit),
        .cfg_step(cfg_step), .start(1'b0),
        .s_hdr_data(s_hdr_data), .s_hdr_valid(s_hdr_valid), .s_hdr_ready(s_hdr_ready),
        .s_axis_tdata(s_axis_tdata), .s_axis_tkeep(s_axis_tkeep), .s_axis_tlast(s_axis_tlast),
        .s_axis_tvalid(s_axis_tvalid), .s_axis_tready(s_axis_tready),
        .s_ack_valid(s_ack_valid), .s_ack_ready(s_ack_ready), .s_ack_nak(s_ack_nak),
        .s_ack_step(s_ack_step), .s_ack_seq(s_ack_seq), .s_ack_credit(s_ack_credit),
        .m_axis_tdata(m_axis_tdata), .m_axis_tkeep(m_axis_tkeep), .m_axis_tlast(m_axis_tlast),
        .m_axis_tvalid(m_axis_tvalid), .m_axis_tready(m_axis_tready),
        .stat_base(base), .stat_next(next), .stat_sent_high(sent_high), .stat_provided(provided), .stat_written(),
        .err_proto(err_proto), .err_long(err_long),
        .cnt_frames(cnt_frames), .cnt_bytes(cnt_bytes), .cnt_retx_frames(cnt_retx_frames),
        .cnt_retx_bytes(cnt_retx_bytes), .cnt_timeouts(cnt_timeouts), .cnt_acks(cnt_acks),
        .cnt_naks(cnt_naks), .cnt_stale(cnt_stale)
    );

    reg        f_past_valid = 1'b0;
    reg [127:0] f_cfg;         // the configuration at the last clock
    always @(posedge clk) begin
        f_past_valid <= 1'b1;
        f_cfg        <= {cfg_window, cfg_rto, cfg_credit, cfg_step};
    end

    // the state at the last clock: a frame was sent at that clock when cnt_frames moved since
    reg [31:0] f_base_p, f_next_p, f_frames_p;
    reg        f_rst_p;
    always @(posedge clk) begin
        f_base_p   <= base;
        f_next_p   <= next;
        f_frames_p <= cnt_frames;
        f_rst_p    <= rst;
    end
    wire f_sent = f_past_valid && !f_rst_p && cnt_frames != f_frames_p;

    // the credit shadow: an ACK/NAK is taken at the handshake, applied 2 clocks later (the
    // sender's state it is judged against does not move in between: no send, timeout or other
    // ACK while one is pending), its credit the latest once applied
    wire        f_take = s_ack_valid && s_ack_ready;
    reg         f_e1, f_e2;            // an ACK/NAK taken 1 / 2 clocks ago
    reg  [31:0] f_ack_step, f_ack_seq, f_ack_credit;
    reg  [31:0] f_base;                // the last ACK
    reg  [31:0] f_credit;              // the latest credit
    reg         f_sent_since;          // a send since the last ACK/NAK applied
    wire        f_apply = f_e2 && f_ack_step == cfg_step && f_ack_seq >= f_base && f_ack_seq <= sent_high;
    wire [31:0] f_cap = cfg_window < f_credit ? cfg_window : f_credit;
    always @(posedge clk) begin
        if (f_take) begin
            f_ack_step   <= s_ack_step;
            f_ack_seq    <= s_ack_seq;
            f_ack_credit <= s_ack_credit;
        end
        if (rst) begin
            f_e1         <= 1'b0;
            f_e2         <= 1'b0;
            f_base       <= 32'd0;
            f_credit     <= cfg_credit;
            f_sent_since <= 1'b0;
        end else begin
            f_e1 <= f_take;
            f_e2 <= f_e1;
            if (f_apply) begin
                f_credit     <= f_ack_credit;
                f_sent_since <= 1'b0;
                if (f_ack_seq > f_base) f_base <= f_ack_seq;
            end
            if (f_sent) f_sent_since <= 1'b1;
        end
    end

    // the last clock's shadow (a send is seen one clock late, by cnt_frames)
    reg        f_e1_p, f_e2_p;
    reg [31:0] f_cap_p;
    always @(posedge clk) begin
        f_e1_p  <= f_e1;
        f_e2_p  <= f_e2;
        f_cap_p <= f_cap;
    end

    // covers: the credit shrinking under the packets in flight, a stall the credit alone causes,
    // and a later credit growth (same base) letting a packet out past that stall
    reg        f_shrunk;
    reg  [2:0] f_stall_run;
    reg        f_stalled;
    reg [31:0] f_stall_credit, f_stall_base;
    wire       f_credit_stall = !f_e1 && !f_e2 && next != provided && next - base < cfg_window
                                && next - base >= f_credit;
    always @(posedge clk) begin
        if (rst) begin
            f_shrunk    <= 1'b0;
            f_stall_run <= 3'd0;
            f_stalled   <= 1'b0;
        end else begin
            if (f_apply && f_ack_credit < f_credit && next - (f_ack_seq > f_base ? f_ack_seq : f_base) > f_ack_credit)
                f_shrunk <= 1'b1;
            f_stall_run <= f_credit_stall ? (f_stall_run == 3'd7 ? 3'd7 : f_stall_run + 3'd1) : 3'd0;
            if (f_stall_run == 3'd2 && !f_stalled) begin
                f_stalled      <= 1'b1;
                f_stall_credit <= f_credit;
                f_stall_base   <= base;
            end
        end
    end

    always @(*) begin
        if (!f_past_valid) assume(rst);
        assume(cfg_window == 32'd2);
        assume(cfg_rto >= 32'd64);
        assume(cfg_credit < 32'd4);
        if (s_ack_valid) assume(s_ack_credit < 32'd4);
        if (s_ack_valid) assume(s_ack_seq < 32'd16);
        if (s_axis_tvalid) assume(s_axis_tlast);  // one payload beat: a packet fills its slot
`ifdef COVER_SCENE
        // the cover task only: the output always ready, every ACK/NAK of the current step (the
        // prove task keeps both free; the covers show the credit's own scenarios are reachable)
        assume(m_axis_tready);
        if (s_ack_valid) assume(s_ack_step == cfg_step);
`endif
        if (f_past_valid) assume({cfg_window, cfg_rto, cfg_credit, cfg_step} == f_cfg);

        if (f_past_valid && !rst) begin
            assert(base == f_base);
            if (f_sent) begin
                assert(!f_e1_p && !f_e2_p);
                assert(f_next_p - f_base_p < f_cap_p);
            end
            if (f_sent_since) assert(next - base <= f_cap);
        end

        if (f_past_valid && !rst) begin
            cover(f_shrunk);
            cover(f_stall_run == 3'd4);
            cover(f_sent && f_stalled && f_base_p == f_stall_base && f_next_p - f_base_p >= f_stall_credit);
        end
    end
endmodule

`resetall
