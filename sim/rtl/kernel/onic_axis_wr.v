// OptimusNIC: AXI4-Stream output of one run's array, from a FIFO
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Sends the ceil(n * ELEM_BYTES / 64) beats of an array taken from s_* (in element order,
 * packed as the array lies in memory: element i at byte i * ELEM_BYTES) as one AXI4-Stream
 * packet: TLAST on the last beat, TKEEP all ones except on the last beat, where it covers the
 * array's last (n * ELEM_BYTES - 1) % 64 + 1 bytes; the bytes past them are sent as zeros
 * (whatever the packer left there), so the packet's bytes depend on n and the values alone.
 * n = 0 sends nothing. `busy` stays high from start until the last beat has been taken (TREADY),
 * so the run does not end while its packet is still on the way. Back-pressure (TREADY low)
 * fills the FIFO and then holds s_ready low; nothing is dropped.
 *
 * The outputs are not registered here: the kernel top puts a register slice (onic_skid) between
 * this and the port.
 */
module onic_axis_wr #(
    // bytes per element (4 for fp32, 2 for bf16)
    parameter integer ELEM_BYTES = 4,
    // log2 of the FIFO depth in beats
    parameter integer FIFO_LOG2 = 5
) (
    input  wire          clk,
    input  wire          rst,

    /* run control */
    input  wire          start,
    input  wire [31:0]   n,
    output wire          busy,

    /* beats in, element order */
    input  wire [511:0]  s_data,
    input  wire          s_valid,
    output wire          s_ready,

    /* AXI4-Stream output */
    output wire [511:0]  m_axis_tdata,
    output wire [63:0]   m_axis_tkeep,
    output wire          m_axis_tvalid,
    input  wire          m_axis_tready,
    output wire          m_axis_tlast
);

    initial begin
        if (ELEM_BYTES != 2 && ELEM_BYTES != 4) begin
            $error("ELEM_BYTES must be 2 or 4 (instance %m)");
            $finish;
        end
    end

    // start and n go through a register of their own (as in onic_axi_wr), so the start net drives
    // one flip-flop here and the beat count is worked out from a register
    reg         start_q;
    reg  [31:0] n_q;
    reg  [31:0] left_reg;   // beats still to send
    reg         one_reg;    // left_reg == 1: the head beat is the packet's last
    reg  [63:0] keep_reg;   // TKEEP of the last beat

    // n * ELEM_BYTES takes up to 34 bits (n up to 2^32-1)
    wire [35:0] n_bytes = {4'd0, n_q} * ELEM_BYTES;
    wire [35:0] n_beats = (n_bytes + 36'd63) >> 6;
    wire [6:0]  tail    = {1'b0, n_bytes[5:0]};  // bytes of the last beat, 0 meaning 64

    wire [511:0] fifo_data;
    wire         fifo_valid;
    wire [FIFO_LOG2:0] fifo_count;
    wire         send = fifo_valid && left_reg != 32'd0;
    wire         fire = send && m_axis_tready;

    always @(posedge clk) begin
        start_q <= start && !rst;
        n_q     <= n;
    end

    always @(posedge clk) begin
        if (rst) begin
            left_reg <= 32'd0;
            one_reg  <= 1'b0;
            keep_reg <= {64{1'b1}};
        end else if (start_q) begin
            left_reg <= n_beats[31:0];
            one_reg  <= n_beats[31:0] == 32'd1;
            keep_reg <= (tail == 7'd0) ? {64{1'b1}} : ~({64{1'b1}} << tail);
        end else if (fire) begin
            left_reg <= left_reg - 32'd1;
            one_reg  <= left_reg == 32'd2;
        end
    end

    assign busy = start_q || left_reg != 32'd0;

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
        .m_ready(fire),
        .count(fifo_count)
    );

    wire [63:0] keep = one_reg ? keep_reg : {64{1'b1}};
    genvar b;
    generate
        for (b = 0; b < 64; b = b + 1) begin : g_byte
            assign m_axis_tdata[8*b +: 8] = keep[b] ? fifo_data[8*b +: 8] : 8'd0;
        end
    endgenerate
    assign m_axis_tkeep  = keep;
    assign m_axis_tlast  = one_reg;
    assign m_axis_tvalid = send;

    wire _unused_ok = &{1'b0, fifo_count, n_bytes[35:32], n_beats[35:32], 1'b0};

endmodule

`resetall
