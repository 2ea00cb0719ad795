// OptimusNIC: formal properties of onic_net_rx_parse, the receive filter's field checks (SymbiYosys, BMC)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The parser with every input free: the MAC's beats (data, TKEEP, TLAST, TUSER, TVALID at any
 * clock: no back-pressure) and the local MAC, IP address and communicator (steady, as the kernel
 * holds them). Assumed: reset on the first clock only, no beat during it (a reset inside a frame,
 * whose rest the parser skips, is the simulation's: test_onic_net_reset). A shadow keeps the input five clocks back and where frames start.
 * Asserted, every clock: m_* is the input of five clocks before, beat for beat (data, TKEEP,
 * TLAST, TUSER, TVALID: nothing lost, added or reordered), m_first exactly on each frame's first
 * beat; and on a first beat every check bit equals the wire format's rule (docs/design.md 8.2),
 * written here from that table, not from the RTL: destination MAC, EtherType 0x0800, version 4 /
 * IHL 5, the IPv4 header checksum as RFC 1071 states it (the 16-bit one's-complement sum of the
 * header's ten words, carries folded back, is 0xFFFF), destination IP, protocol 17, IPv4 total
 * length at least our 50 bytes, UDP port, UDP length = IPv4 length - 20, version 1, opcode 1..5,
 * dtype 0 or 1, payload length = IPv4 length - 50, communicator; and where the IPv4 packet ends
 * (m_exp_beats, m_exp_keep). With onic_net_rx_seq's proof (its check flags free there: a flagged
 * frame is never delivered) this makes the filter's: no frame delivered that fails a field check.
 * The UDP checksum verdict (over the whole frame) is the simulation's: test_onic_net_rx against
 * hls.net.wire. Covers: a frame passing every check, one failing only its IPv4 checksum, one
 * failing only the communicator, and a first beat right after another frame's last.
 */
module onic_net_rx_parse_formal (
    input  wire          clk,
    input  wire          rst,
    input  wire [47:0]   local_mac,
    input  wire [31:0]   local_ip,
    input  wire [15:0]   local_comm,
    input  wire [511:0]  s_axis_tdata,
    input  wire [63:0]   s_axis_tkeep,
    input  wire          s_axis_tvalid,
    input  wire          s_axis_tlast,
    input  wire          s_axis_tuser
);
    localparam [15:0] PORT = 16'h4F4E;
    localparam [3:0]  VERSION = 4'd1;

    wire [511:0] m_data;
    wire [63:0]  m_keep, m_exp_keep;
    wire         m_valid, m_last, m_user, m_first;
    wire         m_bad_mac, m_bad_ethertype, m_bad_ip_header, m_bad_ip_checksum, m_bad_ip_address,
                 m_bad_protocol, m_short_ip_len, m_bad_port, m_bad_udp_len, m_bad_version, m_bad_opcode,
                 m_bad_dtype, m_bad_length, m_bad_comm, m_bad_udp_csum;
    wire [10:0]  m_exp_beats;

    onic_net_rx_parse #(.UDP_PORT(PORT), .VERSION(VERSION)) dut (
        .clk(clk), .rst(rst), .local_mac(local_mac), .local_ip(local_ip), .local_comm(local_comm),
        .s_axis_tdata(s_axis_tdata), .s_axis_tkeep(s_axis_tkeep), .s_axis_tvalid(s_axis_tvalid),
        .s_axis_tlast(s_axis_tlast), .s_axis_tuser(s_axis_tuser),
        .m_data(m_data), .m_keep(m_keep), .m_valid(m_valid), .m_last(m_last), .m_user(m_user),
        .m_first(m_first), .m_bad_mac(m_bad_mac), .m_bad_ethertype(m_bad_ethertype),
        .m_bad_ip_header(m_bad_ip_header), .m_bad_ip_checksum(m_bad_ip_checksum),
        .m_bad_ip_address(m_bad_ip_address), .m_bad_protocol(m_bad_protocol), .m_short_ip_len(m_short_ip_len),
        .m_bad_port(m_bad_port), .m_bad_udp_len(m_bad_udp_len), .m_bad_version(m_bad_version),
        .m_bad_opcode(m_bad_opcode), .m_bad_dtype(m_bad_dtype), .m_bad_length(m_bad_length),
        .m_bad_comm(m_bad_comm), .m_exp_beats(m_exp_beats), .m_exp_keep(m_exp_keep),
        .m_bad_udp_csum(m_bad_udp_csum)
    );

    // byte i of a beat, and big-endian 16-bit words: the wire format's network order
    function [7:0] byte_at;
        input [511:0] d;
        input integer i;
        begin
            byte_at = d[8*i +: 8];
        end
    endfunction

    function [15:0] word_at;
        input [511:0] d;
        input integer i;
        begin
            word_at = {byte_at(d, i), byte_at(d, i + 1)};
        end
    endfunction

    // RFC 1071: the one's-complement sum of the IPv4 header's ten words (bytes 14..33)
    function [15:0] ones_sum;
        input [511:0] d;
        integer w;
        reg [31:0] acc;
        begin
            acc = 32'd0;
            for (w = 0; w < 10; w = w + 1) begin
                acc = acc + {16'd0, word_at(d, 14 + 2 * w)};
            end
            acc = {16'd0, acc[15:0]} + {16'd0, acc[31:16]};
            acc = {16'd0, acc[15:0]} + {16'd0, acc[31:16]};
            ones_sum = acc[15:0];
        end
    endfunction

    // the five clocks of input history, and where frames start (the parser's own view is not used)
    reg [511:0] h_data [0:4];
    reg [63:0]  h_keep [0:4];
    reg [4:0]   h_valid, h_last, h_user, h_first;
    reg         f_in_frame = 1'b0;
    reg [3:0]   f_clocks = 4'd0;     // clocks since the start, saturating
    integer     i;

    reg [47:0]  c_mac;               // the configuration of the clock before (held steady)
    reg [31:0]  c_ip;
    reg [15:0]  c_comm;

    always @(posedge clk) begin
        c_mac  <= local_mac;
        c_ip   <= local_ip;
        c_comm <= local_comm;
        h_data[0] <= s_axis_tdata;
        h_keep[0] <= s_axis_tkeep;
        h_valid[0] <= s_axis_tvalid && !rst;
        h_last[0]  <= s_axis_tlast;
        h_user[0]  <= s_axis_tuser;
        h_first[0] <= !f_in_frame;
        for (i = 1; i < 5; i = i + 1) begin
            h_data[i]  <= h_data[i - 1];
            h_keep[i]  <= h_keep[i - 1];
            h_valid[i] <= h_valid[i - 1];
            h_last[i]  <= h_last[i - 1];
            h_user[i]  <= h_user[i - 1];
            h_first[i] <= h_first[i - 1];
        end
        if (s_axis_tvalid) begin
            f_in_frame <= !s_axis_tlast;
        end
        if (f_clocks != 4'd15) begin
            f_clocks <= f_clocks + 4'd1;
        end
    end

    wire [511:0] d = h_data[4];
    wire [15:0]  ip_len = word_at(d, 16);
    wire [16:0]  ip_end = {1'b0, ip_len} + 17'd14;   // frame bytes up to the IPv4 packet's end
    integer      k;
    reg [63:0]   exp_keep;
    always @(*) begin
        for (k = 0; k < 64; k = k + 1) begin
            exp_keep[k] = ip_end[5:0] == 6'd0 || k < ip_end[5:0];
        end
    end

    always @(*) begin
        assume(rst == (f_clocks == 4'd0));
        assume(!(rst && s_axis_tvalid));  // no frame begins in the reset (the parser would skip its rest)
        if (f_clocks != 4'd0) begin
            assume(local_mac == c_mac && local_ip == c_ip && local_comm == c_comm);
        end
        if (f_clocks >= 4'd6) begin
            // the same beats, five clocks later
            assert(m_valid == h_valid[4]);
            if (m_valid) begin
                assert(m_data == d && m_keep == h_keep[4] && m_last == h_last[4] && m_user == h_user[4]);
                assert(m_first == h_first[4]);
            end
            // the first beat's checks, each as the wire format states it
            if (m_valid && m_first) begin
                assert(m_bad_mac == ({word_at(d, 0), word_at(d, 2), word_at(d, 4)} != local_mac));
                assert(m_bad_ethertype == (word_at(d, 12) != 16'h0800));
                assert(m_bad_ip_header == (byte_at(d, 14) != 8'h45));
                assert(m_bad_ip_checksum == (ones_sum(d) != 16'hFFFF));
                assert(m_bad_ip_address == ({word_at(d, 30), word_at(d, 32)} != local_ip));
                assert(m_bad_protocol == (byte_at(d, 23) != 8'd17));
                assert(m_short_ip_len == (ip_len < 16'd50));
                assert(m_bad_port == (word_at(d, 36) != PORT));
                assert(m_bad_udp_len == (word_at(d, 38) != ip_len - 16'd20));
                assert(m_bad_version == (byte_at(d, 42) >> 4 != {4'd0, VERSION}));
                assert(m_bad_opcode == ((byte_at(d, 42) & 8'h0F) == 8'd0 || (byte_at(d, 42) & 8'h0F) > 8'd5));
                assert(m_bad_dtype == (byte_at(d, 43) >> 6 > 8'd1));
                assert(m_bad_length == (word_at(d, 62) != ip_len - 16'd50));
                assert(m_bad_comm == (word_at(d, 44) != local_comm));
                assert(m_exp_beats == ip_end[16:6] + {10'd0, ip_end[5:0] != 6'd0});
                assert(m_exp_keep == exp_keep);
            end
        end
    end

    // the proof is not vacuous: frames that pass, and frames each failing one check, reach m_*
    wire passes = !(m_bad_mac || m_bad_ethertype || m_bad_ip_header || m_bad_ip_checksum || m_bad_ip_address ||
                    m_bad_protocol || m_short_ip_len || m_bad_port || m_bad_udp_len || m_bad_version ||
                    m_bad_opcode || m_bad_dtype || m_bad_length || m_bad_comm);
    always @(*) begin
        if (f_clocks >= 4'd6) begin
            cover(m_valid && m_first && passes);
            cover(m_valid && m_first && m_bad_ip_checksum && !m_bad_ip_header && !m_bad_mac && !m_bad_comm);
            cover(m_valid && m_first && m_bad_comm && !m_bad_ip_checksum && !m_bad_mac);
            cover(m_valid && m_first && h_valid[3] && h_first[3] && m_last);
        end
    end
endmodule

`resetall
