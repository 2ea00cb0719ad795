// OptimusNIC: one chunk's beats cut into ring packets (descriptors + payload with TLAST/TKEEP)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The hop-0 packets a card originates (docs/design.md 8.1, 8.2): the reduce-scatter's own
 * gradient of chunk r - 1 and the all-gather's own updated parameters of chunk r, one run of a
 * round at a time (round-major order: a run is the round's packets of the chunk; hop-major order
 * has one run, the whole chunk). A run of `cfg_chunk_bytes` bytes (beat-aligned in the input
 * stream) becomes packets of `cfg_pkt_beats` x 64 payload bytes, the last one shorter: packet i
 * of the run has hop 0, element offset cfg_offset + i x cfg_pkt_elems, length min(P, bytes
 * left), flag LAST on the run's last packet when the run ends the chunk (`cfg_last_run`;
 * hls.net.card: `_provide` of hop 0). The sequence number is the caller's (onic_net_ring_dp
 * numbers a flow's descriptors in the order they go). Descriptors run ahead of the payload (one
 * every two clocks); the payload passes through with TLAST at every packet's end and TKEEP of
 * the run's bytes on its last beat. `enable` low holds both outputs (valid low) without losing
 * anything. The input's TLAST must mark the chunk's last beat and nothing else: the run's last
 * beat when it ends the chunk, no beat of an earlier run (`err_len`, sticky until start, when it
 * does not: the beats are still counted by the run's size).
 */
module onic_net_packetize (
    input  wire          clk,
    input  wire          rst,

    /* a chunk: arguments steady from start until pay_done */
    input  wire          start,
    input  wire [31:0]   cfg_chunk_bytes,   // the run's bytes, > 0 (a multiple of 64 unless cfg_last_run)
    input  wire [31:0]   cfg_offset,        // element offset of the run's first packet
    input  wire          cfg_last_run,      // the run ends the chunk
    input  wire [15:0]   cfg_pkt_beats,     // payload beats of a full packet, > 0
    input  wire [31:0]   cfg_pkt_elems,     // elements of a full packet
    input  wire [1:0]    cfg_dtype,         // the header's dtype code
    input  wire [15:0]   cfg_chunk,         // the chunk id in the header
    input  wire          enable,
    output wire          desc_done,         // every descriptor taken
    output wire          pay_done,          // every payload beat taken
    output wire          err_len,

    /* the chunk's beats */
    input  wire [511:0]  s_tdata,
    input  wire          s_tlast,
    input  wire          s_tvalid,
    output wire          s_tready,

    /* descriptors (onic_net_tx s_*_desc_*) */
    output wire [1:0]    m_desc_dtype,
    output wire [5:0]    m_desc_flags,
    output wire [7:0]    m_desc_hop,
    output wire [15:0]   m_desc_chunk,
    output wire [31:0]   m_desc_offset,
    output wire [15:0]   m_desc_len,
    output wire          m_desc_valid,
    input  wire          m_desc_ready,

    /* payload (onic_net_tx s_*_axis_*) */
    output wire [511:0]  m_tdata,
    output wire [63:0]   m_tkeep,
    output wire          m_tlast,
    output wire          m_tvalid,
    input  wire          m_tready
);

    /* descriptors */
    reg  [31:0] rem_reg;       // chunk bytes not yet in a descriptor
    reg  [31:0] off_reg;
    reg         d_valid_reg;   // the fields below are current
    reg  [15:0] d_len_reg;
    reg         d_last_reg;
    reg         d_done_reg;
    reg         d_calc_reg;    // compute the next descriptor's fields this clock

    wire [31:0] pkt_bytes = {10'd0, cfg_pkt_beats, 6'd0};
    wire        d_fire    = d_valid_reg && enable && m_desc_ready;

    always @(posedge clk) begin
        if (rst) begin
            d_valid_reg <= 1'b0;
            d_done_reg  <= 1'b0;
            d_calc_reg  <= 1'b0;
        end else if (start) begin
            rem_reg     <= cfg_chunk_bytes;
            off_reg     <= cfg_offset;
            d_valid_reg <= 1'b0;
            d_done_reg  <= 1'b0;
            d_calc_reg  <= 1'b1;
        end else begin
            d_calc_reg <= 1'b0;
            if (d_calc_reg) begin
                d_valid_reg <= 1'b1;
                d_last_reg  <= rem_reg <= pkt_bytes;
                d_len_reg   <= (rem_reg <= pkt_bytes) ? rem_reg[15:0] : pkt_bytes[15:0];
            end
            if (d_fire) begin
                d_valid_reg <= 1'b0;
                rem_reg     <= rem_reg - {16'd0, d_len_reg};
                if (d_last_reg) begin
                    d_done_reg <= 1'b1;
                end else begin
                    d_calc_reg <= 1'b1;
                end
                off_reg <= off_reg + cfg_pkt_elems;
            end
        end
    end

    /* payload */
    reg  [31:0] c_left_reg;    // chunk beats not yet passed
    reg         c_one_reg;     // c_left_reg == 1
    reg  [15:0] p_left_reg;    // beats left in this packet
    reg         p_one_reg;     // p_left_reg == 1
    reg  [63:0] tail_keep_reg;
    reg         p_done_reg;
    reg         err_reg;
    reg         p_arm_reg;

    wire        p_fire = s_tvalid && enable && m_tready && !p_done_reg && !p_arm_reg;
    wire [31:0] chunk_beats = (cfg_chunk_bytes + 32'd63) >> 6;

    always @(posedge clk) begin
        if (rst) begin
            p_done_reg <= 1'b1;
            p_arm_reg  <= 1'b0;
            err_reg    <= 1'b0;
        end else if (start) begin
            p_done_reg <= 1'b0;
            p_arm_reg  <= 1'b1;
            err_reg    <= 1'b0;
        end else if (p_arm_reg) begin
            p_arm_reg     <= 1'b0;
            c_left_reg    <= chunk_beats;
            c_one_reg     <= chunk_beats == 32'd1;
            p_left_reg    <= cfg_pkt_beats;
            p_one_reg     <= cfg_pkt_beats == 16'd1;
            tail_keep_reg <= (cfg_chunk_bytes[5:0] == 6'd0) ? {64{1'b1}}
                             : ({64{1'b1}} >> (7'd64 - {1'b0, cfg_chunk_bytes[5:0]}));
        end else if (p_fire) begin
            if (s_tlast != (c_one_reg && cfg_last_run)) begin
                err_reg <= 1'b1;
            end
            c_left_reg <= c_left_reg - 32'd1;
            c_one_reg  <= c_left_reg == 32'd2;
            if (p_one_reg) begin
                p_left_reg <= cfg_pkt_beats;
                p_one_reg  <= cfg_pkt_beats == 16'd1;
            end else begin
                p_left_reg <= p_left_reg - 16'd1;
                p_one_reg  <= p_left_reg == 16'd2;
            end
            if (c_one_reg) begin
                p_done_reg <= 1'b1;
            end
        end
    end

    assign m_desc_dtype  = cfg_dtype;
    assign m_desc_flags  = {5'd0, d_last_reg && cfg_last_run};
    assign m_desc_hop    = 8'd0;
    assign m_desc_chunk  = cfg_chunk;
    assign m_desc_offset = off_reg;
    assign m_desc_len    = d_len_reg;
    assign m_desc_valid  = d_valid_reg && enable;

    assign m_tdata  = s_tdata;
    assign m_tkeep  = c_one_reg ? tail_keep_reg : {64{1'b1}};
    assign m_tlast  = c_one_reg || p_one_reg;
    assign m_tvalid = s_tvalid && enable && !p_done_reg && !p_arm_reg;
    assign s_tready = m_tready && enable && !p_done_reg && !p_arm_reg;

    assign desc_done = d_done_reg;
    assign pay_done  = p_done_reg && !p_arm_reg;
    assign err_len   = err_reg;

endmodule

`resetall
