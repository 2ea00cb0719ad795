// OptimusNIC: the two-phase step's card-memory side: the owner's sum to memory, its scalars, and back
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * docs/design.md 8.1 "Two-phase step", for the network kernel (sim/rtl/net/README.md):
 *
 *  phase one (`start1`): the owner's reduced chunk (s_sum_*, the stream the one-phase step gives
 *    the Adam kernel) ─┬─> onic_axi_wr ─> card memory at cfg_sum_addr (m_axi_sum0 write channels)
 *                      └─> onic_net_sumsq (a tap on the handshakes) ─> the own entry ─> onic_net_scalar
 *    onic_net_scalar exchanges the entries in the scalar flow (s_hdr/s_pay in, m_desc/m_axis out);
 *    `phase1_done` once the chunk is in memory (every write response back), every hop this card
 *    sends has been handed to the transmit side and every rank's entry is in the table (rd_rank).
 *    The host then derives the scale (or the skip) from the N entries in rank order.
 *  phase two (`start2`): the chunk read back from cfg_sum_addr (m_axi_sum0 read channels) as the
 *    Adam kernel's gradient stream (m_grad_*: TKEEP of the chunk's bytes on the last beat, TLAST
 *    on it); `phase2_done` once the last beat is taken. The all-gather then runs as in the
 *    one-phase step.
 *
 * The chunk occupies cfg_chunk_beats beats from cfg_sum_addr (64-byte aligned), the last one
 * cfg_last_bytes (1 .. 64) bytes; nothing past them is written. `errors`: bit0 the scalar
 * exchange's protocol error, bit1 an RRESP error, bit2 a BRESP error (sticky per phase).
 */
module onic_net_twophase #(
    // 0: fp32 wire, 1: bf16 wire (the reduced chunk's dtype)
    parameter integer WIRE_BF16 = 0,
    // log2 of the write and read engines' FIFOs in beats, longest AXI burst
    parameter integer WR_FIFO_LOG2 = 7,
    parameter integer RD_FIFO_LOG2 = 7,
    parameter integer MAX_BURST = 64
) (
    input  wire          clk,
    input  wire          rst,

    input  wire [7:0]    cfg_rank,
    input  wire [7:0]    cfg_world,
    input  wire [63:0]   cfg_sum_addr,
    input  wire [31:0]   cfg_chunk_beats,
    input  wire [6:0]    cfg_last_bytes,
    input  wire          start1,
    input  wire          start2,
    output wire          phase1_done,
    output wire          phase2_done,
    output wire [2:0]    errors,

    /* phase one: the owner's reduced chunk */
    input  wire [511:0]  s_sum_tdata,
    input  wire [63:0]   s_sum_tkeep,
    input  wire          s_sum_tlast,
    input  wire          s_sum_tvalid,
    output wire          s_sum_tready,

    /* the scalar flow (onic_net_scalar) */
    input  wire [7:0]    s_hdr_hop,
    input  wire [15:0]   s_hdr_len,
    input  wire          s_hdr_valid,
    output wire          s_hdr_ready,
    input  wire [511:0]  s_pay_tdata,
    input  wire          s_pay_tlast,
    input  wire          s_pay_tvalid,
    output wire          s_pay_tready,
    output wire [7:0]    m_desc_hop,
    output wire [31:0]   m_desc_seq,
    output wire [15:0]   m_desc_len,
    output wire          m_desc_valid,
    input  wire          m_desc_ready,
    output wire [511:0]  m_axis_tdata,
    output wire [63:0]   m_axis_tkeep,
    output wire          m_axis_tlast,
    output wire          m_axis_tvalid,
    input  wire          m_axis_tready,
    input  wire [7:0]    rd_rank,
    output wire [63:0]   rd_sumsq,
    output wire          rd_flag,

    /* phase two: the chunk to the Adam kernel */
    output wire [511:0]  m_grad_tdata,
    output wire [63:0]   m_grad_tkeep,
    output wire          m_grad_tlast,
    output wire          m_grad_tvalid,
    input  wire          m_grad_tready,

    /* AXI4 master: the reduced chunk in card memory */
    output wire [0:0]    m_axi_sum0_awid,
    output wire [63:0]   m_axi_sum0_awaddr,
    output wire [7:0]    m_axi_sum0_awlen,
    output wire [2:0]    m_axi_sum0_awsize,
    output wire [1:0]    m_axi_sum0_awburst,
    output wire          m_axi_sum0_awlock,
    output wire [3:0]    m_axi_sum0_awcache,
    output wire [2:0]    m_axi_sum0_awprot,
    output wire [3:0]    m_axi_sum0_awqos,
    output wire          m_axi_sum0_awvalid,
    input  wire          m_axi_sum0_awready,
    output wire [511:0]  m_axi_sum0_wdata,
    output wire [63:0]   m_axi_sum0_wstrb,
    output wire          m_axi_sum0_wlast,
    output wire          m_axi_sum0_wvalid,
    input  wire          m_axi_sum0_wready,
    input  wire [0:0]    m_axi_sum0_bid,
    input  wire [1:0]    m_axi_sum0_bresp,
    input  wire          m_axi_sum0_bvalid,
    output wire          m_axi_sum0_bready,
    output wire [0:0]    m_axi_sum0_arid,
    output wire [63:0]   m_axi_sum0_araddr,
    output wire [7:0]    m_axi_sum0_arlen,
    output wire [2:0]    m_axi_sum0_arsize,
    output wire [1:0]    m_axi_sum0_arburst,
    output wire          m_axi_sum0_arlock,
    output wire [3:0]    m_axi_sum0_arcache,
    output wire [2:0]    m_axi_sum0_arprot,
    output wire [3:0]    m_axi_sum0_arqos,
    output wire          m_axi_sum0_arvalid,
    input  wire          m_axi_sum0_arready,
    input  wire [0:0]    m_axi_sum0_rid,
    input  wire [511:0]  m_axi_sum0_rdata,
    input  wire [1:0]    m_axi_sum0_rresp,
    input  wire          m_axi_sum0_rlast,
    input  wire          m_axi_sum0_rvalid,
    output wire          m_axi_sum0_rready
);

    /* phase one: write engine and the sum of squares on the same handshakes */
    wire wr_busy, wr_resp_err, wr_ready;
    wire sum_fire = s_sum_tvalid && wr_ready;
    assign s_sum_tready = wr_ready;

    onic_axi_wr #(
        .FIFO_LOG2(WR_FIFO_LOG2),
        .MAX_BURST(MAX_BURST),
        .ID_BITS(1)
    ) wr_engine (
        .clk(clk), .rst(rst),
        .start(start1), .addr(cfg_sum_addr), .beats(cfg_chunk_beats), .last_bytes(cfg_last_bytes),
        .busy(wr_busy), .suppress(1'b0), .resp_err(wr_resp_err),
        .s_data(s_sum_tdata), .s_valid(s_sum_tvalid), .s_ready(wr_ready),
        .m_axi_awid(m_axi_sum0_awid), .m_axi_awaddr(m_axi_sum0_awaddr), .m_axi_awlen(m_axi_sum0_awlen),
        .m_axi_awsize(m_axi_sum0_awsize), .m_axi_awburst(m_axi_sum0_awburst), .m_axi_awlock(m_axi_sum0_awlock),
        .m_axi_awcache(m_axi_sum0_awcache), .m_axi_awprot(m_axi_sum0_awprot), .m_axi_awqos(m_axi_sum0_awqos),
        .m_axi_awvalid(m_axi_sum0_awvalid), .m_axi_awready(m_axi_sum0_awready),
        .m_axi_wdata(m_axi_sum0_wdata), .m_axi_wstrb(m_axi_sum0_wstrb), .m_axi_wlast(m_axi_sum0_wlast),
        .m_axi_wvalid(m_axi_sum0_wvalid), .m_axi_wready(m_axi_sum0_wready),
        .m_axi_bid(m_axi_sum0_bid), .m_axi_bresp(m_axi_sum0_bresp), .m_axi_bvalid(m_axi_sum0_bvalid),
        .m_axi_bready(m_axi_sum0_bready)
    );

    wire        sq_done, sq_nonfinite;
    wire [63:0] sq_sumsq;

    onic_net_sumsq #(
        .WIRE_BF16(WIRE_BF16)
    ) sq_unit (
        .clk(clk), .rst(rst), .start(start1),
        .s_valid(sum_fire), .s_data(s_sum_tdata), .s_keep(s_sum_tkeep), .s_last(s_sum_tlast),
        .done(sq_done), .sumsq(sq_sumsq), .nonfinite(sq_nonfinite)
    );

    wire sc_error, sc_sent_all, sc_all_known, sc_own_known;

    onic_net_scalar sc_unit (
        .clk(clk), .rst(rst),
        .cfg_rank(cfg_rank), .cfg_world(cfg_world), .start(start1),
        .own_valid(sq_done), .own_sumsq(sq_sumsq), .own_flag(sq_nonfinite),
        .s_hdr_hop(s_hdr_hop), .s_hdr_len(s_hdr_len), .s_hdr_valid(s_hdr_valid), .s_hdr_ready(s_hdr_ready),
        .s_pay_tdata(s_pay_tdata), .s_pay_tlast(s_pay_tlast), .s_pay_tvalid(s_pay_tvalid),
        .s_pay_tready(s_pay_tready),
        .m_desc_hop(m_desc_hop), .m_desc_seq(m_desc_seq), .m_desc_len(m_desc_len),
        .m_desc_valid(m_desc_valid), .m_desc_ready(m_desc_ready),
        .m_axis_tdata(m_axis_tdata), .m_axis_tkeep(m_axis_tkeep), .m_axis_tlast(m_axis_tlast),
        .m_axis_tvalid(m_axis_tvalid), .m_axis_tready(m_axis_tready),
        .rd_rank(rd_rank), .rd_sumsq(rd_sumsq), .rd_flag(rd_flag),
        .own_known(sc_own_known), .sent_all(sc_sent_all), .all_known(sc_all_known), .error(sc_error)
    );

    /* phase two: read engine, beats counted for TKEEP / TLAST */
    wire         rd_busy, rd_resp_err, rd_valid;
    wire [511:0] rd_data;
    reg  [31:0]  out_left_reg;      // beats of the chunk not yet taken downstream
    reg          p1_run_reg, p2_run_reg, p2_done_reg;
    reg  [63:0]  last_keep_reg;
    wire         out_last = out_left_reg == 32'd1;

    onic_axi_rd #(
        .FIFO_LOG2(RD_FIFO_LOG2),
        .MAX_BURST(MAX_BURST),
        .ID_BITS(1)
    ) rd_engine (
        .clk(clk), .rst(rst),
        .start(start2), .addr(cfg_sum_addr), .beats(cfg_chunk_beats), .busy(rd_busy), .resp_err(rd_resp_err),
        .m_data(rd_data), .m_valid(rd_valid), .m_ready(m_grad_tready && p2_run_reg),
        .m_axi_arid(m_axi_sum0_arid), .m_axi_araddr(m_axi_sum0_araddr), .m_axi_arlen(m_axi_sum0_arlen),
        .m_axi_arsize(m_axi_sum0_arsize), .m_axi_arburst(m_axi_sum0_arburst), .m_axi_arlock(m_axi_sum0_arlock),
        .m_axi_arcache(m_axi_sum0_arcache), .m_axi_arprot(m_axi_sum0_arprot), .m_axi_arqos(m_axi_sum0_arqos),
        .m_axi_arvalid(m_axi_sum0_arvalid), .m_axi_arready(m_axi_sum0_arready),
        .m_axi_rid(m_axi_sum0_rid), .m_axi_rdata(m_axi_sum0_rdata), .m_axi_rresp(m_axi_sum0_rresp),
        .m_axi_rlast(m_axi_sum0_rlast), .m_axi_rvalid(m_axi_sum0_rvalid), .m_axi_rready(m_axi_sum0_rready)
    );

    assign m_grad_tdata = rd_data;
    assign m_grad_tkeep = out_last ? last_keep_reg : {64{1'b1}};
    assign m_grad_tlast = out_last;
    assign m_grad_tvalid = rd_valid && p2_run_reg;

    integer i;
    always @(posedge clk) begin
        if (rst) begin
            p1_run_reg <= 1'b0;
            p2_run_reg <= 1'b0;
            p2_done_reg <= 1'b0;
            out_left_reg <= 32'd0;
        end else begin
            if (start1) begin
                p1_run_reg <= 1'b1;
                p2_done_reg <= 1'b0;
            end
            if (start2) begin
                p1_run_reg <= 1'b0;
                p2_run_reg <= 1'b1;
                p2_done_reg <= 1'b0;
                out_left_reg <= cfg_chunk_beats;
                for (i = 0; i < 64; i = i + 1) begin
                    last_keep_reg[i] <= i < cfg_last_bytes;
                end
            end else if (m_grad_tvalid && m_grad_tready) begin
                out_left_reg <= out_left_reg - 32'd1;
                if (out_last) begin
                    p2_run_reg <= 1'b0;
                    p2_done_reg <= 1'b1;
                end
            end
        end
    end

    assign phase1_done = p1_run_reg && !start1 && !wr_busy && sc_own_known && sc_sent_all && sc_all_known;
    assign phase2_done = p2_done_reg;
    assign errors = {wr_resp_err, rd_resp_err, sc_error};

    // TLAST of the incoming chunk is not needed: the write engine counts cfg_chunk_beats and the
    // sum of squares unit reads it as s_last
    wire _unused_ok = &{1'b0, rd_busy, 1'b0};

endmodule

`resetall
