// OptimusNIC: formal properties of onic_axi_rd (SymbiYosys, bounded model check)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The read engine with a small FIFO and short bursts, so a bounded check reaches page ends,
 * full FIFOs and several bursts in flight. Assumed: reset first, `start` only while the engine
 * is idle (onic_run_ctrl's run_start), memory answers only bursts it was asked for, with RLAST
 * on their last beat and the engine's ARID (the reset epoch) as RID. Asserted: ARVALID and the AR payload hold until ARREADY, no burst crosses
 * 4 KiB, ARLEN below MAX_BURST, beats outstanding never above the FIFO depth, the beats
 * requested never above `beats` and equal to it when the engine goes idle, and every beat
 * received delivered in order (the FIFO never overflows).
 */
module onic_axi_rd_formal #(
    parameter integer FIFO_LOG2 = 3,
    parameter integer MAX_BURST = 4
) (
    input  wire          clk,
    input  wire          rst,
    input  wire          start,
    input  wire [63:0]   addr,
    input  wire [7:0]    beats_in,
    input  wire          m_ready,
    input  wire          m_axi_arready,
    input  wire [1:0]    m_axi_rresp,
    input  wire          m_axi_rlast,
    input  wire          m_axi_rvalid,
    input  wire [511:0]  m_axi_rdata
);
    wire         busy, resp_err, m_valid;
    wire [511:0] m_data;
    wire [0:0]   arid;
    wire [63:0]  araddr;
    wire [7:0]   arlen;
    wire [2:0]   arsize, arprot;
    wire [1:0]   arburst;
    wire         arlock, arvalid, rready;
    wire [3:0]   arcache, arqos;

    onic_axi_rd #(
        .FIFO_LOG2(FIFO_LOG2),
        .MAX_BURST(MAX_BURST)
    ) dut (
        .clk(clk), .rst(rst), .start(start), .addr(addr), .beats({24'd0, beats_in}), .busy(busy),
        .resp_err(resp_err), .m_data(m_data), .m_valid(m_valid), .m_ready(m_ready),
        .m_axi_arid(arid), .m_axi_araddr(araddr), .m_axi_arlen(arlen), .m_axi_arsize(arsize),
        .m_axi_arburst(arburst), .m_axi_arlock(arlock), .m_axi_arcache(arcache), .m_axi_arprot(arprot),
        .m_axi_arqos(arqos), .m_axi_arvalid(arvalid), .m_axi_arready(m_axi_arready), .m_axi_rid(arid),
        .m_axi_rdata(m_axi_rdata), .m_axi_rresp(m_axi_rresp), .m_axi_rlast(m_axi_rlast),
        .m_axi_rvalid(m_axi_rvalid), .m_axi_rready(rready)
    );

    reg        f_past_valid = 1'b0;
    reg [15:0] f_requested;   // beats asked for since start
    reg [15:0] f_received;    // beats received since start
    reg [15:0] f_delivered;   // beats taken from m_*
    reg [7:0]  f_beats;       // `beats` of the run
    reg        f_started;
    always @(posedge clk) f_past_valid <= 1'b1;

    wire ar_hs = arvalid && m_axi_arready;
    wire r_hs  = m_axi_rvalid && rready;
    always @(posedge clk) begin
        if (rst) begin
            f_requested <= 16'd0;
            f_received  <= 16'd0;
            f_delivered <= 16'd0;
            f_started   <= 1'b0;
            f_beats     <= 8'd0;
        end else if (start) begin
            f_requested <= 16'd0;
            f_received  <= 16'd0;
            f_delivered <= 16'd0;
            f_started   <= 1'b1;
            f_beats     <= beats_in;
        end else begin
            if (ar_hs) f_requested <= f_requested + {8'd0, arlen} + 16'd1;
            if (r_hs) f_received <= f_received + 16'd1;
            if (m_valid && m_ready) f_delivered <= f_delivered + 16'd1;
        end
    end

    always @(*) begin
        if (!f_past_valid) assume(rst);
        if (start) assume(!busy && !rst);
        // memory answers only what was asked (a reset interconnect; see the README for the other)
        if (m_axi_rvalid) assume(f_received < f_requested);
    end

    always @(posedge clk) begin
        if (f_past_valid && !$past(rst) && !rst) begin
            if ($past(arvalid && !m_axi_arready) && !$past(start)) begin
                assert(arvalid);
                assert(araddr == $past(araddr));
                assert(arlen == $past(arlen));
            end
        end
        if (!rst && arvalid) begin
            assert({3'b0, araddr[11:6]} + {1'b0, arlen} <= 9'd63);
            assert(arlen < MAX_BURST);
            assert(araddr[5:0] == 6'd0);
            assert(arsize == 3'd6 && arburst == 2'b01);
        end
        if (!rst && f_started) begin
            assert(f_requested <= {8'd0, f_beats});
            assert(f_received - f_delivered <= (1 << FIFO_LOG2));
            if (!busy) assert(f_requested == {8'd0, f_beats} && f_received == f_requested);
        end
    end
endmodule

`resetall
