// OptimusNIC: AXI4 read engine, one stripe buffer per run, into a FIFO
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Reads `beats` consecutive 512-bit beats from `addr` (64-byte aligned; one stripe of an array,
 * its beat count from onic_stripe_beats) with INCR bursts that never cross a 4 KiB page, and
 * delivers them in order on m_*. Several bursts are in flight at once: a burst is requested as
 * soon as the FIFO has room for it and for everything already requested, so RREADY can stay
 * high and memory latency is hidden. A read-only AXI4 master: AR and R channels only.
 *
 * Responses are matched by count, in order: one ARID per run, RLAST is not looked at (the beats
 * of a burst are counted against ARLEN). The ARID is the reset epoch, a counter that only
 * configuration initialises and that every reset advances by one; an R beat whose RID is not
 * the current epoch answers a burst from before a reset and is taken and dropped. So after a
 * reset of the kernel alone, an interconnect (or memory controller) that was not reset and
 * still returns the bursts it was asked for earlier does not feed them into the next run: it
 * tells apart the beats of the last 2^ID_BITS - 1 resets. Waiting for the bus to go quiet after
 * a reset would not do: the kernel forgot how many beats are owed, and memory may pause longer
 * than any timeout.
 */
module onic_axi_rd #(
    // log2 of the read FIFO depth in beats; the FIFO depth is the outstanding limit (a burst is
    // requested only when the FIFO has room for it and for everything in flight), so the kernel
    // top sets it to outstanding bursts x MAX_BURST from hls.bursts (latency x bandwidth)
    parameter integer FIFO_LOG2 = 8,
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
    output wire          busy,
    // sticky for the run: an RRESP of SLVERR or DECERR was seen (cleared by start)
    output wire          resp_err,

    /* beats out */
    output wire [511:0]  m_data,
    output wire          m_valid,
    input  wire          m_ready,

    /* AXI4 master (read channels) */
    output wire [ID_BITS-1:0] m_axi_arid,
    output wire [63:0]   m_axi_araddr,
    output wire [7:0]    m_axi_arlen,
    output wire [2:0]    m_axi_arsize,
    output wire [1:0]    m_axi_arburst,
    output wire          m_axi_arlock,
    output wire [3:0]    m_axi_arcache,
    output wire [2:0]    m_axi_arprot,
    output wire [3:0]    m_axi_arqos,
    output wire          m_axi_arvalid,
    input  wire          m_axi_arready,
    input  wire [ID_BITS-1:0] m_axi_rid,
    input  wire [511:0]  m_axi_rdata,
    input  wire [1:0]    m_axi_rresp,
    input  wire          m_axi_rlast,
    input  wire          m_axi_rvalid,
    output wire          m_axi_rready
);

    localparam integer DEPTH = 1 << FIFO_LOG2;

    initial begin
        if (MAX_BURST < 1 || MAX_BURST > 64 || MAX_BURST > DEPTH) begin
            $error("MAX_BURST must be 1..64 and fit the FIFO (instance %m)");
            $finish;
        end
        if (ID_BITS < 1 || ID_BITS > 8) begin
            $error("ID_BITS must be 1..8 (instance %m)");
            $finish;
        end
    end

    // The next burst is worked out one clock ahead from registers (nx_*, len_reg), and the FIFO
    // space is a running count (free_reg) rather than a subtraction of live counts, so no path
    // from a register to a register crosses more than one comparison and one adder (300 MHz).
    reg  [63:0]        ar_addr_reg;
    reg  [7:0]         ar_len_reg;
    reg  [6:0]         ar_beats_reg;    // ar_len_reg + 1
    reg                ar_valid_reg;
    reg  [63:0]        nx_addr_reg;     // address of the next burst
    reg  [31:0]        nx_left_reg;     // beats not yet requested
    reg  [6:0]         nx_page_reg;     // beats from nx_addr_reg to the end of its 4 KiB page (1..64)
    reg  [6:0]         len_reg;         // next burst's length, from last clock's nx_* (0: none left)
    reg                len_ok_reg;      // nx_* did not change last clock: len_reg is current
    reg  [FIFO_LOG2:0] free_reg;        // FIFO beats neither holding data nor promised to a burst
    reg                pop_reg;         // a beat left the FIFO last clock (frees its place)
    reg  [FIFO_LOG2:0] outstanding_reg; // beats requested (AR accepted), not yet received
    reg                resp_err_reg;
    // run_start reaches every engine, the scalars and the FIFOs: each engine takes it (and
    // its arguments, as they were on that clock) through a register of its own, so that net
    // drives one flip-flop per engine rather than every register loaded at start (the FIFO still
    // clears on start itself, so nothing left from the last run can come out a clock later)
    reg                start_q;
    reg  [63:6]        addr_q;
    reg  [31:0]        beats_q;

    wire [FIFO_LOG2:0] fifo_count;
    wire               fifo_s_ready;

    localparam [6:0]         MAX_LEN = MAX_BURST[6:0];
    localparam [FIFO_LOG2:0] DEPTH_C = DEPTH[FIFO_LOG2:0];
    // burst lengths at counter width (MAX_BURST <= DEPTH: nothing is lost)
    wire [FIFO_LOG2+7:0] len_w   = {{(FIFO_LOG2+1){1'b0}}, len_reg};
    wire [FIFO_LOG2+7:0] ar_n_w  = {{(FIFO_LOG2+1){1'b0}}, ar_beats_reg};
    wire [FIFO_LOG2:0]   len_c   = len_w[FIFO_LOG2:0];
    wire [FIFO_LOG2:0]   ar_n_c  = ar_n_w[FIFO_LOG2:0];

    // next burst: the rest of the buffer, the rest of the 4 KiB page, or MAX_BURST beats
    wire [6:0]  len_a      = (nx_left_reg < MAX_BURST) ? nx_left_reg[6:0] : MAX_LEN;
    wire [6:0]  len_next   = (len_a < nx_page_reg) ? len_a : nx_page_reg;
    // a burst goes out only when the FIFO has room for it and for everything already requested
    // (free_reg counts a beat taken out one clock late: never more room than there is)
    wire        issue      = !ar_valid_reg && len_ok_reg && len_reg != 7'd0 &&
                             len_w <= {7'd0, free_reg};
    wire        ar_hs      = ar_valid_reg && m_axi_arready;
    // a beat of an earlier epoch (an interconnect that was not reset with the kernel still
    // answering a burst from before the reset) is dropped, and the count never goes below zero
    wire        r_beat     = m_axi_rvalid && m_axi_rready && m_axi_rid == epoch_reg && outstanding_reg != 0;

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
        // !ar_valid_reg: always true at a start (engines are idle then); it makes each engine's
        // start_q a different function, so synthesis cannot merge them back into one net
        start_q <= start && !rst && !ar_valid_reg;
        pop_reg <= m_valid && m_ready && !rst;
        addr_q  <= addr[63:6];
        beats_q <= beats;
    end

    always @(posedge clk) begin
        if (rst) begin
            ar_valid_reg    <= 1'b0;
            ar_addr_reg     <= 64'd0;
            ar_len_reg      <= 8'd0;
            ar_beats_reg    <= 7'd0;
            nx_addr_reg     <= 64'd0;
            nx_left_reg     <= 32'd0;
            nx_page_reg     <= 7'd64;
            len_reg         <= 7'd0;
            len_ok_reg      <= 1'b0;
            free_reg        <= DEPTH_C;
            outstanding_reg <= {(FIFO_LOG2+1){1'b0}};
            resp_err_reg    <= 1'b0;
        end else if (start_q) begin
            resp_err_reg    <= 1'b0;
            ar_valid_reg    <= 1'b0;
            nx_addr_reg     <= {addr_q, 6'd0};
            nx_left_reg     <= beats_q;
            nx_page_reg     <= 7'd64 - {1'b0, addr_q[11:6]};
            len_ok_reg      <= 1'b0;
            free_reg        <= DEPTH_C;
            outstanding_reg <= {(FIFO_LOG2+1){1'b0}};
        end else begin
            len_reg    <= len_next;
            len_ok_reg <= !issue;
            if (ar_hs) begin
                ar_valid_reg <= 1'b0;
            end
            if (issue) begin
                ar_valid_reg <= 1'b1;
                ar_addr_reg  <= nx_addr_reg;
                ar_len_reg   <= {1'b0, len_reg} - 8'd1;
                ar_beats_reg <= len_reg;
                nx_addr_reg  <= nx_addr_reg + {51'd0, len_reg, 6'd0};
                nx_left_reg  <= nx_left_reg - {25'd0, len_reg};
                nx_page_reg  <= (len_reg == nx_page_reg) ? 7'd64 : nx_page_reg - len_reg;
            end
            free_reg <= free_reg - (issue ? len_c : {(FIFO_LOG2+1){1'b0}})
                        + {{FIFO_LOG2{1'b0}}, pop_reg};
            if (r_beat && m_axi_rresp[1]) begin
                resp_err_reg <= 1'b1;
            end
            outstanding_reg <= outstanding_reg + (ar_hs ? ar_n_c : {(FIFO_LOG2+1){1'b0}})
                               - {{FIFO_LOG2{1'b0}}, r_beat};
        end
    end

    assign resp_err = resp_err_reg;
    assign busy = start_q || nx_left_reg != 0 || ar_valid_reg || outstanding_reg != 0;

    onic_fifo #(
        .WIDTH(512),
        .DEPTH_LOG2(FIFO_LOG2)
    ) fifo_inst (
        .clk(clk),
        .rst(rst),
        .clear(start),
        .s_data(m_axi_rdata),
        .s_valid(r_beat),
        .s_ready(fifo_s_ready),
        .m_data(m_data),
        .m_valid(m_valid),
        .m_ready(m_ready),
        .count(fifo_count)
    );

    assign m_axi_arid    = epoch_reg;
    assign m_axi_araddr  = ar_addr_reg;
    assign m_axi_arlen   = ar_len_reg;
    assign m_axi_arsize  = 3'd6;
    assign m_axi_arburst = 2'b01;
    assign m_axi_arlock  = 1'b0;
    assign m_axi_arcache = 4'b0011;
    assign m_axi_arprot  = 3'b000;
    assign m_axi_arqos   = 4'd0;
    assign m_axi_arvalid = ar_valid_reg;
    // space for every requested beat was reserved before the request went out
    assign m_axi_rready  = 1'b1;


    wire _unused_ok = &{1'b0, m_axi_rresp[0], m_axi_rlast, fifo_s_ready, fifo_count, addr[5:0], len_w[FIFO_LOG2+7:FIFO_LOG2+1],
                       ar_n_w[FIFO_LOG2+7:FIFO_LOG2+1], 1'b0};

endmodule

`resetall
