// OptimusNIC: AXI4-Stream shard input, one shard per run, into a FIFO
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Takes the ceil(n * ELEM_BYTES / 64) beats of a gradient shard from an AXI4-Stream (packed
 * like memory: element i at byte i * ELEM_BYTES of the shard) and passes them on in order.
 * TLAST ends a shard, and the run always ends: if the shard's last beat does not carry TLAST
 * (a long shard, `long_err`), beats are dropped up to and including the one that does, so the
 * next run starts at the next shard; if TLAST comes early (a short shard, `short_err`), the
 * stream is left alone from there and the missing beats are passed on as zeros. With `drop`
 * (the run does nothing: a misaligned pointer) the whole shard is dropped up to TLAST. TKEEP is
 * not needed: the element count says which bytes of the last beat are gradients.
 */
module onic_axis_rd #(
    // bytes per gradient element (4 for fp32, 2 for bf16/fp16)
    parameter integer ELEM_BYTES = 4,
    // log2 of the FIFO depth in beats
    parameter integer FIFO_LOG2 = 4
) (
    input  wire          clk,
    input  wire          rst,

    /* run control */
    input  wire          start,
    input  wire [31:0]   n,
    // at start: drop this run's shard (n > 0) up to TLAST and pass nothing on
    input  wire          drop,
    output wire          busy,
    // sticky for the run (cleared by start): TLAST came early / late
    output wire          short_err,
    output wire          long_err,

    /* AXI4-Stream input */
    input  wire [511:0]  s_axis_tdata,
    input  wire [63:0]   s_axis_tkeep,
    input  wire          s_axis_tvalid,
    output wire          s_axis_tready,
    input  wire          s_axis_tlast,

    /* beats out */
    output wire [511:0]  m_data,
    output wire          m_valid,
    input  wire          m_ready
);

    initial begin
        if (ELEM_BYTES != 2 && ELEM_BYTES != 4) begin
            $error("ELEM_BYTES must be 2 or 4 (instance %m)");
            $finish;
        end
    end

    reg  [31:0] left_reg;   // shard beats still to pass on
    reg         drain_reg;  // dropping beats up to TLAST
    reg         pad_reg;    // TLAST came early: the rest are zero beats
    reg         short_reg;
    reg         long_reg;
    wire        fifo_s_ready;
    wire [FIFO_LOG2:0] fifo_count;
    // n * ELEM_BYTES takes up to 34 bits (n up to 2^32-1)
    wire [35:0] n_bytes = {4'd0, n} * ELEM_BYTES;
    wire [35:0] n_beats = (n_bytes + 36'd63) >> 6;
    wire take = left_reg != 0 && !pad_reg;
    wire fire = s_axis_tvalid && s_axis_tready;
    wire push = (fire && take) || (pad_reg && left_reg != 0 && fifo_s_ready);
    assign s_axis_tready = (take && fifo_s_ready) || drain_reg;
    assign busy = left_reg != 0 || drain_reg;
    assign short_err = short_reg;
    assign long_err = long_reg;

    always @(posedge clk) begin
        if (rst) begin
            left_reg  <= 32'd0;
            drain_reg <= 1'b0;
            pad_reg   <= 1'b0;
            short_reg <= 1'b0;
            long_reg  <= 1'b0;
        end else if (start) begin
            left_reg  <= drop ? 32'd0 : n_beats[31:0];
            drain_reg <= drop && n != 32'd0;
            pad_reg   <= 1'b0;
            short_reg <= 1'b0;
            long_reg  <= 1'b0;
        end else begin
            if (push) begin
                left_reg <= left_reg - 32'd1;
            end
            if (fire && take) begin
                if (s_axis_tlast && left_reg != 32'd1) begin
                    pad_reg   <= 1'b1;
                    short_reg <= 1'b1;
                end
                if (left_reg == 32'd1 && !s_axis_tlast) begin
                    drain_reg <= 1'b1;
                    long_reg  <= 1'b1;
                end
            end else if (fire && s_axis_tlast) begin
                drain_reg <= 1'b0;
            end
        end
    end

    onic_fifo #(
        .WIDTH(512),
        .DEPTH_LOG2(FIFO_LOG2)
    ) fifo_inst (
        .clk(clk),
        .rst(rst),
        .clear(start),
        .s_data(pad_reg ? 512'd0 : s_axis_tdata),
        .s_valid(push),
        .s_ready(fifo_s_ready),
        .m_data(m_data),
        .m_valid(m_valid),
        .m_ready(m_ready),
        .count(fifo_count)
    );

    wire _unused_ok = &{1'b0, s_axis_tkeep, fifo_count, n_bytes[35:32], n_beats[35:32], 1'b0};

endmodule

`resetall
