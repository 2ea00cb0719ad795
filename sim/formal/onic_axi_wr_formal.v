// OptimusNIC: formal properties of onic_axi_wr (SymbiYosys, bounded model check)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The write engine with a 4-beat FIFO and 2-beat bursts, so a bounded check reaches runs of
 * several bursts with every response back, a full FIFO and back-pressure on s_*, AW and W.
 * Every input is free except as assumed: reset first (and at any clock after), `start` only
 * while idle, `last_bytes` 1..64 (onic_stripe_beats), the engine's current AWID on a response
 * only for a burst whose address and last W beat went out, and responses with another BID (an
 * interconnect not reset with the kernel) at any clock. `suppress` is free, so every property
 * holds with write-back suppressed at any clock too.
 *
 * Shadow: the run's address, beat count and last_bytes; beats accepted on s_*, bursts issued
 * (AWVALID rose) and their end, AW handshakes, W beats and bursts, responses; one chosen beat
 * (an arbitrary index, an arbitrary 512-bit value) followed from s_* to W. Asserted:
 *  - AXI on AW and W: AWVALID/AW payload and WVALID/WDATA/WSTRB/WLAST held until READY; AWSIZE
 *    64 bytes, INCR, aligned, AWLEN below MAX_BURST, no burst crosses 4 KiB, bursts contiguous
 *    from the run's address; a W beat only for a burst whose AWVALID has risen (at the latest
 *    with it), WLAST exactly on the beat its AWLEN says (up to 8 bursts tracked);
 *  - a burst's address goes out only once all its beats are in the FIFO, and beats promised
 *    to bursts but not yet written never exceed the FIFO;
 *  - WSTRB placement: a beat's strobes never cover a byte outside the run's buffer (full beats
 *    all 64 bytes, the last beat its first last_bytes bytes); without suppress exactly those
 *    bytes; once suppress is seen, every beat presented after the one then waiting has none;
 *  - no loss: the chosen beat goes out as the W beat of the same index with the same data;
 *  - beats written never above `beats`, and equal to it with every response back when idle.
 * Covers: a run of three bursts complete with all its responses, the FIFO full with s_valid
 * refused, AWVALID and WVALID each waiting for READY, the last beat of a two-or-more-beat run
 * written with a partial strobe, a suppressed beat written, an old-BID response ignored.
 */
module onic_axi_wr_formal #(
    parameter integer FIFO_LOG2 = 2,
    parameter integer MAX_BURST = 2,
    // free low bits of each beat on s_* (the rest zero): the FIFO treats every bit alike
    parameter integer DATA_BITS = 8
) (
    input  wire          clk,
    input  wire          rst,
    input  wire          start,
    input  wire [63:0]   addr,
    input  wire [7:0]    beats_in,
    input  wire [6:0]    last_bytes,
    input  wire          suppress,
    input  wire [DATA_BITS-1:0] s_data,
    input  wire          s_valid,
    input  wire          m_axi_awready,
    input  wire          m_axi_wready,
    input  wire [0:0]    m_axi_bid,
    input  wire [1:0]    m_axi_bresp,
    input  wire          m_axi_bvalid
);
    localparam [15:0] DEPTH = 1 << FIFO_LOG2;

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
        .busy(busy), .suppress(suppress), .resp_err(resp_err), .s_data({{(512-DATA_BITS){1'b0}}, s_data}), .s_valid(s_valid), .s_ready(s_ready),
        .m_axi_awid(awid), .m_axi_awaddr(awaddr), .m_axi_awlen(awlen), .m_axi_awsize(awsize),
        .m_axi_awburst(awburst), .m_axi_awlock(awlock), .m_axi_awcache(awcache), .m_axi_awprot(awprot),
        .m_axi_awqos(awqos), .m_axi_awvalid(awvalid), .m_axi_awready(m_axi_awready), .m_axi_wdata(wdata),
        .m_axi_wstrb(wstrb), .m_axi_wlast(wlast), .m_axi_wvalid(wvalid), .m_axi_wready(m_axi_wready),
        .m_axi_bid(m_axi_bid), .m_axi_bresp(m_axi_bresp), .m_axi_bvalid(m_axi_bvalid), .m_axi_bready(bready)
    );

    (* anyconst *) reg [15:0]  f_k;    // the chosen beat's index in its run
    (* anyconst *) reg [DATA_BITS-1:0] f_val;  // ... and its data

    reg        f_past_valid = 1'b0;
    reg        f_awvalid_q;
    reg [15:0] f_accepted;    // beats taken on s_* since start
    reg [15:0] f_issued;      // beats of the bursts issued (AWVALID rose) since start
    reg [15:0] f_written;     // W beats since start
    reg [3:0]  f_bursts;      // bursts issued
    reg [3:0]  f_wbursts;     // W bursts ended (WLAST)
    reg [3:0]  f_aw_done;     // AW handshakes
    reg [3:0]  f_b;           // responses with the current ID
    reg [15:0] f_end [0:7];   // beat count at the end of burst k
    reg [7:0]  f_beats;
    reg [63:0] f_addr;
    reg [6:0]  f_last;        // last_bytes of the run
    reg        f_started;
    reg        f_sup;         // suppress seen since start
    reg        f_kill;        // ... and the W beat waiting then (if any) has gone
    reg        f_full_seen;   // s_valid refused by a full FIFO during this run
    reg        f_stale_seen;  // a response with an old BID during this run
    always @(posedge clk) f_past_valid <= 1'b1;
    // the engine takes start (and its arguments) through a register: the run begins a clock
    // later, and a suppress in that clock, like one in the clock of start, belongs to the last run
    reg        f_start_q = 1'b0;
    always @(posedge clk) f_start_q <= start && !rst;

    wire issue = awvalid && !f_awvalid_q;
    wire s_hs  = s_valid && s_ready;
    wire w_hs  = wvalid && m_axi_wready;
    wire b_cur = m_axi_bvalid && bready && m_axi_bid == awid;

    // the bytes of the run's buffer in the beat now on W: all 64, or the first last_bytes of the last
    wire [63:0] f_tail;
    genvar gi;
    generate
        for (gi = 0; gi < 64; gi = gi + 1) begin : g_tail
            assign f_tail[gi] = gi < f_last;
        end
    endgenerate
    wire [63:0] f_mask = (f_written + 16'd1 == {8'd0, f_beats}) ? f_tail : {64{1'b1}};

    always @(posedge clk) begin
        f_awvalid_q <= rst ? 1'b0 : awvalid;
        // the FIFO clears on start itself: beats from the clock after it on belong to the run
        if (rst || start) begin
            f_accepted  <= 16'd0;
            f_full_seen <= 1'b0;
        end else begin
            if (s_hs) f_accepted <= f_accepted + 16'd1;
            if (s_valid && !s_ready) f_full_seen <= 1'b1;
        end
        if (rst || start || f_start_q) begin
            f_issued     <= 16'd0;
            f_written    <= 16'd0;
            f_bursts     <= 4'd0;
            f_wbursts    <= 4'd0;
            f_aw_done    <= 4'd0;
            f_b          <= 4'd0;
            f_started    <= !rst;
            if (!f_start_q) begin
                f_beats <= beats_in;
                f_addr  <= {addr[63:6], 6'd0};
                f_last  <= last_bytes;
            end
            f_sup        <= 1'b0;
            f_kill       <= 1'b0;
            f_stale_seen <= 1'b0;
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
            if (b_cur) f_b <= f_b + 4'd1;
            if (m_axi_bvalid && !b_cur && busy) f_stale_seen <= 1'b1;
        end
    end

    always @(*) begin
        if (!f_past_valid) assume(rst);
        if (start) assume(!busy && !rst && last_bytes >= 7'd1 && last_bytes <= 7'd64);
        if (m_axi_bvalid && m_axi_bid == awid) assume(f_b < f_aw_done && f_b < f_wbursts);
        assume(f_bursts < 4'd8);
        // the chosen beat carries the chosen data (every other beat: any data)
        if (!rst && !start && s_hs && f_accepted == f_k) assume(s_data == f_val);
    end

    always @(posedge clk) begin
        if (f_past_valid && !$past(rst) && !rst && !$past(start)) begin
            if ($past(awvalid && !m_axi_awready)) begin
                assert(awvalid && awaddr == $past(awaddr) && awlen == $past(awlen));
            end
            if ($past(wvalid && !m_axi_wready)) begin
                assert(wvalid && wlast == $past(wlast) && wstrb == $past(wstrb) && wdata == $past(wdata));
            end
        end
        if (!rst && awvalid) begin
            assert({3'b0, awaddr[11:6]} + {1'b0, awlen} <= 9'd63);
            assert(awlen < MAX_BURST);
            assert(awaddr[5:0] == 6'd0 && awsize == 3'd6 && awburst == 2'b01);
        end
        if (f_past_valid && !rst && !f_started) begin
            assert(!awvalid && !wvalid);
        end
        if (!rst && f_started && !start) begin
            if (issue) begin
                assert(awaddr == f_addr + {42'd0, f_issued, 6'd0});
                // all the burst's beats are in the FIFO (taken on s_* in this run)
                assert(f_issued + {8'd0, awlen} + 16'd1 <= f_accepted);
            end
            assert(f_issued - f_written <= DEPTH);
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
            if (wvalid) begin
                assert((wstrb & ~f_mask) == 64'd0);
                if (!f_sup) assert(wstrb == f_mask);
                if (f_kill) assert(wstrb == 64'd0);
                if (f_written == f_k) assert(wdata == {{(512-DATA_BITS){1'b0}}, f_val});
            end
            if (!busy) assert(f_written == {8'd0, f_beats} && f_b == f_bursts && f_aw_done == f_bursts);
        end
    end

    always @(*) begin
        if (!rst && f_started && !start && !f_start_q) begin
            cover(!busy && f_bursts >= 4'd3);
            cover(f_accepted - f_written == DEPTH && s_valid && !s_ready);
            cover(awvalid && !m_axi_awready && f_written != 16'd0);
            cover(wvalid && !m_axi_wready && f_written != 16'd0);
            cover(w_hs && !f_sup && f_beats >= 8'd2 && f_written + 16'd1 == {8'd0, f_beats} && f_last < 7'd64);
            cover(w_hs && wstrb == 64'd0 && f_written != 16'd0);
            cover(f_stale_seen && !busy && f_beats != 8'd0);
        end
    end
endmodule

`resetall
