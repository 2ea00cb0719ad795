// OptimusNIC: ring-protocol receive parser (first beat decode, filter checks, IPv4 checksum)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Takes the 100G MAC's receive AXI4-Stream (512-bit beats, TKEEP, TUSER = the MAC's frame-check
 * failed flag on the last beat; no TREADY: the MAC cannot be held back) and passes every beat
 * on, delayed by 5 clocks (m_* are registers), with the checks of the frame's first beat
 * (docs/design.md 8.2: Ethernet + IPv4 + UDP + the 22-byte ring header, exactly 64 bytes)
 * valid beside that first beat (m_first). Stage 1 registers the beat; stage 2 compares every
 * field against the local MAC, IP, communicator and the protocol constants and starts the
 * IPv4 header checksum (five 17-bit pair sums); stages 3 and 4 finish the sum; stage 5 tests
 * it (a valid header sums, end-around carry, to 0xFFFF: the plain 20-bit sum is a non-zero
 * multiple of 0xFFFF). The header fields themselves are m_data's bytes on the first beat.
 * Check bits are 1 when the check FAILS, so the consumer ranks them in the codec's order
 * (hls.net.wire.parse_frame). The length checks that need the frame's end (bytes received vs
 * the IPv4 total length) are left to the consumer: m_exp_beats / m_exp_keep say where the IPv4
 * packet ends (bytes after it are Ethernet padding). local_* are configuration: hold them steady while frames arrive.
 *
 * UDP checksum (RFC 768, the codec's last check): every beat's bytes within the IPv4 packet
 * (TKEEP trimmed at stage 2 to the end the first beat's IPv4 length gives; on the first beat
 * bytes 26..63: the addresses, the UDP header and ours) are summed in onic_net_csum_beat
 * (stages 3 to 5) with the pseudo-header's other words (protocol 17, the UDP length again); the
 * frame's running sum with stage 5's beat is registered, and m_bad_udp_csum, a register beside
 * it (the sum, its fold and the compare in one clock), says one clock after
 * the frame's last beat left m_* (beside onic_net_rx_seq's stage W) whether the whole sum folds
 * to anything but 0xFFFF. Meaningful only for a frame that passed the other checks.
 */
module onic_net_rx_parse #(
    // UDP destination port of every ring frame (0x4F4E)
    parameter [15:0] UDP_PORT = 16'h4F4E,
    // protocol version in the high nibble of byte 42
    parameter [3:0]  VERSION = 4'd1
) (
    input  wire          clk,
    input  wire          rst,

    /* configuration */
    input  wire [47:0]   local_mac,
    input  wire [31:0]   local_ip,
    input  wire [15:0]   local_comm,

    /* MAC receive stream (no tready) */
    input  wire [511:0]  s_axis_tdata,
    input  wire [63:0]   s_axis_tkeep,
    input  wire          s_axis_tvalid,
    input  wire          s_axis_tlast,
    input  wire          s_axis_tuser,

    /* the same beats, 5 clocks later, with the first beat's verdict bits */
    output wire [511:0]  m_data,
    output wire [63:0]   m_keep,
    output wire          m_valid,
    output wire          m_last,
    output wire          m_user,
    output wire          m_first,
    output wire          m_bad_mac,
    output wire          m_bad_ethertype,
    output wire          m_bad_ip_header,
    output wire          m_bad_ip_checksum,
    output wire          m_bad_ip_address,
    output wire          m_bad_protocol,
    output wire          m_short_ip_len,     // IPv4 total length below 50 (our headers)
    output wire          m_bad_port,
    output wire          m_bad_udp_len,      // UDP length != IPv4 total length - 20
    output wire          m_bad_version,
    output wire          m_bad_opcode,
    output wire          m_bad_dtype,
    output wire          m_bad_length,       // ring payload length != IPv4 total length - 50
    output wire          m_bad_comm,
    output wire [10:0]   m_exp_beats,        // beats up to the IPv4 packet's end: ceil((14 + ip_len) / 64)
    output wire [63:0]   m_exp_keep,         // TKEEP of the beat where the IPv4 packet ends
    output wire          m_bad_udp_csum      // the clock after a frame's m_last: its UDP checksum failed
);

    localparam integer NCHK = 14;

    initial begin
        if (VERSION == 4'd0) begin
            $error("VERSION must be non-zero (instance %m)");
            $finish;
        end
    end

    // big-endian field of the beat d: n bytes from byte b
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

    /* stage 1: the input beat and where frames start. The MAC is not reset with the kernel, so
     * a reset can come in the middle of a frame: in_frame_reg follows the stream through it (no
     * reset; 0 at configuration) and skip_reg drops the rest of a frame begun before or during
     * a reset (its beats are not passed on, so its tail is never taken for a first beat). */
    /* verilator lint_off PROCASSINIT */
    reg          in_frame_reg = 1'b0;
    reg          skip_reg = 1'b0;
    /* verilator lint_on PROCASSINIT */
    reg [511:0]  d1_reg;
    reg [63:0]   k1_reg;
    reg          v1_reg, l1_reg, u1_reg, f1_reg;
    /* verilator lint_off PROCASSINIT */
    reg [10:0]   bcnt_reg = 11'd0;   // beats of the frame in progress so far (saturating)
    /* verilator lint_on PROCASSINIT */
    reg [10:0]   bn1_reg;            // the number of the beat in stage 1 (1: the first)
    // 14 + the beat's bytes 16-17 (a first beat's IPv4 total length): the frame bytes the IPv4
    // length says, added here so that stage 2's checksum keep masks start from a register (yosys
    // mapped the add and the masks' compares behind it to 7 LUT levels in the kernel top)
    reg [16:0]   ie1_reg;

    always @(posedge clk) begin
        d1_reg <= s_axis_tdata;
        k1_reg <= s_axis_tkeep;
        l1_reg <= s_axis_tlast;
        u1_reg <= s_axis_tuser;
        f1_reg <= !in_frame_reg;
        bn1_reg <= bcnt_reg + 11'd1;
        ie1_reg <= {1'b0, s_axis_tdata[8*16 +: 8], s_axis_tdata[8*17 +: 8]} + 17'd14;
        if (s_axis_tvalid) begin
            in_frame_reg <= !s_axis_tlast;
            if (s_axis_tlast) begin
                bcnt_reg <= 11'd0;
            end else if (bcnt_reg != 11'd2046) begin
                bcnt_reg <= bcnt_reg + 11'd1;
            end
        end
        if (rst) begin
            skip_reg <= s_axis_tvalid ? !s_axis_tlast : in_frame_reg;
        end else if (s_axis_tvalid && s_axis_tlast) begin
            skip_reg <= 1'b0;
        end
        v1_reg <= !rst && s_axis_tvalid && !skip_reg;
    end

    /* stage 2: field checks and the checksum's pair sums */
    wire [15:0] ip_len  = be16(d1_reg, 16);
    wire [7:0]  opcode  = {4'd0, d1_reg[8*42 +: 4]};
    wire        dtype_hi = d1_reg[8*43 + 7];        // dtype codes 2, 3 are not defined
    wire [15:0] ip_len_m20 = ip_len - 16'd20;
    wire [15:0] ip_len_m50 = ip_len - 16'd50;
    wire [16:0] ip_end  = ie1_reg;                   // frame bytes the IPv4 length says

    wire [NCHK-1:0] chk2 = {
        be16(d1_reg, 44) != local_comm,                                  // 13 comm
        be16(d1_reg, 62) != ip_len_m50,                                  // 12 length
        dtype_hi,                                                        // 11 dtype (0 fp32, 1 bf16)
        opcode == 8'd0 || opcode > 8'd5,                                 // 10 opcode
        d1_reg[8*42 + 4 +: 4] != VERSION,                                //  9 version
        be16(d1_reg, 38) != ip_len_m20,                                  //  8 UDP length
        be16(d1_reg, 36) != UDP_PORT,                                    //  7 port
        ip_len < 16'd50,                                                 //  6 short IPv4 length
        d1_reg[8*23 +: 8] != 8'd17,                                      //  5 protocol
        be32(d1_reg, 30) != local_ip,                                    //  4 IP address
        1'b0,                                                            //  3 checksum: stage 5
        d1_reg[8*14 +: 8] != 8'h45,                                      //  2 IPv4 / IHL 5
        be16(d1_reg, 12) != 16'h0800,                                    //  1 EtherType
        {be32(d1_reg, 0), be16(d1_reg, 4)} != local_mac                  //  0 MAC
    };

    reg [511:0]     d2_reg;
    reg [63:0]      k2_reg;
    reg             v2_reg, l2_reg, u2_reg, f2_reg;
    reg [NCHK-1:0]  c2_reg;
    reg [16:0]      p0_reg, p1_reg, p2_reg, p3_reg, p4_reg;
    reg [16:0]      end2_reg;

    /* UDP checksum, stage 2: the bytes of the beat that the checksum covers. The first beat's
       IPv4 end is latched as it passes (whole beats, the beat after them, the bytes in that beat)
       for the beats after it, which reach stage 1 a clock later at the earliest. */
    reg [10:0]  ue_full_reg;         // beats wholly within the IPv4 packet
    reg [10:0]  ue_part_reg;         // the beat it ends in, when not on a beat boundary
    reg [63:0]  ue_keep_reg;         // ... and its bytes within the packet (0: on a boundary)
    reg [63:0]  tk2_reg;             // the beat in stage 2: bytes summed
    reg [16:0]  x2_reg;              // ... and the pseudo-header's other words (first beat)
    wire [63:0] first_keep = {{38{1'b1}}, 26'd0};   // bytes 26..63: addresses, UDP, ours

    always @(posedge clk) begin
        if (v1_reg && f1_reg) begin
            ue_full_reg <= ip_end[16:6];
            ue_part_reg <= ip_end[16:6] + 11'd1;
            ue_keep_reg <= ip_end[5:0] == 6'd0 ? 64'd0 : keep_mask(ip_end[5:0]);
        end
        if (f1_reg) begin
            tk2_reg <= k1_reg & first_keep;
            x2_reg  <= {1'b0, be16(d1_reg, 38)} + 17'd17;
        end else begin
            tk2_reg <= bn1_reg <= ue_full_reg ? k1_reg :
                       bn1_reg == ue_part_reg ? k1_reg & ue_keep_reg : 64'd0;
            x2_reg  <= 17'd0;
        end
    end

    always @(posedge clk) begin
        d2_reg   <= d1_reg;
        k2_reg   <= k1_reg;
        l2_reg   <= l1_reg;
        u2_reg   <= u1_reg;
        f2_reg   <= f1_reg;
        c2_reg   <= chk2;
        end2_reg <= ip_end;
        p0_reg   <= {1'b0, be16(d1_reg, 14)} + {1'b0, be16(d1_reg, 16)};
        p1_reg   <= {1'b0, be16(d1_reg, 18)} + {1'b0, be16(d1_reg, 20)};
        p2_reg   <= {1'b0, be16(d1_reg, 22)} + {1'b0, be16(d1_reg, 24)};
        p3_reg   <= {1'b0, be16(d1_reg, 26)} + {1'b0, be16(d1_reg, 28)};
        p4_reg   <= {1'b0, be16(d1_reg, 30)} + {1'b0, be16(d1_reg, 32)};
        v2_reg   <= rst ? 1'b0 : v1_reg;
    end

    /* stage 3: two more sums; the last beat's expected shape */
    reg [511:0]     d3_reg;
    reg [63:0]      k3_reg;
    reg             v3_reg, l3_reg, u3_reg, f3_reg;
    reg [NCHK-1:0]  c3_reg;
    reg [17:0]      q0_reg, q1_reg;
    reg [16:0]      q2_reg;
    reg [10:0]      eb3_reg;
    reg [63:0]      ek3_reg;

    // TKEEP of a last beat holding r bytes (r = 0: a full beat)
    function [63:0] keep_mask;
        input [5:0] r;
        integer i;
        begin
            for (i = 0; i < 64; i = i + 1) begin
                keep_mask[i] = (r == 6'd0) || (i < r);
            end
        end
    endfunction

    always @(posedge clk) begin
        d3_reg  <= d2_reg;
        k3_reg  <= k2_reg;
        l3_reg  <= l2_reg;
        u3_reg  <= u2_reg;
        f3_reg  <= f2_reg;
        c3_reg  <= c2_reg;
        q0_reg  <= {1'b0, p0_reg} + {1'b0, p1_reg};
        q1_reg  <= {1'b0, p2_reg} + {1'b0, p3_reg};
        q2_reg  <= p4_reg;
        eb3_reg <= end2_reg[16:6] + {10'd0, end2_reg[5:0] != 6'd0};
        ek3_reg <= keep_mask(end2_reg[5:0]);
        v3_reg  <= rst ? 1'b0 : v2_reg;
    end

    /* stage 4: the whole 20-bit sum */
    reg [511:0]     d4_reg;
    reg [63:0]      k4_reg;
    reg             v4_reg, l4_reg, u4_reg, f4_reg;
    reg [NCHK-1:0]  c4_reg;
    reg [19:0]      sum4_reg;
    reg [10:0]      eb4_reg;
    reg [63:0]      ek4_reg;

    always @(posedge clk) begin
        d4_reg   <= d3_reg;
        k4_reg   <= k3_reg;
        l4_reg   <= l3_reg;
        u4_reg   <= u3_reg;
        f4_reg   <= f3_reg;
        c4_reg   <= c3_reg;
        sum4_reg <= {2'd0, q0_reg} + {2'd0, q1_reg} + {3'd0, q2_reg};
        eb4_reg  <= eb3_reg;
        ek4_reg  <= ek3_reg;
        v4_reg   <= rst ? 1'b0 : v3_reg;
    end

    /* UDP checksum, stages 3 to 5: the beat's word sum */
    wire [21:0] us5;
    /* verilator lint_off PINCONNECTEMPTY */
    onic_net_csum_beat ucsum (
        .clk(clk), .rst(rst),
        .s_data(d2_reg), .s_keep(tk2_reg), .s_extra(x2_reg), .s_sum_data(1'b1), .s_sum_extra(1'b1),
        .s_valid(v2_reg),
        .m_sum(us5), .m_valid()
    );
    /* verilator lint_on PINCONNECTEMPTY */

    /* stage 5: the checksum verdict (the sum is k x 0xFFFF, k = 1 .. 10) */
    reg        csum_ok;
    reg [19:0] mult;
    integer    m;
    always @(*) begin
        csum_ok = 1'b0;
        mult    = 20'd0;
        for (m = 1; m <= 10; m = m + 1) begin
            mult = mult + 20'hFFFF;
            if (sum4_reg == mult) begin
                csum_ok = 1'b1;
            end
        end
    end

    reg [511:0]     d5_reg;
    reg [63:0]      k5_reg;
    reg             v5_reg, l5_reg, u5_reg, f5_reg;
    reg [NCHK-1:0]  c5_reg;
    reg [10:0]      eb5_reg;
    reg [63:0]      ek5_reg;

    always @(posedge clk) begin
        d5_reg  <= d4_reg;
        k5_reg  <= k4_reg;
        l5_reg  <= l4_reg;
        u5_reg  <= u4_reg;
        f5_reg  <= f4_reg;
        c5_reg  <= c4_reg | {{(NCHK-4){1'b0}}, !csum_ok, 3'b000};
        eb5_reg <= eb4_reg;
        ek5_reg <= ek4_reg;
        v5_reg  <= rst ? 1'b0 : v4_reg;
        /* the bytes onic_net_rx_seq compares at once (opcode, step, sequence number), TKEEP and
           the first-beat flag are loaded only with a beat (the same values whenever m_valid is
           high): the enable keeps this stage a flip-flop, not the end of a shift-register LUT
           (SRL), whose read is a LUT level in front of those compares and of the step match the
           first-beat flag enables. The IPv4 end (beats, TKEEP) too: onic_net_rx_seq's length
           check of the first beat was 7 levels from an SRL read of ek5_reg */
        if (!v4_reg) begin
            d5_reg[8*42 +: 8]  <= d5_reg[8*42 +: 8];
            d5_reg[8*50 +: 64] <= d5_reg[8*50 +: 64];
            k5_reg             <= k5_reg;
            f5_reg             <= f5_reg;
            eb5_reg            <= eb5_reg;
            ek5_reg            <= ek5_reg;
        end
    end

    /* ... beside stage 5 (the beat at m_*): the frame's sum with it (bytes past the IPv4 length count
       zero, so at most 32,762 words of 0xFFFF and the pseudo-header's 0x1FFFF count: under 2^31),
       registered, and its flag, in the same clock: folded once (tot[15:0] + tot[30:16] < 2 x
       0xFFFF), a valid datagram's sum is 0xFFFF exactly; never 0, since the first beat's protocol
       word is not */
    reg [30:0]  utot_reg;
    reg         ubad_reg;
    wire [30:0] utot = v5_reg ? (f5_reg ? 31'd0 : utot_reg) + {9'd0, us5} : utot_reg;
    wire [16:0] ufold = {1'b0, utot[15:0]} + {2'b0, utot[30:16]};

    always @(posedge clk) begin
        utot_reg <= utot;
        ubad_reg <= ufold != 17'h0FFFF;
    end

    assign m_data            = d5_reg;
    assign m_keep            = k5_reg;
    assign m_valid           = v5_reg;
    assign m_last            = l5_reg;
    assign m_user            = u5_reg;
    assign m_first           = f5_reg;
    assign m_bad_mac         = c5_reg[0];
    assign m_bad_ethertype   = c5_reg[1];
    assign m_bad_ip_header   = c5_reg[2];
    assign m_bad_ip_checksum = c5_reg[3];
    assign m_bad_ip_address  = c5_reg[4];
    assign m_bad_protocol    = c5_reg[5];
    assign m_short_ip_len    = c5_reg[6];
    assign m_bad_port        = c5_reg[7];
    assign m_bad_udp_len     = c5_reg[8];
    assign m_bad_version     = c5_reg[9];
    assign m_bad_opcode      = c5_reg[10];
    assign m_bad_dtype       = c5_reg[11];
    assign m_bad_length      = c5_reg[12];
    assign m_bad_comm        = c5_reg[13];
    assign m_exp_beats       = eb5_reg;
    assign m_exp_keep        = ek5_reg;
    assign m_bad_udp_csum    = ubad_reg;

endmodule

`resetall
