// OptimusNIC: formal properties of onic_axi_rd (SymbiYosys, bounded model check)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The read engine with a 4-beat FIFO and 2-beat bursts, so a bounded check reaches runs of
 * several bursts, a full FIFO, two bursts in flight, page ends and back-pressure on AR and on
 * the output. Every input is free except as assumed: reset first (and at any clock after),
 * `start` only while the engine is idle (onic_run_ctrl's run_start), memory answers with the
 * engine's current ARID only beats it was asked for (RLAST, RRESP and RVALID timing free), and
 * any number of beats with another RID (an interconnect not reset with the kernel, still
 * answering bursts from before a reset) at any clock.
 *
 * Shadow: the run's address and beat count, the beats requested (AR handshakes), received (R
 * beats with the current ID) and delivered (m_valid && m_ready), and one chosen beat (an
 * arbitrary index, an arbitrary 512-bit value) followed from R to the output. Asserted:
 *  - AXI on AR: ARVALID and the AR payload held until ARREADY; ARSIZE 64 bytes, INCR, aligned;
 *    ARLEN below MAX_BURST; no burst crosses 4 KiB; bursts contiguous from the run's address
 *    (ARADDR = addr + 64 x beats requested before it); beats requested never above `beats`;
 *  - outstanding limit: beats requested (this AR included) and not yet delivered never above
 *    the FIFO depth, so no beat ever meets a full FIFO;
 *  - no loss: the chosen beat leaves as the output beat of the same index with the same data
 *    (so no beat is dropped, duplicated or reordered, and no old-RID beat gets in), a beat is on
 *    the output only if one is held, and a beat received three or more clocks ago and not yet
 *    delivered is on the output (none stays stuck); m_valid and m_data held until m_ready;
 *  - the run ends complete: when the engine is idle every beat of `beats` was requested and
 *    received.
 * Covers: the FIFO full (four beats held) with the output stalled, two bursts in flight, ARVALID
 * waiting for ARREADY while a burst is in flight, an old-RID beat dropped during a run, a run
  * of two bursts delivered in full, and a run delivered in full after its FIFO was full.
 */
module onic_axi_rd_formal #(
    parameter integer FIFO_LOG2 = 2,
    parameter integer MAX_BURST = 2,
    // free low bits of each R beat (the rest zero): the FIFO treats every bit alike, and 512
    // free bits through a real FIFO memory make the solver slower by an order of magnitude
    parameter integer DATA_BITS = 8
) (
    input  wire          clk,
    input  wire          rst,
    input  wire          start,
    input  wire [63:0]   addr,
    input  wire [7:0]    beats_in,
    input  wire          m_ready,
    input  wire          m_axi_arready,
    input  wire [0:0]    m_axi_rid,
    input  wire [1:0]    m_axi_rresp,
    input  wire          m_axi_rlast,
    input  wire          m_axi_rvalid,
    input  wire [DATA_BITS-1:0] m_axi_rdata
);
    localparam [15:0] DEPTH = 1 << FIFO_LOG2;

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
        .m_axi_arqos(arqos), .m_axi_arvalid(arvalid), .m_axi_arready(m_axi_arready), .m_axi_rid(m_axi_rid),
        .m_axi_rdata({{(512-DATA_BITS){1'b0}}, m_axi_rdata}), .m_axi_rresp(m_axi_rresp), .m_axi_rlast(m_axi_rlast),
        .m_axi_rvalid(m_axi_rvalid), .m_axi_rready(rready)
    );

    (* anyconst *) reg [15:0]  f_k;    // the chosen beat's index in its run
    (* anyconst *) reg [DATA_BITS-1:0] f_val;  // ... and its data

    reg        f_past_valid = 1'b0;
    reg [15:0] f_requested;   // beats asked for (AR handshakes) since start
    reg [15:0] f_received;    // beats received with the current ID since start
    reg [15:0] f_delivered;   // beats taken from m_*
    reg [15:0] f_rcv_q1;      // f_received a clock ago
    reg [15:0] f_rcv_q2;      // ... and two clocks ago (beats received three or more clocks ago)
    reg [1:0]  f_quiet;       // clocks since the last reset or start (saturating)
    reg [7:0]  f_beats;       // `beats` of the run
    reg [63:0] f_addr;        // the run's address
    reg        f_started;
    reg        f_full_seen;   // the FIFO held DEPTH beats during this run
    reg        f_stale_seen;  // a beat with an old RID arrived during this run
    always @(posedge clk) f_past_valid <= 1'b1;

    wire ar_hs    = arvalid && m_axi_arready;
    wire r_hs     = m_axi_rvalid && rready;
    wire r_cur    = r_hs && m_axi_rid == arid;
    wire m_hs     = m_valid && m_ready;
    wire [15:0] f_held = f_received - f_delivered;
    always @(posedge clk) begin
        f_rcv_q1 <= f_received;
        f_rcv_q2 <= f_rcv_q1;
        if (rst || start) begin
            f_requested  <= 16'd0;
            f_received   <= 16'd0;
            f_delivered  <= 16'd0;
            f_quiet      <= 2'd0;
            f_started    <= !rst;
            f_beats      <= beats_in;
            f_addr       <= {addr[63:6], 6'd0};
            f_full_seen  <= 1'b0;
            f_stale_seen <= 1'b0;
        end else begin
            if (f_quiet != 2'd3) f_quiet <= f_quiet + 2'd1;
            if (ar_hs) f_requested <= f_requested + {8'd0, arlen} + 16'd1;
            if (r_cur) f_received <= f_received + 16'd1;
            if (m_hs) f_delivered <= f_delivered + 16'd1;
            if (f_held == DEPTH) f_full_seen <= 1'b1;
            if (r_hs && !r_cur && busy) f_stale_seen <= 1'b1;
        end
    end

    always @(*) begin
        if (!f_past_valid) assume(rst);
        if (start) assume(!busy && !rst);
        // memory answers with the current ID only what was asked; other IDs are free
        if (m_axi_rvalid && m_axi_rid == arid) assume(f_received < f_requested);
        // the chosen beat carries the chosen data (every other beat: any data)
        if (!rst && !start && r_cur && f_received == f_k) assume(m_axi_rdata == f_val);
    end

    always @(posedge clk) begin
        if (f_past_valid && !$past(rst) && !rst) begin
            if ($past(arvalid && !m_axi_arready)) begin
                assert(arvalid);
                assert(araddr == $past(araddr));
                assert(arlen == $past(arlen));
            end
            if ($past(m_valid && !m_ready) && !$past(start)) begin
                assert(m_valid && m_data == $past(m_data));
            end
        end
        if (!rst && arvalid) begin
            assert({3'b0, araddr[11:6]} + {1'b0, arlen} <= 9'd63);
            assert(arlen < MAX_BURST);
            assert(araddr[5:0] == 6'd0);
            assert(arsize == 3'd6 && arburst == 2'b01);
        end
        if (f_past_valid && !rst && !f_started) begin
            assert(!arvalid && !m_valid);
        end
        if (!rst && f_started && !start) begin
            if (arvalid) begin
                assert(araddr == f_addr + {42'd0, f_requested, 6'd0});
                assert(f_requested + {8'd0, arlen} + 16'd1 - f_delivered <= DEPTH);
                assert(f_requested + {8'd0, arlen} + 16'd1 <= {8'd0, f_beats});
            end
            assert(f_requested <= {8'd0, f_beats});
            assert(f_received <= f_requested);
            assert(f_delivered <= f_received);
            assert(f_requested - f_delivered <= DEPTH);
            if (m_valid) assert(f_delivered < f_received);
            if (m_valid && f_delivered == f_k) assert(m_data == {{(512-DATA_BITS){1'b0}}, f_val});
            if (f_quiet >= 2'd2 && f_rcv_q2 > f_delivered) assert(m_valid);
            if (!busy) assert(f_requested == {8'd0, f_beats} && f_received == f_requested);
        end
    end

    always @(*) begin
        if (!rst && f_started && !start) begin
            cover(f_held == DEPTH && m_valid && !m_ready);
            cover(f_requested - f_received > MAX_BURST);
            cover(arvalid && !m_axi_arready && f_requested != f_received);
            cover(f_stale_seen && f_delivered != 16'd0);
            cover(!busy && f_beats > MAX_BURST && f_delivered == {8'd0, f_beats});
            cover(!busy && f_full_seen && f_delivered == {8'd0, f_beats});
        end
    end
endmodule

`resetall
