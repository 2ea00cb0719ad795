// OptimusNIC: formal properties of onic_net_tx_retx, the go-back-N sender (SymbiYosys, bounded model check)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * One flow's sender with a 4-slot buffer of 2-beat packets (header beat + one payload beat; the
 * 512-bit storage cut to free values) and every other input free: packets offered at any clock,
 * ACK/NAKs of any step, sequence number and credit (also beyond what was sent), the output's
 * TREADY. Assumed: reset first, no `start` (reset does the same), quasi-static configuration:
 * cfg_window 1 or 2, cfg_rto below 4 clocks, one payload beat per packet, cfg_credit and cfg_step fixed. Asserted:
 * base <= next <= sent_high <= provided; never more than the window in flight (sent_high - base
 * <= cfg_window, and at every send next - base < cfg_window); a packet is only sent
 * once it is in the buffer (next < provided), and its slot is not overwritten while it may still
 * be resent (written - base <= the slots; provided, the packets whose UDP checksum is in, <= written). Covers: three packets sent (the window moved by an
 * ACK), a packet resent after a NAK, a packet resent after a timeout.
 */
module onic_net_tx_retx_formal #(
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
    wire [31:0]  base, next, sent_high, provided, written;
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
        .stat_base(base), .stat_next(next), .stat_sent_high(sent_high), .stat_provided(provided),
        .stat_written(written), .err_proto(err_proto), .err_long(err_long),
        .cnt_frames(cnt_frames), .cnt_bytes(cnt_bytes), .cnt_retx_frames(cnt_retx_frames),
        .cnt_retx_bytes(cnt_retx_bytes), .cnt_timeouts(cnt_timeouts), .cnt_acks(cnt_acks),
        .cnt_naks(cnt_naks), .cnt_stale(cnt_stale)
    );

    localparam [31:0] SLOTS = 1 << SLOTS_LOG2;

    reg        f_past_valid = 1'b0;
    reg        f_nak_seen;     // a NAK was applied
    reg [127:0] f_cfg;         // the configuration at the last clock
    always @(posedge clk) begin
        f_past_valid <= 1'b1;
        f_cfg        <= {cfg_window, cfg_rto, cfg_credit, cfg_step};
        if (rst) begin
            f_nak_seen <= 1'b0;
        end else if (cnt_naks != 32'd0) begin
            f_nak_seen <= 1'b1;
        end
    end

    // the state at the last clock: a frame was sent at that clock when cnt_frames moved since
    reg [31:0] f_base_p, f_next_p, f_prov_p, f_frames_p;
    reg        f_rst_p;
    always @(posedge clk) begin
        f_base_p   <= base;
        f_next_p   <= next;
        f_prov_p   <= provided;
        f_frames_p <= cnt_frames;
        f_rst_p    <= rst;
    end
    wire f_sent = f_past_valid && !f_rst_p && cnt_frames != f_frames_p;

    always @(*) begin
        if (!f_past_valid) assume(rst);
        assume(cfg_window >= 32'd1 && cfg_window <= 32'd2);
        assume(cfg_rto < 32'd4);
        if (s_axis_tvalid) assume(s_axis_tlast);  // one payload beat: a packet fills its slot
        if (f_past_valid) assume({cfg_window, cfg_rto, cfg_credit, cfg_step} == f_cfg);

        if (f_past_valid && !rst) begin
            assert(base <= next && next <= sent_high && sent_high <= provided);
            assert(sent_high - base <= cfg_window);
            assert(provided <= written && written - base <= SLOTS);
            if (f_sent) begin
                assert(f_next_p < f_prov_p);
                assert(f_next_p - f_base_p < cfg_window);
            end
            assert(!err_long);
        end

        if (f_past_valid && !rst) begin
            cover(cnt_frames == 32'd3 && cnt_retx_frames == 32'd0);
            cover(f_nak_seen && cnt_retx_frames != 32'd0);
            cover(cnt_timeouts != 32'd0 && cnt_retx_frames != 32'd0);
        end
    end
endmodule

`resetall
