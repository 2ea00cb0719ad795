// OptimusNIC: formal properties of onic_net_packetize, a run of a chunk cut into ring packets (SymbiYosys, bounded)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The packetizer as the ring datapath uses it (hop-0 packets of the RS and AG flows), every input
 * free within these assumptions: reset first; `start` at any clock after reset (also mid-chunk);
 * the configuration changes only with `start` (steady for the run, as the datapath latches it),
 * a run of 1 .. 320 bytes (a multiple of 64 unless it is the chunk's last run), any element offset
 * of its first packet, 1 .. 3 beats per packet, fewer than 256 elements per packet; the input
 * an AXI4-Stream source (a beat offered stays offered, unchanged, until taken) with its TLAST free
 * (a misplaced one must raise err_len, not move a packet boundary) and data 0 above bit 7 (the
 * data is wired through); `enable` never falls while an offer waits (the datapath's enables only
 * rise within a step; the module withdraws its offers when enable falls). Both ready inputs free.
 *
 * Shadow, from each start: the chunk's beats CB = ceil(bytes / 64) and packets NP = ceil(bytes /
 * (64 P)); payload beats passed (k), the beat's index in its packet, TLASTs passed; descriptors
 * taken (d), the bytes they left, their element offset. Asserted at every clock:
 * - payload: a beat is taken from the input exactly when one is given to the output, unchanged
 *   (none lost, duplicated or reordered); never more than CB beats, pay_done exactly when all CB
 *   have passed; TLAST exactly at each packet's last beat (index P - 1) and at the chunk's last
 *   beat; TKEEP the bytes of the chunk (byte i of beat k kept iff 64 k + i < bytes); NP TLASTs
 *   once pay_done.
 * - descriptors: hop 0, offset cfg_offset + d x elements per packet, length min(64 P, bytes
 *   left), LAST exactly when the bytes left fit one packet and the run is the chunk's last, the
 *   chunk and dtype of the configuration; never a descriptor after the run's last one, desc_done
 *   exactly once NP are taken.
 * - flow control: an output offered and not taken stays offered, unchanged, the next clock (payload
 *   and descriptor); nothing is offered while enable is low; err_len exactly when a beat's TLAST
 *   differed from "last beat of the chunk" (the run's last beat if it is the chunk's last run).
 * Covers: a three-packet chunk with a short last packet and a partial last beat completed; a beat
 * and a descriptor each held by back-pressure then taken; a restart mid-chunk followed by a whole
 * chunk; err_len from a misplaced TLAST.
 */
module onic_net_packetize_formal (
    input  wire          clk,
    input  wire          rst,
    input  wire          start,
    input  wire [31:0]   cfg_chunk_bytes,
    input  wire [31:0]   cfg_offset,
    input  wire          cfg_last_run,
    input  wire [15:0]   cfg_pkt_beats,
    input  wire [31:0]   cfg_pkt_elems,
    input  wire [1:0]    cfg_dtype,
    input  wire [15:0]   cfg_chunk,
    input  wire          enable,
    input  wire [511:0]  s_tdata,
    input  wire          s_tlast,
    input  wire          s_tvalid,
    input  wire          m_desc_ready,
    input  wire          m_tready
);
    wire         desc_done, pay_done, err_len, s_tready;
    wire [1:0]   m_desc_dtype;
    wire [5:0]   m_desc_flags;
    wire [7:0]   m_desc_hop;
    wire [15:0]  m_desc_chunk;
    wire [31:0]  m_desc_offset;
    wire [15:0]  m_desc_len;
    wire         m_desc_valid;
    wire [511:0] m_tdata;
    wire [63:0]  m_tkeep;
    wire         m_tlast, m_tvalid;

    onic_net_packetize dut (
        .clk(clk), .rst(rst), .start(start), .cfg_chunk_bytes(cfg_chunk_bytes), .cfg_offset(cfg_offset),
        .cfg_last_run(cfg_last_run), .cfg_pkt_beats(cfg_pkt_beats),
        .cfg_pkt_elems(cfg_pkt_elems), .cfg_dtype(cfg_dtype), .cfg_chunk(cfg_chunk), .enable(enable),
        .desc_done(desc_done), .pay_done(pay_done), .err_len(err_len),
        .s_tdata(s_tdata), .s_tlast(s_tlast), .s_tvalid(s_tvalid), .s_tready(s_tready),
        .m_desc_dtype(m_desc_dtype), .m_desc_flags(m_desc_flags), .m_desc_hop(m_desc_hop),
        .m_desc_chunk(m_desc_chunk), .m_desc_offset(m_desc_offset),
        .m_desc_len(m_desc_len), .m_desc_valid(m_desc_valid), .m_desc_ready(m_desc_ready),
        .m_tdata(m_tdata), .m_tkeep(m_tkeep), .m_tlast(m_tlast), .m_tvalid(m_tvalid), .m_tready(m_tready)
    );

    wire s_hs = s_tvalid && s_tready;
    wire m_hs = m_tvalid && m_tready;
    wire d_hs = m_desc_valid && m_desc_ready;

    /* the chunk's shape from the configuration (steady from start) */
    wire [31:0] pkt_bytes = {10'd0, cfg_pkt_beats, 6'd0};
    wire [31:0] f_cb      = (cfg_chunk_bytes + 32'd63) >> 6;  // 1 .. 5 under the assumptions
    reg  [31:0] f_np;
    always @(*) begin
        case (cfg_pkt_beats)
            16'd1:   f_np = f_cb;
            16'd2:   f_np = (f_cb + 32'd1) >> 1;
            default: f_np = (f_cb <= 32'd3) ? 32'd1 : 32'd2;
        endcase
    end

    reg         f_past_valid = 1'b0;
    reg         f_started;      // a start since reset
    reg         f_first;        // the clock after start (the module arms its payload side)
    reg  [31:0] f_k;            // payload beats passed since start
    reg  [15:0] f_pb;           // the next beat's index in its packet
    reg  [31:0] f_tl;           // TLAST beats passed
    reg  [31:0] f_d;            // descriptors taken
    reg  [31:0] f_rem;          // bytes not yet in a taken descriptor
    reg  [31:0] f_off;          // the next descriptor's element offset
    reg  [31:0] f_dp;           // d x 64 P: the bytes d full packets would carry
    reg         f_err;          // a beat's TLAST was not "last of the chunk"
    reg         f_restarted;    // start came while a chunk was incomplete
    reg         f_beat_stall;   // a beat was held by m_tready and then taken
    reg         f_desc_stall;   // a descriptor was held by m_desc_ready and then taken
    reg         f_beat_waiting, f_desc_waiting;

    wire f_last_beat = f_k == f_cb - 32'd1;
    // bytes of the chunk's last beat (1 .. 64): 64 k + i < bytes for every byte i of beat k < CB - 1
    wire [6:0] f_tail = (cfg_chunk_bytes[5:0] == 6'd0) ? 7'd64 : {1'b0, cfg_chunk_bytes[5:0]};

    always @(posedge clk) begin
        f_past_valid <= 1'b1;
        if (rst) begin
            f_started   <= 1'b0;
            f_first     <= 1'b0;
            f_restarted <= 1'b0;
            f_beat_stall <= 1'b0;
            f_desc_stall <= 1'b0;
            f_beat_waiting <= 1'b0;
            f_desc_waiting <= 1'b0;
        end else begin
            f_first <= start;
            f_beat_waiting <= m_tvalid && !m_tready;
            f_desc_waiting <= m_desc_valid && !m_desc_ready;
            if (start) begin
                f_started <= 1'b1;
                f_restarted <= f_started && !(pay_done && desc_done);
                f_k   <= 32'd0;
                f_pb  <= 16'd0;
                f_tl  <= 32'd0;
                f_d   <= 32'd0;
                f_rem <= cfg_chunk_bytes;
                f_off <= cfg_offset;
                f_dp  <= 32'd0;
                f_err <= 1'b0;
                f_beat_stall <= 1'b0;
                f_desc_stall <= 1'b0;
            end else begin
                if (m_hs) begin
                    f_k  <= f_k + 32'd1;
                    f_pb <= (f_pb == cfg_pkt_beats - 16'd1) ? 16'd0 : f_pb + 16'd1;
                    f_tl <= f_tl + {31'd0, m_tlast};
                    if (s_tlast != (f_last_beat && cfg_last_run)) f_err <= 1'b1;
                    if (f_beat_waiting) f_beat_stall <= 1'b1;
                end
                if (d_hs) begin
                    f_d   <= f_d + 32'd1;
                    f_rem <= f_rem - {16'd0, m_desc_len};
                    f_off <= f_off + cfg_pkt_elems;
                    f_dp  <= f_dp + pkt_bytes;
                    if (f_desc_waiting) f_desc_stall <= 1'b1;
                end
            end
        end
    end

    /* the environment */
    always @(*) begin
        if (!f_past_valid) assume(rst);
        assume(cfg_chunk_bytes >= 32'd1 && cfg_chunk_bytes <= 32'd320);
        assume(cfg_pkt_beats >= 16'd1 && cfg_pkt_beats <= 16'd3);
        assume(cfg_pkt_elems < 32'd256);
        assume(cfg_last_run || cfg_chunk_bytes[5:0] == 6'd0);
        assume(s_tdata[511:8] == 504'd0);
    end
    always @(posedge clk) begin
        if (f_past_valid && !start) begin
            assume(cfg_chunk_bytes == $past(cfg_chunk_bytes) && cfg_pkt_beats == $past(cfg_pkt_beats));
            assume(cfg_pkt_elems == $past(cfg_pkt_elems) && cfg_dtype == $past(cfg_dtype));
            assume(cfg_chunk == $past(cfg_chunk) && cfg_offset == $past(cfg_offset));
            assume(cfg_last_run == $past(cfg_last_run));
        end
        if (f_past_valid && !$past(rst) && $past(s_tvalid && !s_tready)) begin
            assume(s_tvalid && s_tdata == $past(s_tdata) && s_tlast == $past(s_tlast));
        end
        if (f_past_valid && !$past(rst) && !start && $past(enable)
                && $past((m_tvalid && !m_tready) || (m_desc_valid && !m_desc_ready))) begin
            assume(enable);
        end
    end

    /* the properties */
    integer i;
    always @(*) begin
        if (f_past_valid && !rst) begin
            // payload: one beat in is one beat out, unchanged
            assert(s_hs == m_hs);
            assert(!m_tvalid || m_tdata == s_tdata);
            assert(!s_tready || m_tready);
            if (!enable) assert(!m_tvalid && !m_desc_valid && !s_tready);
            if (!f_started) assert(!m_tvalid && !m_desc_valid && pay_done && !s_tready);
        end
        if (f_past_valid && !rst && f_started && !start) begin
            assert(f_k <= f_cb);
            if (!f_first) assert(pay_done == (f_k == f_cb));
            if (m_tvalid) begin
                assert(f_k < f_cb && !f_first);
                assert(m_tlast == (f_last_beat || f_pb == cfg_pkt_beats - 16'd1));
                for (i = 0; i < 64; i = i + 1) begin
                    assert(m_tkeep[i] == (!f_last_beat || i < f_tail));
                end
            end
            if (pay_done) assert(f_tl == f_np);
            assert(err_len == f_err);
            // descriptors
            assert(f_d <= f_np);
            assert(desc_done == (f_d == f_np));
            assert(f_rem == ((f_dp < cfg_chunk_bytes) ? cfg_chunk_bytes - f_dp : 32'd0));
            if (m_desc_valid) begin
                assert(f_d < f_np);
                assert(m_desc_hop == 8'd0 && m_desc_offset == f_off);
                assert(m_desc_len == ((f_rem <= pkt_bytes) ? f_rem[15:0] : pkt_bytes[15:0]));
                assert(m_desc_flags == {5'd0, f_rem <= pkt_bytes && cfg_last_run});
                assert(m_desc_chunk == cfg_chunk && m_desc_dtype == cfg_dtype);
            end
            if (desc_done) assert(f_rem == 32'd0 && !m_desc_valid);
        end

        if (f_past_valid && !rst && f_started && !start && !f_first) begin
            cover(pay_done && desc_done && cfg_pkt_beats == 16'd2 && f_cb == 32'd5 && cfg_chunk_bytes[5:0] != 6'd0);
            cover(pay_done && desc_done && !cfg_last_run && f_np >= 32'd2 && cfg_offset != 32'd0);
            cover(f_beat_stall && f_desc_stall);
            cover(f_restarted && pay_done && desc_done && f_np >= 32'd2);
            cover(err_len);
        end
    end

    // stable under stall (the clock after an offer that was not taken, unless a start or reset came between)
    always @(posedge clk) begin
        if (f_past_valid && !$past(rst) && !rst && !$past(start) && !start) begin
            if ($past(m_tvalid && !m_tready)) begin
                assert(m_tvalid && m_tdata == $past(m_tdata) && m_tlast == $past(m_tlast)
                       && m_tkeep == $past(m_tkeep));
            end
            if ($past(m_desc_valid && !m_desc_ready)) begin
                assert(m_desc_valid && m_desc_offset == $past(m_desc_offset)
                       && m_desc_len == $past(m_desc_len) && m_desc_flags == $past(m_desc_flags));
            end
        end
    end
endmodule

`resetall
