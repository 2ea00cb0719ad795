// OptimusNIC: ring protocol transmit header builder (the 64-byte first beat of a frame)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Builds the first 512-bit beat of a ring frame exactly as hls.net.wire.build_frame lays it out
 * (docs/design.md 8.2): Ethernet II (peer MAC, local MAC, 0x0800), IPv4 (0x45, DSCP 0, total
 * length 50 + payload, id 0, DF, TTL 64, protocol 17, header checksum, local IP, peer IP), UDP
 * (source port, 0x4F4E, length 30 + payload, checksum 0) and the 22-byte ring header. Frame
 * byte i is tdata[8i +: 8]; header fields are big-endian.
 *
 * IPv4 checksum: only the total length changes per packet, so the sum of the constant words and
 * the four address words is folded in a free-running 5-stage pipeline from the configuration
 * registers (one 16-bit add per stage); per packet, stage A adds the payload length (one 17-bit
 * add) and stage B folds the carry and complements it. The configuration inputs are quasi-static:
 * they must be stable 8 clocks before a packet enters (set them before a run).
 *
 * Per-packet fields enter on s_hdr_* (valid/ready); the beat leaves on m_hdr_* two clocks later.
 * Two register stages, full throughput (one header per clock); m_hdr_data and m_hdr_valid are
 * registers. ACK/NAK frames are this beat alone (64 bytes: above Ethernet's 60-byte minimum).
 */
module onic_net_tx_header #(
    // payload length field width (bytes); the IPv4 total length must stay below 65536
    parameter integer LEN_WIDTH = 16
) (
    input  wire                 clk,
    input  wire                 rst,

    /* configuration registers (quasi-static) */
    input  wire [47:0]          cfg_local_mac,
    input  wire [47:0]          cfg_peer_mac,
    input  wire [31:0]          cfg_local_ip,
    input  wire [31:0]          cfg_peer_ip,
    input  wire [15:0]          cfg_udp_sport,
    input  wire [15:0]          cfg_comm,
    input  wire [7:0]           cfg_rank,

    /* per-packet fields */
    input  wire [3:0]           s_hdr_opcode,
    input  wire [1:0]           s_hdr_dtype,
    input  wire [5:0]           s_hdr_flags,
    input  wire [7:0]           s_hdr_hop,
    input  wire [15:0]          s_hdr_chunk,
    input  wire [31:0]          s_hdr_step,
    input  wire [31:0]          s_hdr_seq,
    input  wire [31:0]          s_hdr_offset,
    input  wire [LEN_WIDTH-1:0] s_hdr_len,
    input  wire                 s_hdr_valid,
    output wire                 s_hdr_ready,

    /* the first beat */
    output wire [511:0]         m_hdr_data,
    output wire                 m_hdr_valid,
    input  wire                 m_hdr_ready
);

    initial begin
        if (LEN_WIDTH != 16) begin
            $error("LEN_WIDTH must be 16: the header's length field (instance %m)");
            $finish;
        end
    end

    // constant IPv4 words: 0x4500 + 0x4000 (DF) + 0x4011 (TTL 64, UDP) + 50 (the total length's
    // fixed part: IPv4 20 + UDP 8 + ring header 22)
    localparam [16:0] IP_CONST = 17'h0C511 + 17'd50;

    /* the static part of the checksum: a free-running pipeline from the configuration */
    reg [16:0] src_sum_reg;   // stage 1
    reg [16:0] dst_sum_reg;
    reg [17:0] addr_sum_reg;  // stage 2
    reg [18:0] all_sum_reg;   // stage 3
    reg [16:0] fold1_reg;     // stage 4
    reg [15:0] static_reg;    // stage 5: one's-complement sum, 1 .. 0xFFFF

    always @(posedge clk) begin
        src_sum_reg  <= {1'b0, cfg_local_ip[31:16]} + {1'b0, cfg_local_ip[15:0]};
        dst_sum_reg  <= {1'b0, cfg_peer_ip[31:16]} + {1'b0, cfg_peer_ip[15:0]};
        addr_sum_reg <= {1'b0, src_sum_reg} + {1'b0, dst_sum_reg};
        all_sum_reg  <= {1'b0, addr_sum_reg} + {2'b00, IP_CONST};
        fold1_reg    <= {1'b0, all_sum_reg[15:0]} + {14'd0, all_sum_reg[18:16]};
        // fold1 < 0x10007: with its carry set the low half is <= 6, so this add cannot carry
        static_reg   <= fold1_reg[15:0] + {15'd0, fold1_reg[16]};
    end

    /* stage A: the packet's fields and static sum + payload length */
    reg [3:0]  a_opcode_reg;
    reg [1:0]  a_dtype_reg;
    reg [5:0]  a_flags_reg;
    reg [7:0]  a_hop_reg;
    reg [15:0] a_chunk_reg;
    reg [31:0] a_step_reg;
    reg [31:0] a_seq_reg;
    reg [31:0] a_offset_reg;
    reg [15:0] a_len_reg;
    reg [15:0] a_ip_len_reg;
    reg [15:0] a_udp_len_reg;
    reg [16:0] a_sum_reg;
    reg        a_valid_reg;

    /* stage B: the beat */
    reg [511:0] b_data_reg;
    reg         b_valid_reg;

    wire b_free = !b_valid_reg || m_hdr_ready;
    wire a_free = !a_valid_reg || b_free;

    assign s_hdr_ready = a_free;
    assign m_hdr_data  = b_data_reg;
    assign m_hdr_valid = b_valid_reg;

    always @(posedge clk) begin
        if (s_hdr_valid && a_free) begin
            a_opcode_reg  <= s_hdr_opcode;
            a_dtype_reg   <= s_hdr_dtype;
            a_flags_reg   <= s_hdr_flags;
            a_hop_reg     <= s_hdr_hop;
            a_chunk_reg   <= s_hdr_chunk;
            a_step_reg    <= s_hdr_step;
            a_seq_reg     <= s_hdr_seq;
            a_offset_reg  <= s_hdr_offset;
            a_len_reg     <= s_hdr_len;
            a_ip_len_reg  <= s_hdr_len + 16'd50;
            a_udp_len_reg <= s_hdr_len + 16'd30;
            a_sum_reg     <= {1'b0, static_reg} + {1'b0, s_hdr_len};
        end
    end

    // the checksum: fold the carry (a_sum <= 0x1FFFE: no second carry) and complement
    wire [15:0] csum = ~(a_sum_reg[15:0] + {15'd0, a_sum_reg[16]});

    // the beat in wire order, byte 0 first (most significant here)
    wire [511:0] wire_order = {
        cfg_peer_mac, cfg_local_mac, 16'h0800,                          // Ethernet II
        8'h45, 8'h00, a_ip_len_reg, 16'h0000, 16'h4000, 8'd64, 8'd17,   // IPv4
        csum, cfg_local_ip, cfg_peer_ip,
        cfg_udp_sport, 16'h4F4E, a_udp_len_reg, 16'h0000,               // UDP
        4'd1, a_opcode_reg, a_dtype_reg, a_flags_reg, cfg_comm, cfg_rank, // ring header
        a_hop_reg, a_chunk_reg, a_step_reg, a_seq_reg, a_offset_reg, a_len_reg
    };

    wire [511:0] axis_order;
    genvar i;
    generate
        for (i = 0; i < 64; i = i + 1) begin : g_byte
            assign axis_order[8*i +: 8] = wire_order[511-8*i -: 8];
        end
    endgenerate

    always @(posedge clk) begin
        if (a_valid_reg && b_free) begin
            b_data_reg <= axis_order;
        end
    end

    always @(posedge clk) begin
        if (rst) begin
            a_valid_reg <= 1'b0;
            b_valid_reg <= 1'b0;
        end else begin
            if (a_free) begin
                a_valid_reg <= s_hdr_valid;
            end
            if (b_free) begin
                b_valid_reg <= a_valid_reg;
            end
        end
    end

endmodule

`resetall
