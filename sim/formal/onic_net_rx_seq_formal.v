// OptimusNIC: formal properties of onic_net_rx_seq, the receive filter (SymbiYosys, bounded model check)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The receive verdict with every input free: the parser's check flags, the ring header's opcode, step and
 * sequence number (the rest of each beat zero), TKEEP,
 * FCS, step_start/step_id at any clock (also in the middle of a frame), the buffer's room and the
 * reply handshake. Assumed: reset first; frames well formed on s_* (s_first on exactly the first
 * beat of each frame); hdr_count at most the slots. A shadow model keeps the current step (the
 * last step_start's step_id) and, per flow, the next sequence number it expects (0 after each
 * step_start, + 1 per data frame delivered). Asserted, at every delivered frame (hdr_push):
 * its header is the frame's own (step and sequence number as latched from its first beat), and a
 * data frame (RS, AG, scalar) has the current step, a step has begun, and its sequence number is
 * exactly the flow's expected one: never a frame of the wrong step, never a duplicate or a frame
 * after a gap; and the frame passed every filter: none of the parser's check flags (MAC, EtherType,
 * IPv4 header, checksum and address, protocol, UDP port and length, version, opcode, dtype,
 * length, communicator) on its first beat, no FCS-failed flag (TUSER) on its last, no failed
 * UDP checksum (the parser's verdict, the clock after the last beat). Covers: several frames delivered in order in one flow, a frame of an unknown step
 * dropped, a previous-step frame dropped and re-ACKed, a NAK for a gap followed by the replay
 * being delivered, and a frame delivered in a step begun during its reception.
 */
module onic_net_rx_seq_formal #(
    parameter integer SLOT_LOG2 = 2
) (
    input  wire                 clk,
    input  wire                 rst,
    input  wire                 step_start,
    input  wire [31:0]          step_id,
    input  wire [511:0]         s_data,
    input  wire [63:0]          s_keep,
    input  wire                 s_valid,
    input  wire                 s_last,
    input  wire                 s_user,
    input  wire                 s_first,
    input  wire [13:0]          s_bad,
    input  wire [10:0]          s_exp_beats,
    input  wire [63:0]          s_exp_keep,
    input  wire                 s_bad_udp_csum,   // free: the UDP checksum verdict, at stage W
    input  wire                 buf_fits,
    input  wire                 hdr_ready,
    input  wire [SLOT_LOG2:0]   hdr_count,
    input  wire                 evt_ready,
    // ACK coalescing free too: it changes which replies go when, never a delivery
    input  wire [7:0]           cfg_ack_every,
    input  wire [7:0]           cfg_last_hop,
    input  wire [31:0]          ack_credit
);
    wire [511:0] buf_data;
    wire [63:0]  buf_keep;
    wire         buf_last, buf_valid, buf_end, buf_commit;
    wire [271:0] hdr_data;
    wire         hdr_push;
    wire         evt_valid, evt_nak;
    wire [1:0]   evt_flow;
    wire [31:0]  evt_step, evt_seq, evt_credit;
    wire [31:0]  frames_in, bytes_in, frames_accepted, dropped_truncated, dropped_fcs, dropped_mac,
                 dropped_ethertype, dropped_ip_header, dropped_ip_checksum, dropped_ip_address,
                 dropped_protocol, dropped_port, dropped_version, dropped_opcode, dropped_dtype,
                 dropped_udp_checksum, dropped_comm, dropped_step, dropped_previous_step, dropped_duplicate, dropped_gap,
                 dropped_overflow;

    onic_net_rx_seq #(
        .SLOT_LOG2(SLOT_LOG2),
        .ACK_HOLD(4)
    ) dut (
        .clk(clk), .rst(rst), .step_start(step_start), .step_id(step_id),
        .step_next(step_id),   // evt_now is not checked here (step_id may change at any clock)
        .cfg_ack_every(cfg_ack_every), .ack_credit(ack_credit), .cfg_last_hop(cfg_last_hop),
        .s_data(s_data), .s_keep(s_keep), .s_valid(s_valid), .s_last(s_last), .s_user(s_user),
        .s_first(s_first),
        .s_bad_mac(s_bad[0]), .s_bad_ethertype(s_bad[1]), .s_bad_ip_header(s_bad[2]),
        .s_bad_ip_checksum(s_bad[3]), .s_bad_ip_address(s_bad[4]), .s_bad_protocol(s_bad[5]),
        .s_short_ip_len(s_bad[6]), .s_bad_port(s_bad[7]), .s_bad_udp_len(s_bad[8]),
        .s_bad_version(s_bad[9]), .s_bad_opcode(s_bad[10]), .s_bad_dtype(s_bad[11]),
        .s_bad_length(s_bad[12]), .s_bad_comm(s_bad[13]),
        .s_exp_beats(s_exp_beats), .s_exp_keep(s_exp_keep), .s_bad_udp_csum(s_bad_udp_csum),
        .buf_data(buf_data), .buf_keep(buf_keep), .buf_last(buf_last), .buf_valid(buf_valid),
        .buf_end(buf_end), .buf_commit(buf_commit), .buf_fits(buf_fits),
        .hdr_data(hdr_data), .hdr_push(hdr_push), .hdr_ready(hdr_ready), .hdr_count(hdr_count),
        .evt_valid(evt_valid), .evt_ready(evt_ready), .evt_nak(evt_nak), .evt_flow(evt_flow),
        .evt_step(evt_step), .evt_seq(evt_seq), .evt_credit(evt_credit), .evt_now(),
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

    function [31:0] be32;
        input [511:0] d;
        input integer b;
        begin
            be32 = {d[8*b +: 8], d[8*(b+1) +: 8], d[8*(b+2) +: 8], d[8*(b+3) +: 8]};
        end
    endfunction

    reg        f_past_valid = 1'b0;
    reg        f_mid;          // inside a frame (a beat without TLAST seen)
    reg [3:0]  f_op;           // the frame's opcode, step and sequence number, from its first beat
    reg [31:0] f_step, f_seq;
    reg        f_step_valid;   // a step has begun
    reg [31:0] f_cur_step;
    reg [95:0] f_exp;          // per flow f in [32f +: 32] (0 RS, 1 AG, 2 scalar): the next sequence number expected
    reg        f_nak_seen;     // a NAK was taken
    reg        f_flagged;      // the frame's first beat carried a check flag
    reg        f_fcs_bad;      // the frame's last beat carried TUSER (FCS failed)
    reg        f_start_mid;    // step_start came inside the frame now being received

    wire       f_data = f_op == 4'd1 || f_op == 4'd2 || f_op == 4'd5;
    wire [1:0] f_flow = f_op == 4'd1 ? 2'd0 : f_op == 4'd2 ? 2'd1 : 2'd2;

    always @(posedge clk) begin
        f_past_valid <= 1'b1;
        if (s_valid && s_first) begin
            f_op   <= s_data[8*42 +: 4];
            f_step <= be32(s_data, 50);
            f_seq  <= be32(s_data, 54);
            f_flagged <= |s_bad;
        end
        // the verdict (hdr_push) comes the clock after the last beat: these hold the frame's until then
        if (s_valid && s_last) begin
            f_fcs_bad <= s_user;
        end
        if (rst) begin
            f_mid        <= 1'b0;
            f_step_valid <= 1'b0;
            f_cur_step   <= 32'd0;
            f_exp        <= 96'd0;
            f_nak_seen   <= 1'b0;
            f_start_mid  <= 1'b0;
        end else begin
            if (s_valid) begin
                f_mid <= !s_last;
            end
            if (evt_valid && evt_ready && evt_nak) begin
                f_nak_seen <= 1'b1;
            end
            if (s_valid && s_first) begin
                f_start_mid <= 1'b0;
            end else if (step_start && f_mid) begin
                f_start_mid <= 1'b1;
            end
            if (step_start) begin
                f_step_valid <= 1'b1;
                f_cur_step   <= step_id;
                f_exp        <= 96'd0;
            end else if (hdr_push && f_data) begin
                f_exp[32*f_flow +: 32] <= f_exp[32*f_flow +: 32] + 32'd1;
            end
        end
    end

    always @(*) begin
        if (!f_past_valid) assume(rst);
        if (s_valid) assume(s_first == !f_mid);
        assume(hdr_count <= (1 << SLOT_LOG2));
        // only the ring header's opcode, step and sequence number (bytes 42-61) are free: the
        // rest of a beat is zero (the checks on it are the free s_bad flags)
        assume((s_data & ~{{(512-8*62){1'b0}}, {(8*20){1'b1}}, {(8*42){1'b0}}}) == 512'd0);

        if (f_past_valid && !rst && hdr_push) begin
            assert(hdr_data[111:80] == f_step && hdr_data[79:48] == f_seq);
            assert(!f_flagged && !f_fcs_bad && !s_bad_udp_csum);
            if (f_data) begin
                assert(f_step_valid);
                assert(f_step == f_cur_step);
                assert(f_seq == f_exp[32*f_flow +: 32]);
            end
        end

        if (f_past_valid && !rst) begin
            cover(f_exp[31:0] == 32'd3);
            cover(dropped_step != 32'd0);
            cover(dropped_previous_step != 32'd0 && evt_valid && !evt_nak && evt_step != f_cur_step);
            cover(f_nak_seen && hdr_push && f_data && f_seq != 32'd0);
            cover(f_start_mid && hdr_push && f_data);
        end
    end
endmodule

`resetall
