// OptimusNIC: AXI4-Stream shard input, one shard per run, into a FIFO
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Takes the ceil(n * ELEM_BYTES / 64) beats of a gradient shard from an AXI4-Stream (packed
 * like memory: element i at byte i * ELEM_BYTES of the shard) and passes them on in order.
 *
 * TKEEP: a null beat (TKEEP all zero, legal anywhere in an AXI4-Stream) carries no data and is
 * skipped, so it moves no element; its TLAST still ends the shard. Every other beat is a data
 * beat and must keep all 64 bytes, except the shard's last data beat, which must keep exactly
 * the bytes of its last elements (bytes 0 to (n * ELEM_BYTES - 1) % 64). A data beat that
 * misses a byte of the shard (a partial beat before the last, a last beat short by bytes) sets
 * `keep_err` and still counts as a beat, so the beats after it stay where they were; sparse
 * streams (null bytes inside a beat) are not packed up. Bytes kept past the n elements in the
 * last data beat make the shard long (`long_err`), as beats past it do.
 *
 * TLAST ends a shard, and the run always ends: if the shard's last data beat does not carry
 * TLAST, beats are taken up to and including the one that does, null beats without complaint
 * (a shard may end on a null beat with TLAST) and data beats as a long shard (`long_err`,
 * dropped), so the next run starts at the next shard; if TLAST comes early (a short shard,
 * `short_err`), the stream is left alone from there and the missing beats are passed on as
 * zeros. With `drop` (the run does nothing: a misaligned pointer) the whole shard is dropped up
 * to TLAST without any check.
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
    // sticky for the run (cleared by start): TLAST came early / late, a data beat missed bytes
    output wire          short_err,
    output wire          long_err,
    output wire          keep_err,

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
    reg         one_reg;    // left_reg == 1: the next data beat is the shard's last
    reg         drain_reg;  // taking beats up to TLAST
    reg         judge_reg;  // ... and a data beat among them makes the shard long (not on `drop`)
    reg         pad_reg;    // TLAST came early: the rest are zero beats
    reg         short_reg;
    reg         long_reg;
    reg         keep_reg;
    reg  [63:0] last_keep_reg;  // TKEEP of the shard's last data beat
    wire        fifo_s_ready;
    wire [FIFO_LOG2:0] fifo_count;
    // n * ELEM_BYTES takes up to 34 bits (n up to 2^32-1)
    wire [35:0] n_bytes = {4'd0, n} * ELEM_BYTES;
    wire [35:0] n_beats = (n_bytes + 36'd63) >> 6;
    // bytes 0 .. tail - 1 of the last beat: one LUT per bit from the 6 low bits of n_bytes
    wire [6:0]  tail = (n_bytes[5:0] == 6'd0) ? 7'd64 : {1'b0, n_bytes[5:0]};
    wire [63:0] tail_keep;
    genvar b;
    generate
        for (b = 0; b < 64; b = b + 1) begin : g_tail
            localparam [6:0] B7 = b;
            assign tail_keep[b] = B7 < tail;
        end
    endgenerate
    wire take = left_reg != 0 && !pad_reg;
    wire fire = s_axis_tvalid && s_axis_tready;
    wire null_beat = s_axis_tkeep == 64'd0;
    wire data = fire && take && !null_beat;
    wire [63:0] want_keep = one_reg ? last_keep_reg : {64{1'b1}};
    wire push = data || (pad_reg && left_reg != 0 && fifo_s_ready);
    assign s_axis_tready = (take && fifo_s_ready) || drain_reg;
    assign busy = left_reg != 0 || drain_reg;
    assign short_err = short_reg;
    assign long_err = long_reg;
    assign keep_err = keep_reg;

    always @(posedge clk) begin
        if (rst) begin
            left_reg      <= 32'd0;
            one_reg       <= 1'b0;
            drain_reg     <= 1'b0;
            judge_reg     <= 1'b0;
            pad_reg       <= 1'b0;
            short_reg     <= 1'b0;
            long_reg      <= 1'b0;
            keep_reg      <= 1'b0;
            last_keep_reg <= {64{1'b1}};
        end else if (start) begin
            left_reg      <= drop ? 32'd0 : n_beats[31:0];
            one_reg       <= !drop && n_beats[31:0] == 32'd1;
            drain_reg     <= drop && n != 32'd0;
            judge_reg     <= 1'b0;
            pad_reg       <= 1'b0;
            short_reg     <= 1'b0;
            long_reg      <= 1'b0;
            keep_reg      <= 1'b0;
            last_keep_reg <= tail_keep;
        end else begin
            if (push) begin
                left_reg <= left_reg - 32'd1;
                one_reg  <= left_reg == 32'd2;
            end
            if (fire && take) begin
                if (s_axis_tlast && !(data && one_reg)) begin
                    pad_reg   <= 1'b1;
                    short_reg <= 1'b1;
                end
                if (data && one_reg && !s_axis_tlast) begin
                    drain_reg <= 1'b1;
                    judge_reg <= 1'b1;
                end
                // bytes of the shard missing, or kept past its last element
                if (data && (s_axis_tkeep & want_keep) != want_keep) begin
                    keep_reg <= 1'b1;
                end
                if (data && (s_axis_tkeep & ~want_keep) != 64'd0) begin
                    long_reg <= 1'b1;
                end
            end else if (fire) begin
                if (judge_reg && !null_beat) begin
                    long_reg <= 1'b1;
                end
                if (s_axis_tlast) begin
                    drain_reg <= 1'b0;
                    judge_reg <= 1'b0;
                end
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

    wire _unused_ok = &{1'b0, fifo_count, n_bytes[35:32], n_beats[35:32], 1'b0};

endmodule

`resetall
