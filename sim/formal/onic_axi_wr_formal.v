// OptimusNIC: formal properties of onic_axi_wr (SymbiYosys, bounded model check)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The write engine with a small FIFO and short bursts (its 512-bit storage cut to free values). Assumed: reset first, `start` only while
 * idle, B only for bursts whose address and data went out, with the AWID as BID. Asserted: AWVALID/AW payload and
 * WVALID/WLAST/WSTRB held until READY, no burst crosses 4 KiB, AWLEN below MAX_BURST, WLAST on the
 * beat the burst's AWLEN says (bursts in issue order; up to 8 tracked), beats written never
 * above `beats` and equal to it (with every response back) when the engine goes idle. `suppress`
 * is a free input, so all of that holds with write-back suppressed at any clock too; and once
 * suppress has been seen, every W beat presented after the one then waiting has WSTRB = 0.
 */
module onic_axi_wr_formal #(
    parameter integer FIFO_LOG2 = 3,
    parameter integer MAX_BURST = 4
) (
    input  wire          clk,
    input  wire          rst,
    input  wire          start,
    input  wire [63:0]   addr,
    input  wire [7:0]    beats_in,
    input  wire [6:0]    last_bytes,
    input  wire          suppress,
    input  wire [511:0]  s_data,
    input  wire          s_valid,
    input  wire          m_axi_awready,
    input  wire          m_axi_wready,
    input  wire [1:0]    m_axi_bresp,
    input  wire          m_axi_bvalid
);
    wire         busy, resp_err, s_ready;
    wire [0:0]   awid;
    wire [63:0]  awaddr;
    wire [7:0]   awlen;
    wire [2:0]   awsize, awprot;
    wire [1:0]   awburst;
    wire         awlock, awvalid, wlast, wvalid, bready;
    wire [3:0]   awcache, awqos;
    wire [511:0] wdata;
    wire [63:0]  wstrb;

    onic_axi_wr #(
        .FIFO_LOG2(FIFO_LOG2),
        .MAX_BURST(MAX_BURST)
    ) dut (
        .clk(clk), .rst(rst), .start(start), .addr(addr), .beats({24'd0, beats_in}), .last_bytes(last_bytes),
        .busy(busy), .suppress(suppress), .resp_err(resp_err), .s_data(s_data), .s_valid(s_valid), .s_ready(s_ready),
        .m_axi_awid(awid), .m_axi_awaddr(awaddr), .m_axi_awlen(awlen), .m_axi_awsize(awsize),
        .m_axi_awburst(awburst), .m_axi_awlock(awlock), .m_axi_awcache(awcache), .m_axi_awprot(awprot),
        .m_axi_awqos(awqos), .m_axi_awvalid(awvalid), .m_axi_awready(m_axi_awready), .m_axi_wdata(wdata),
        .m_axi_wstrb(wstrb), .m_axi_wlast(wlast), .m_axi_wvalid(wvalid), .m_axi_wready(m_axi_wready),
        .m_axi_bid(awid), .m_axi_bresp(m_axi_bresp), .m_axi_bvalid(m_axi_bvalid), .m_axi_bready(bready)
    );

    reg        f_past_valid = 1'b0;
    reg        f_awvalid_q;
    reg [15:0] f_issued;      // beats of the bursts issued (AWVALID rose) since start
    reg [15:0] f_written;     // W beats since start
    reg [3:0]  f_bursts;      // bursts issued
    reg [3:0]  f_wbursts;     // W bursts ended (WLAST)
    reg [3:0]  f_aw_done;     // AW handshakes
    reg [3:0]  f_b;           // responses
    reg [15:0] f_end [0:7];   // beat count at the end of burst k
    reg [7:0]  f_beats;
    reg        f_started;
    reg        f_sup;         // suppress seen since start
    reg        f_kill;        // ... and the W beat waiting then (if any) has gone
    always @(posedge clk) f_past_valid <= 1'b1;
    // the engine takes start (and its arguments) through a register: the run begins a clock
    // later, and a suppress in that clock, like one in the clock of start, belongs to the last run
    reg        f_start_q = 1'b0;
    always @(posedge clk) f_start_q <= start && !rst;

    wire issue = awvalid && !f_awvalid_q;
    wire w_hs  = wvalid && m_axi_wready;
    always @(posedge clk) begin
        f_awvalid_q <= rst ? 1'b0 : awvalid;
        if (rst || start || f_start_q) begin
            f_issued  <= 16'd0;
            f_written <= 16'd0;
            f_bursts  <= 4'd0;
            f_wbursts <= 4'd0;
            f_aw_done <= 4'd0;
            f_b       <= 4'd0;
            f_started <= !rst;
            if (!f_start_q) f_beats <= beats_in;
            f_sup     <= 1'b0;
            f_kill    <= 1'b0;
        end else begin
            if (suppress) f_sup <= 1'b1;
            if ((suppress || f_sup) && !(wvalid && !m_axi_wready)) f_kill <= 1'b1;
            if (issue) begin
                f_issued <= f_issued + {8'd0, awlen} + 16'd1;
                f_end[f_bursts[2:0]] <= f_issued + {8'd0, awlen} + 16'd1;
                f_bursts <= f_bursts + 4'd1;
            end
            if (awvalid && m_axi_awready) f_aw_done <= f_aw_done + 4'd1;
            if (w_hs) f_written <= f_written + 16'd1;
            if (w_hs && wlast) f_wbursts <= f_wbursts + 4'd1;
            if (m_axi_bvalid && bready) f_b <= f_b + 4'd1;
        end
    end

    always @(*) begin
        if (!f_past_valid) assume(rst);
        if (start) assume(!busy && !rst);
        if (m_axi_bvalid) assume(f_b < f_aw_done && f_b < f_wbursts);
        assume(f_bursts < 4'd8);
    end

    always @(posedge clk) begin
        if (f_past_valid && !$past(rst) && !rst && !$past(start)) begin
            if ($past(awvalid && !m_axi_awready)) begin
                assert(awvalid && awaddr == $past(awaddr) && awlen == $past(awlen));
            end
            if ($past(wvalid && !m_axi_wready)) begin
                // WDATA comes from the FIFO storage, cut to free values here: not compared
                assert(wvalid && wlast == $past(wlast) && wstrb == $past(wstrb));
            end
        end
        if (!rst && awvalid) begin
            assert({3'b0, awaddr[11:6]} + {1'b0, awlen} <= 9'd63);
            assert(awlen < MAX_BURST);
            assert(awaddr[5:0] == 6'd0 && awsize == 3'd6 && awburst == 2'b01);
        end
        if (!rst && f_started && !start) begin
            // W may go with the AW of its burst (both follow the engine's issue), before f_* see it
            if (wvalid && f_wbursts == f_bursts) begin
                assert(issue);
                assert(wlast == (f_written + 16'd1 == f_issued + {8'd0, awlen} + 16'd1));
            end
            if (wvalid && f_wbursts != f_bursts) begin
                assert(f_wbursts < f_bursts);
                assert(wlast == (f_written + 16'd1 == f_end[f_wbursts[2:0]]));
            end
            assert(f_written <= {8'd0, f_beats} && f_issued <= {8'd0, f_beats});
            if (f_kill && wvalid) assert(wstrb == 64'd0);
            if (!busy) assert(f_written == {8'd0, f_beats} && f_b == f_bursts && f_aw_done == f_bursts);
        end
    end
endmodule

`resetall
