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
 */
module onic_axi_wr #(
    // log2 of the write FIFO depth in beats (at least two bursts)
    parameter integer FIFO_LOG2 = 7,
    // longest burst in beats (at most 64 beats = one 4 KiB page of 512-bit beats)
    parameter integer MAX_BURST = 64
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
    output wire [0:0]    m_axi_awid,
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
    input  wire [0:0]    m_axi_bid,
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
    end

    reg  [63:0]        aw_addr_reg;
    reg  [31:0]        aw_left_reg;    // beats not yet covered by a burst address
    reg  [7:0]         aw_len_reg;
    reg                aw_valid_reg;
    reg  [FIFO_LOG2:0] committed_reg;  // beats in the FIFO already promised to a burst
    reg  [31:0]        w_left_reg;     // beats not yet sent on W
    reg  [7:0]         w_beat_reg;     // beat index within the current burst
    reg  [31:0]        b_wait_reg;     // bursts whose response has not come back
    reg  [63:0]        last_strb_reg;
    reg                resp_err_reg;
    reg                suppress_reg;   // suppress was seen this run
    reg                kill_reg;       // WSTRB = 0 (changes only between W beats)

    wire [511:0]       fifo_data;
    wire               fifo_valid;
    wire [FIFO_LOG2:0] fifo_count;
    wire [7:0]         lenq_head;
    wire               lenq_valid;
    wire               lenq_s_ready;
    wire [LENQ_LOG2:0] lenq_count;

    wire [6:0]  page_left = 7'd64 - {1'b0, aw_addr_reg[11:6]};
    wire [31:0] len_a     = (aw_left_reg < MAX_BURST) ? aw_left_reg : MAX_BURST;
    wire [31:0] burst_len = (len_a < {25'd0, page_left}) ? len_a : {25'd0, page_left};
    wire [FIFO_LOG2:0] ready_beats = fifo_count - committed_reg;
    // the length queue cannot overflow: at most FIFO depth / 1 bursts are committed at once,
    // but we still require room in it before issuing
    wire        issue = !aw_valid_reg && aw_left_reg != 0 && burst_len <= ready_beats &&
                        lenq_count < (1 << LENQ_LOG2);

    wire        w_fire = fifo_valid && lenq_valid && m_axi_wready;
    wire        w_last = w_beat_reg == lenq_head;
    // a response with no burst waiting (from before a reset) is ignored
    wire        b_fire = m_axi_bvalid && b_wait_reg != 0;

    always @(posedge clk) begin
        if (rst) begin
            aw_valid_reg  <= 1'b0;
            aw_left_reg   <= 32'd0;
            aw_addr_reg   <= 64'd0;
            aw_len_reg    <= 8'd0;
            committed_reg <= {(FIFO_LOG2+1){1'b0}};
            w_left_reg    <= 32'd0;
            w_beat_reg    <= 8'd0;
            b_wait_reg    <= 32'd0;
            last_strb_reg <= {64{1'b1}};
            resp_err_reg  <= 1'b0;
            suppress_reg  <= 1'b0;
            kill_reg      <= 1'b0;
        end else if (start) begin
            resp_err_reg  <= 1'b0;
            suppress_reg  <= 1'b0;
            kill_reg      <= 1'b0;
            aw_valid_reg  <= 1'b0;
            aw_left_reg   <= beats;
            aw_addr_reg   <= {addr[63:6], 6'd0};
            committed_reg <= {(FIFO_LOG2+1){1'b0}};
            w_left_reg    <= beats;
            w_beat_reg    <= 8'd0;
            b_wait_reg    <= 32'd0;
            last_strb_reg <= {64{1'b1}} >> (7'd64 - last_bytes);
        end else begin
            if (aw_valid_reg && m_axi_awready) begin
                aw_valid_reg <= 1'b0;
                aw_addr_reg  <= aw_addr_reg + {49'd0, aw_len_reg, 6'd0} + 64'd64;
            end
            if (issue) begin
                aw_valid_reg <= 1'b1;
                aw_len_reg   <= burst_len[7:0] - 8'd1;
                aw_left_reg  <= aw_left_reg - burst_len;
            end
            committed_reg <= committed_reg + (issue ? burst_len[FIFO_LOG2:0] : {(FIFO_LOG2+1){1'b0}})
                             - {{FIFO_LOG2{1'b0}}, w_fire};
            if (w_fire) begin
                w_left_reg <= w_left_reg - 32'd1;
                w_beat_reg <= w_last ? 8'd0 : w_beat_reg + 8'd1;
            end
            b_wait_reg <= b_wait_reg + {31'd0, issue} - {31'd0, b_fire};
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
    assign busy = aw_left_reg != 0 || aw_valid_reg || w_left_reg != 0 || b_wait_reg != 0;

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
        .s_data(burst_len[7:0] - 8'd1),
        .s_valid(issue),
        .s_ready(lenq_s_ready),
        .m_data(lenq_head),
        .m_valid(lenq_valid),
        .m_ready(w_fire && w_last),
        .count(lenq_count)
    );

    assign m_axi_awid    = 1'b0;
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
    assign m_axi_wstrb   = kill_reg ? 64'd0 : (w_left_reg == 32'd1) ? last_strb_reg : {64{1'b1}};
    assign m_axi_wlast   = w_last;
    assign m_axi_wvalid  = fifo_valid && lenq_valid;
    // responses are only counted, never stalled
    assign m_axi_bready  = 1'b1;


    wire _unused_ok = &{1'b0, m_axi_bid, m_axi_bresp[0], lenq_s_ready, addr[5:0], 1'b0};

endmodule

`resetall
