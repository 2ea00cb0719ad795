// OptimusNIC: AXI4-Stream shard input, one shard per run, into a FIFO
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Takes the ceil(n * ELEM_BYTES / 64) beats of a gradient shard from an AXI4-Stream (packed
 * like memory: element i at byte i * ELEM_BYTES of the shard) and passes them on in order.
 * TLAST ends a shard: if the shard's last beat does not carry TLAST, beats are dropped up to
 * and including the one that does, so the next run starts at the next shard. TKEEP is not
 * needed: the element count says which bytes of the last beat are gradients.
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
    output wire          busy,

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

    reg  [31:0] left_reg;   // shard beats still to take
    reg         drain_reg;  // dropping beats up to TLAST

    wire        fifo_s_ready;
    wire [FIFO_LOG2:0] fifo_count;

    // n * ELEM_BYTES takes up to 34 bits (n up to 2^32-1)
    wire [35:0] n_bytes = {4'd0, n} * ELEM_BYTES;
    wire [35:0] n_beats = (n_bytes + 36'd63) >> 6;

    wire take = left_reg != 0;
    wire fire = s_axis_tvalid && s_axis_tready;

    assign s_axis_tready = (take && fifo_s_ready) || drain_reg;
    assign busy = take || drain_reg;

    always @(posedge clk) begin
        if (rst) begin
            left_reg  <= 32'd0;
            drain_reg <= 1'b0;
        end else if (start) begin
            left_reg  <= n_beats[31:0];
            drain_reg <= 1'b0;
        end else if (fire) begin
            if (take) begin
                left_reg <= left_reg - 32'd1;
                if (left_reg == 32'd1 && !s_axis_tlast) begin
                    drain_reg <= 1'b1;
                end
            end else if (s_axis_tlast) begin
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
        .s_data(s_axis_tdata),
        .s_valid(fire && take),
        .s_ready(fifo_s_ready),
        .m_data(m_data),
        .m_valid(m_valid),
        .m_ready(m_ready),
        .count(fifo_count)
    );

    wire _unused_ok = &{1'b0, s_axis_tkeep, fifo_count, n_bytes[35:32], n_beats[35:32], 1'b0};

endmodule

`resetall
