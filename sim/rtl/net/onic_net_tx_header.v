// OptimusNIC: ring protocol transmit header builder (the 64-byte first beat of a frame)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Builds the first 512-bit beat of a ring frame exactly as hls.net.wire.build_frame lays it out
 * (docs/design.md 8.2): Ethernet II (peer MAC, local MAC, 0x0800), IPv4 (0x45, DSCP 0, total
 * length 50 + payload, id 0, DF, TTL 64, protocol 17, header checksum, local IP, peer IP), UDP
 * (source port, 0x4F4E, length 30 + payload, UDP checksum) and the 22-byte ring header. Frame
 * byte i is tdata[8i +: 8]; header fields are big-endian.
 *
 * IPv4 checksum: only the total length changes per packet, so the sum of the constant words and
 * the four address words is folded in a free-running 5-stage pipeline from the configuration
 * registers (one 16-bit add per stage); per packet, stage A adds the payload length (one 17-bit
 * add) and stage B folds the carry and complements it. The configuration inputs are quasi-static:
 * they must be stable 8 clocks before a packet enters (set them before a run).
 *
 * UDP checksum (RFC 768) of the header with an empty payload: exact for ACK/NAK frames, and the
 * start from which onic_net_tx_retx adds a data packet's payload (the field's complement is the
 * header's one's-complement sum). The configuration's words (addresses, ports, communicator,
 * rank, the constants) are summed in a free-running 2-stage pipeline; per packet, stage C adds
 * the fields in four groups, stage D the groups and that static sum, stage E folds the carry once
 * and stage B folds the rest, complements it and sends a computed 0 as 0xFFFF (0 is "no
 * checksum"), exactly as hls.net.wire.udp_checksum.
 *
 * Per-packet fields enter on s_hdr_* (valid/ready); the beat leaves on m_hdr_* five clocks later.
 * Five register stages (A, C, D, E, B), full throughput (one header per clock); m_hdr_data and
 * m_hdr_valid are registers. ACK/NAK frames are this beat alone (64 bytes: above Ethernet's
 * 60-byte minimum).
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

    /* the static part of the UDP checksum: the pseudo-header's addresses and protocol, the ports,
       the communicator and rank, the version nibble and the UDP length's constant 30 (twice) */
    localparam [17:0] UDP_CONST = 18'h04F4E + 18'h01000 + 18'd17 + 18'd60;
    reg [16:0] us_lip_reg, us_pip_reg, us_pc_reg, us_rk_reg;  // stage 1
    reg [19:0] ustatic_reg;                                     // stage 2

    always @(posedge clk) begin
        us_lip_reg  <= {1'b0, cfg_local_ip[31:16]} + {1'b0, cfg_local_ip[15:0]};
        us_pip_reg  <= {1'b0, cfg_peer_ip[31:16]} + {1'b0, cfg_peer_ip[15:0]};
        us_pc_reg   <= {1'b0, cfg_udp_sport} + {1'b0, cfg_comm};
        us_rk_reg   <= {1'b0, cfg_rank, 8'd0};
        ustatic_reg <= ({3'd0, us_lip_reg} + {3'd0, us_pip_reg}) + ({3'd0, us_pc_reg} + {3'd0, us_rk_reg})
                     + {2'd0, UDP_CONST};
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

    /* stages C, D, E: the fields passed on (everything the beat needs: 197 bits) while the UDP
       checksum is summed */
    localparam integer FW = 197;
    wire [FW-1:0] a_fields = {a_opcode_reg, a_dtype_reg, a_flags_reg, a_hop_reg, a_chunk_reg, a_step_reg,
                              a_seq_reg, a_offset_reg, a_len_reg, a_ip_len_reg, a_udp_len_reg, a_sum_reg};
    reg [FW-1:0] c_fields_reg, d_fields_reg, e_fields_reg;
    reg          c_valid_reg, d_valid_reg, e_valid_reg;
    reg [17:0]   c_g0_reg, c_g1_reg, c_g2_reg, c_g3_reg;   // stage C: four groups of fields
    reg [21:0]   d_tot_reg;                                 // stage D: the whole sum
    reg [16:0]   e_fold_reg;                                // stage E: folded once

    /* stage B: the beat */
    reg [511:0] b_data_reg;
    reg         b_valid_reg;

    wire b_free = !b_valid_reg || m_hdr_ready;
    wire e_free = !e_valid_reg || b_free;
    wire d_free = !d_valid_reg || e_free;
    wire c_free = !c_valid_reg || d_free;
    wire a_free = !a_valid_reg || c_free;

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

    always @(posedge clk) begin
        if (c_free) begin
            c_fields_reg <= a_fields;
            c_g0_reg     <= {6'd0, a_opcode_reg, a_dtype_reg, a_flags_reg} + {10'd0, a_hop_reg}
                          + {2'd0, a_chunk_reg};
            c_g1_reg     <= {2'd0, a_step_reg[31:16]} + {2'd0, a_step_reg[15:0]} + {2'd0, a_seq_reg[31:16]};
            c_g2_reg     <= {2'd0, a_seq_reg[15:0]} + {2'd0, a_offset_reg[31:16]} + {2'd0, a_offset_reg[15:0]};
            c_g3_reg     <= {2'd0, a_len_reg} + {1'b0, a_len_reg, 1'b0};   // 3 x length: ours, UDP's twice
        end
        if (d_free) begin
            d_fields_reg <= c_fields_reg;
            d_tot_reg    <= ({4'd0, c_g0_reg} + {4'd0, c_g1_reg}) + ({4'd0, c_g2_reg} + {4'd0, c_g3_reg})
                          + {2'd0, ustatic_reg};
        end
        if (e_free) begin
            e_fields_reg <= d_fields_reg;
            e_fold_reg   <= {1'b0, d_tot_reg[15:0]} + {11'd0, d_tot_reg[21:16]};
        end
    end

    // the fields at stage E
    wire [3:0]  e_opcode  = e_fields_reg[196:193];
    wire [1:0]  e_dtype   = e_fields_reg[192:191];
    wire [5:0]  e_flags   = e_fields_reg[190:185];
    wire [7:0]  e_hop     = e_fields_reg[184:177];
    wire [15:0] e_chunk   = e_fields_reg[176:161];
    wire [31:0] e_step    = e_fields_reg[160:129];
    wire [31:0] e_seq     = e_fields_reg[128:97];
    wire [31:0] e_offset  = e_fields_reg[96:65];
    wire [15:0] e_len     = e_fields_reg[64:49];
    wire [15:0] e_ip_len  = e_fields_reg[48:33];
    wire [15:0] e_udp_len = e_fields_reg[32:17];
    wire [16:0] e_sum     = e_fields_reg[16:0];

    // the IPv4 checksum: fold the carry (e_sum <= 0x1FFFE: no second carry) and complement
    wire [15:0] csum = ~(e_sum[15:0] + {15'd0, e_sum[16]});
    /* the UDP checksum: e_fold < 0xFFFF + 64, so its second fold cannot carry, and the sum is
       0xFFFF (complement 0, sent as 0xFFFF) exactly when e_fold is */
    wire [15:0] ucsum = e_fold_reg == 17'h0FFFF ? 16'hFFFF : ~(e_fold_reg[15:0] + {15'd0, e_fold_reg[16]});

    // the beat in wire order, byte 0 first (most significant here)
    wire [511:0] wire_order = {
        cfg_peer_mac, cfg_local_mac, 16'h0800,                          // Ethernet II
        8'h45, 8'h00, e_ip_len, 16'h0000, 16'h4000, 8'd64, 8'd17,       // IPv4
        csum, cfg_local_ip, cfg_peer_ip,
        cfg_udp_sport, 16'h4F4E, e_udp_len, ucsum,                      // UDP
        4'd1, e_opcode, e_dtype, e_flags, cfg_comm, cfg_rank,           // ring header
        e_hop, e_chunk, e_step, e_seq, e_offset, e_len
    };

    wire [511:0] axis_order;
    genvar i;
    generate
        for (i = 0; i < 64; i = i + 1) begin : g_byte
            assign axis_order[8*i +: 8] = wire_order[511-8*i -: 8];
        end
    endgenerate

    always @(posedge clk) begin
        if (e_valid_reg && b_free) begin
            b_data_reg <= axis_order;
        end
    end

    always @(posedge clk) begin
        if (rst) begin
            a_valid_reg <= 1'b0;
            c_valid_reg <= 1'b0;
            d_valid_reg <= 1'b0;
            e_valid_reg <= 1'b0;
            b_valid_reg <= 1'b0;
        end else begin
            if (a_free) begin
                a_valid_reg <= s_hdr_valid;
            end
            if (c_free) begin
                c_valid_reg <= a_valid_reg;
            end
            if (d_free) begin
                d_valid_reg <= c_valid_reg;
            end
            if (e_free) begin
                e_valid_reg <= d_valid_reg;
            end
            if (b_free) begin
                b_valid_reg <= e_valid_reg;
            end
        end
    end

endmodule

`resetall
