// OptimusNIC: AXI4 write engine, one stripe buffer per run, from a FIFO
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Writes `beats` consecutive 512-bit beats taken from s_* to `addr` (64-byte aligned; one
 * stripe of an array, its beat count from onic_stripe_beats) with INCR bursts that never cross
 * a 4 KiB page. A burst address goes out only when all its beats are in the FIFO, so the W
 * channel never waits on the datapath mid-burst. The last beat's WSTRB covers only its first
 * `last_bytes` bytes (the array's elements end there): memory past the array is never written.
 * `busy` stays high until every write response has come back. A write-only AXI4 master: AW, W
 * and B channels only.
 *
 * `suppress` (an error elsewhere made the rest of the run's results wrong) is sticky until the
 * next start: every W beat presented after it goes out with WSTRB = 0 (a beat already waiting
 * for WREADY keeps its WSTRB, as AXI requires; the datapath from an R beat to W is far longer
 * than that clock). Bursts, beat counts, WLAST and responses stay as they were, so the run still
 * ends with ap_done, but memory keeps its old values from there on.
 *
 * Responses are counted, one AWID per run. The AWID is the reset epoch, a counter that only
 * configuration initialises and that every reset advances by one; a B response whose BID is not
 * the current epoch answers a burst from before a reset and is dropped, so after a reset of the
 * kernel alone a response still coming from an interconnect that was not reset cannot end the
 * next run early or flag an error in it (the last 2^ID_BITS - 1 resets are told apart). W beats
 * carry no ID in AXI4: a reset while a burst's W beats are partly sent (or its AW was taken
 * before all of them) leaves that interconnect waiting for beats the kernel no longer knows of,
 * and the next run's beats would complete that burst. Only a reset of the interconnect with the
 * kernel recovers from that (design.md 3b).
 */
module onic_axi_wr #(
    // log2 of the write FIFO depth in beats (at least two bursts)
    parameter integer FIFO_LOG2 = 7,
    // longest burst in beats (at most 64 beats = one 4 KiB page of 512-bit beats)
    parameter integer MAX_BURST = 64,
    // AXI ID width: the ID is the reset epoch (see above), 1 to 8 bits
    parameter integer ID_BITS = 1
) (
    input  wire          clk,
    input  wire          rst,

    /* run control */
    input  wire          start,
    input  wire [63:0]   addr,
    input  wire [31:0]   beats,
    input  wire [6:0]    last_bytes,
    output wire          busy,
    // no write-back from now until the next start (WSTRB = 0 on every beat); may be a pulse
    input  wire          suppress,
    // sticky for the run: a BRESP of SLVERR or DECERR was seen (cleared by start)
    output wire          resp_err,

    /* beats in */
    input  wire [511:0]  s_data,
    input  wire          s_valid,
    output wire          s_ready,

    /* AXI4 master (write channels) */
    output wire [ID_BITS-1:0] m_axi_awid,
    output wire [63:0]   m_axi_awaddr,
    output wire [7:0]    m_axi_awlen,
    output wire [2:0]    m_axi_awsize,
    output wire [1:0]    m_axi_awburst,
    output wire          m_axi_awlock,
    output wire [3:0]    m_axi_awcache,
    output wire [2:0]    m_axi_awprot,
    output wire [3:0]    m_axi_awqos,
    output wire          m_axi_awvalid,
    input  wire          m_axi_awready,
    output wire [511:0]  m_axi_wdata,
    output wire [63:0]   m_axi_wstrb,
    output wire          m_axi_wlast,
    output wire          m_axi_wvalid,
    input  wire          m_axi_wready,
    input  wire [ID_BITS-1:0] m_axi_bid,
    input  wire [1:0]    m_axi_bresp,
    input  wire          m_axi_bvalid,
    output wire          m_axi_bready
);

    localparam integer LENQ_LOG2 = 4;

    initial begin
        if (MAX_BURST < 1 || MAX_BURST > 64 || 2 * MAX_BURST > (1 << FIFO_LOG2)) begin
            $error("MAX_BURST must be 1..64 and two bursts must fit the FIFO (instance %m)");
            $finish;
        end
        if (ID_BITS < 1 || ID_BITS > 8) begin
            $error("ID_BITS must be 1..8 (instance %m)");
            $finish;
        end
    end

    // The next burst is worked out one clock ahead from registers (nx_*, len_reg), and the beats
    // ready for a burst and the length queue's fill are running counts (avail_reg, lq_reg) rather
    // than subtractions of live FIFO counts, so no path from a register to a register crosses
    // more than one comparison and one adder (300 MHz).
    reg  [63:0]        aw_addr_reg;
    reg  [7:0]         aw_len_reg;
    reg                aw_valid_reg;
    reg  [63:0]        nx_addr_reg;    // address of the next burst
    reg  [31:0]        nx_left_reg;    // beats not yet covered by a burst address
    reg  [6:0]         nx_page_reg;    // beats from nx_addr_reg to the end of its 4 KiB page (1..64)
    reg  [6:0]         len_reg;        // next burst's length, from last clock's nx_* (0: none left)
    reg                len_ok_reg;     // nx_* did not change last clock: len_reg is current
    reg  [FIFO_LOG2:0] avail_reg;      // beats in the FIFO not yet promised to a burst
    reg                push_reg;       // a beat entered the FIFO last clock
    reg  [LENQ_LOG2:0] lq_reg;         // bursts in the length queue (one clock late to shrink)
    reg                lq_pop_reg;     // a burst's last W beat went out last clock
    reg  [31:0]        w_left_reg;     // beats not yet sent on W
    reg                w_one_reg;      // w_left_reg == 1: the next W beat is the buffer's last
    reg  [7:0]         w_beat_reg;     // beat index within the current burst
    reg  [31:0]        b_wait_reg;     // bursts (AW accepted) whose response has not come back
    reg  [63:0]        last_strb_reg;
    reg                resp_err_reg;
    // run_start reaches every engine, the scalars and the FIFOs: each engine takes it (and
    // its arguments, as they were on that clock) through a register of its own, so that net
    // drives one flip-flop per engine rather than every register loaded at start (the FIFO still
    // clears on start itself, so nothing left from the last run can come out a clock later)
    reg                start_q;
    reg  [63:6]        addr_q;
    reg  [31:0]        beats_q;
    reg  [6:0]         last_bytes_q;
    reg                suppress_reg;   // suppress was seen this run
    reg                kill_reg;       // WSTRB = 0 (changes only between W beats)

    wire [511:0]       fifo_data;
    wire               fifo_valid;
    wire [FIFO_LOG2:0] fifo_count;
    wire [7:0]         lenq_head;
    wire               lenq_valid;
    wire               lenq_s_ready;
    wire [LENQ_LOG2:0] lenq_count;

    localparam [6:0]         MAX_LEN = MAX_BURST[6:0];
    // burst length at counter width (2 * MAX_BURST <= DEPTH: nothing is lost)
    wire [FIFO_LOG2+7:0] len_w = {{(FIFO_LOG2+1){1'b0}}, len_reg};
    wire [FIFO_LOG2:0]   len_c = len_w[FIFO_LOG2:0];

    // next burst: the rest of the buffer, the rest of the 4 KiB page, or MAX_BURST beats
    wire [6:0]  len_a    = (nx_left_reg < MAX_BURST) ? nx_left_reg[6:0] : MAX_LEN;
    wire [6:0]  len_next = (len_a < nx_page_reg) ? len_a : nx_page_reg;
    // a burst address goes out only when all its beats are in the FIFO (avail_reg counts a beat
    // one clock late: never more than there are) and its length fits the length queue
    wire        issue = !aw_valid_reg && len_ok_reg && len_reg != 7'd0 &&
                        len_w <= {7'd0, avail_reg} && !lq_reg[LENQ_LOG2];
    wire        aw_hs = aw_valid_reg && m_axi_awready;

    wire        w_fire = fifo_valid && lenq_valid && m_axi_wready;
    wire        w_last = w_beat_reg == lenq_head;
    // a response of an earlier epoch (from before a reset) is ignored
    wire        b_fire = m_axi_bvalid && m_axi_bid == epoch_reg && b_wait_reg != 0;

    // The reset epoch: no reset of its own (it counts resets), so its initial value is the
    // configuration's; advanced on the first clock of each reset.
    localparam [ID_BITS-1:0] EPOCH_ONE = 1;
    /* verilator lint_off PROCASSINIT */
    reg  [ID_BITS-1:0] epoch_reg = {ID_BITS{1'b0}};
    reg                rst_q = 1'b0;
    /* verilator lint_on PROCASSINIT */
    always @(posedge clk) begin
        rst_q <= rst;
        if (rst && !rst_q) begin
            epoch_reg <= epoch_reg + EPOCH_ONE;
        end
    end

    always @(posedge clk) begin
        // !aw_valid_reg: always true at a start (engines are idle then); it makes each engine's
        // start_q a different function, so synthesis cannot merge them back into one net
        start_q <= start && !rst && !aw_valid_reg;
        push_reg <= s_valid && s_ready && !rst;
        addr_q  <= addr[63:6];
        beats_q <= beats;
        last_bytes_q <= last_bytes;
    end

    always @(posedge clk) begin
        if (rst) begin
            aw_valid_reg  <= 1'b0;
            aw_addr_reg   <= 64'd0;
            aw_len_reg    <= 8'd0;
            nx_addr_reg   <= 64'd0;
            nx_left_reg   <= 32'd0;
            nx_page_reg   <= 7'd64;
            len_reg       <= 7'd0;
            len_ok_reg    <= 1'b0;
            avail_reg     <= {(FIFO_LOG2+1){1'b0}};
            lq_reg        <= {(LENQ_LOG2+1){1'b0}};
            lq_pop_reg    <= 1'b0;
            w_left_reg    <= 32'd0;
            w_one_reg     <= 1'b0;
            w_beat_reg    <= 8'd0;
            b_wait_reg    <= 32'd0;
            last_strb_reg <= {64{1'b1}};
            resp_err_reg  <= 1'b0;
            suppress_reg  <= 1'b0;
            kill_reg      <= 1'b0;
        end else if (start_q) begin
            resp_err_reg  <= 1'b0;
            suppress_reg  <= 1'b0;
            kill_reg      <= 1'b0;
            aw_valid_reg  <= 1'b0;
            nx_addr_reg   <= {addr_q, 6'd0};
            nx_left_reg   <= beats_q;
            nx_page_reg   <= 7'd64 - {1'b0, addr_q[11:6]};
            len_ok_reg    <= 1'b0;
            avail_reg     <= {(FIFO_LOG2+1){1'b0}};
            lq_reg        <= {(LENQ_LOG2+1){1'b0}};
            lq_pop_reg    <= 1'b0;
            w_left_reg    <= beats_q;
            w_one_reg     <= beats_q == 32'd1;
            w_beat_reg    <= 8'd0;
            b_wait_reg    <= 32'd0;
            last_strb_reg <= {64{1'b1}} >> (7'd64 - last_bytes_q);
        end else begin
            len_reg    <= len_next;
            len_ok_reg <= !issue;
            lq_pop_reg <= w_fire && w_last;
            if (aw_hs) begin
                aw_valid_reg <= 1'b0;
            end
            if (issue) begin
                aw_valid_reg <= 1'b1;
                aw_addr_reg  <= nx_addr_reg;
                aw_len_reg   <= {1'b0, len_reg} - 8'd1;
                nx_addr_reg  <= nx_addr_reg + {51'd0, len_reg, 6'd0};
                nx_left_reg  <= nx_left_reg - {25'd0, len_reg};
                nx_page_reg  <= (len_reg == nx_page_reg) ? 7'd64 : nx_page_reg - len_reg;
            end
            avail_reg <= avail_reg - (issue ? len_c : {(FIFO_LOG2+1){1'b0}})
                         + {{FIFO_LOG2{1'b0}}, push_reg};
            lq_reg <= lq_reg + {{LENQ_LOG2{1'b0}}, issue} - {{LENQ_LOG2{1'b0}}, lq_pop_reg};
            if (w_fire) begin
                w_left_reg <= w_left_reg - 32'd1;
                w_one_reg  <= w_left_reg == 32'd2;
                w_beat_reg <= w_last ? 8'd0 : w_beat_reg + 8'd1;
            end
            b_wait_reg <= b_wait_reg + {31'd0, aw_hs} - {31'd0, b_fire};
            if (b_fire && m_axi_bresp[1]) begin
                resp_err_reg <= 1'b1;
            end
            if (suppress) begin
                suppress_reg <= 1'b1;
            end
            if (!(m_axi_wvalid && !m_axi_wready)) begin
                kill_reg <= suppress_reg || suppress;
            end
        end
    end

    assign resp_err = resp_err_reg;
    assign busy = start_q || nx_left_reg != 0 || aw_valid_reg || w_left_reg != 0 || b_wait_reg != 0;

    onic_fifo #(
        .WIDTH(512),
        .DEPTH_LOG2(FIFO_LOG2)
    ) fifo_inst (
        .clk(clk),
        .rst(rst),
        .clear(start),
        .s_data(s_data),
        .s_valid(s_valid),
        .s_ready(s_ready),
        .m_data(fifo_data),
        .m_valid(fifo_valid),
        .m_ready(w_fire),
        .count(fifo_count)
    );

    // burst lengths (AWLEN) in issue order, so the W channel knows where each burst ends
    onic_fifo #(
        .WIDTH(8),
        .DEPTH_LOG2(LENQ_LOG2)
    ) lenq_inst (
        .clk(clk),
        .rst(rst),
        .clear(start),
        .s_data({1'b0, len_reg} - 8'd1),
        .s_valid(issue),
        .s_ready(lenq_s_ready),
        .m_data(lenq_head),
        .m_valid(lenq_valid),
        .m_ready(w_fire && w_last),
        .count(lenq_count)
    );

    assign m_axi_awid    = epoch_reg;
    assign m_axi_awaddr  = aw_addr_reg;
    assign m_axi_awlen   = aw_len_reg;
    assign m_axi_awsize  = 3'd6;
    assign m_axi_awburst = 2'b01;
    assign m_axi_awlock  = 1'b0;
    assign m_axi_awcache = 4'b0011;
    assign m_axi_awprot  = 3'b000;
    assign m_axi_awqos   = 4'd0;
    assign m_axi_awvalid = aw_valid_reg;
    assign m_axi_wdata   = fifo_data;
    assign m_axi_wstrb   = kill_reg ? 64'd0 : w_one_reg ? last_strb_reg : {64{1'b1}};
    assign m_axi_wlast   = w_last;
    assign m_axi_wvalid  = fifo_valid && lenq_valid;
    // responses are only counted, never stalled
    assign m_axi_bready  = 1'b1;


    wire _unused_ok = &{1'b0, m_axi_bresp[0], lenq_s_ready, lenq_count, fifo_count, addr[5:0],
                       len_w[FIFO_LOG2+7:FIFO_LOG2+1], 1'b0};

endmodule

`resetall
