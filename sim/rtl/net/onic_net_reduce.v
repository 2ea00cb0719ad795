// OptimusNIC: one reduce-scatter hop's addition, one 512-bit beat per clock
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * y = a + b per element of a beat (docs/design.md 8.1): `a` is the received partial sum (the
 * left operand), `b` the card's own gradient. WIRE_BF16 = 0: 16 lanes of fp32_add (one IEEE-754
 * binary32 addition, RNE, subnormals kept). WIRE_BF16 = 1: 32 lanes of an input register, exact
 * widening (the bf16 pattern as the top half) -> fp32_add -> fp32_to_bf16 (RNE; every NaN
 * leaves as 0x7FC0), which is
 * hls.net.ring.add_partial bit for bit. A NaN sum of the fp32 wire is the canonical 0x7FC00000
 * (the fp units' rule; numpy keeps an operand's payload: the project compares NaN as any NaN).
 *
 * The pipelines run free (no clock enable to fan out over 512 bits): a beat is taken only when
 * the output FIFO has a place reserved for it. `used_reg` counts the beats in the adders and in
 * the FIFO; with 2^FIFO_LOG2 > LATENCY + 4 places the credit loop never throttles a steady
 * stream, and a stalled consumer never loses a beat. TKEEP, TLAST and TUSER ride along with
 * lane 0. s_a_tready / s_b_tready each depend on the other side's TVALID (a join).
 */
module onic_net_reduce #(
    // 0: fp32 wire (16 lanes), 1: bf16 wire (32 lanes)
    parameter integer WIRE_BF16 = 0,
    // bits of TUSER carried from s_a to m (routing the result)
    parameter integer USER_WIDTH = 1,
    // log2 of the output FIFO's depth in beats (more than LATENCY + 4)
    parameter integer FIFO_LOG2 = 4
) (
    input  wire                  clk,
    input  wire                  rst,

    /* the received partial sum: left operand, TKEEP/TLAST/TUSER kept */
    input  wire [511:0]          s_a_tdata,
    input  wire [63:0]           s_a_tkeep,
    input  wire                  s_a_tlast,
    input  wire [USER_WIDTH-1:0] s_a_tuser,
    input  wire                  s_a_tvalid,
    output wire                  s_a_tready,

    /* the local gradient: right operand */
    input  wire [511:0]          s_b_tdata,
    input  wire                  s_b_tvalid,
    output wire                  s_b_tready,

    /* the sums */
    output wire [511:0]          m_tdata,
    output wire [63:0]           m_tkeep,
    output wire                  m_tlast,
    output wire [USER_WIDTH-1:0] m_tuser,
    output wire                  m_tvalid,
    input  wire                  m_tready
);

    localparam integer LATENCY = (WIRE_BF16 != 0) ? 8 : 6;
    localparam integer DEPTH = 1 << FIFO_LOG2;
    localparam integer TAG_W = 64 + 1 + USER_WIDTH;
    localparam [FIFO_LOG2:0] DEPTH_C = DEPTH[FIFO_LOG2:0];

    initial begin
        if (DEPTH <= LATENCY + 4) begin
            $error("2^FIFO_LOG2 must exceed the adder latency + 4 (instance %m)");
            $finish;
        end
    end

    reg  [FIFO_LOG2:0] used_reg;
    wire               room = used_reg != DEPTH_C;
    wire               fire = s_a_tvalid && s_b_tvalid && room;
    wire               pop  = m_tvalid && m_tready;

    assign s_a_tready = s_b_tvalid && room;
    assign s_b_tready = s_a_tvalid && room;

    always @(posedge clk) begin
        if (rst) begin
            used_reg <= {(FIFO_LOG2+1){1'b0}};
        end else begin
            used_reg <= used_reg + {{FIFO_LOG2{1'b0}}, fire} - {{FIFO_LOG2{1'b0}}, pop};
        end
    end

    wire [TAG_W-1:0] in_tag = {s_a_tuser, s_a_tlast, s_a_tkeep};
    wire [TAG_W-1:0] out_tag;
    wire [511:0]     sum;
    wire             sum_valid;

    genvar k;
    generate
        if (WIRE_BF16 == 0) begin : g_fp32
            for (k = 0; k < 16; k = k + 1) begin : g_lane
                wire             v;
                wire [TAG_W-1:0] t;
                fp32_add #(.STALL(0), .TAG_WIDTH(TAG_W)) add_inst (
                    .clk(clk), .rst(rst), .ce(1'b1),
                    .in_valid(fire), .in_a(s_a_tdata[32*k +: 32]), .in_b(s_b_tdata[32*k +: 32]),
                    .in_sub(1'b0), .in_tag(k == 0 ? in_tag : {TAG_W{1'b0}}),
                    .out_valid(v), .out_y(sum[32*k +: 32]), .out_tag(t)
                );
                if (k == 0) begin : g_first
                    assign sum_valid = v;
                    assign out_tag = t;
                end else begin : g_rest
                    wire _unused_lane = &{1'b0, v, t, 1'b0};
                end
            end
        end else begin : g_bf16
            // the operands are registered as they come and widened by wiring (exact: the bf16
            // pattern is the top half; fp32_add turns any NaN into the canonical one, which
            // fp32_to_bf16 rounds to 0x7FC0), so the adder's first stage starts at plain registers
            reg  [511:0]     a_reg, b_reg;
            reg  [TAG_W-1:0] tag_reg;
            reg              v_reg;
            always @(posedge clk) begin
                a_reg   <= s_a_tdata;
                b_reg   <= s_b_tdata;
                tag_reg <= in_tag;
                v_reg   <= rst ? 1'b0 : fire;
            end
            for (k = 0; k < 32; k = k + 1) begin : g_lane
                wire             vs, vy;
                wire [31:0]      ws;
                wire [TAG_W-1:0] ts, ty;
                fp32_add #(.STALL(0), .TAG_WIDTH(TAG_W)) add_inst (
                    .clk(clk), .rst(rst), .ce(1'b1),
                    .in_valid(v_reg), .in_a({a_reg[16*k +: 16], 16'd0}), .in_b({b_reg[16*k +: 16], 16'd0}),
                    .in_sub(1'b0), .in_tag(k == 0 ? tag_reg : {TAG_W{1'b0}}),
                    .out_valid(vs), .out_y(ws), .out_tag(ts)
                );
                fp32_to_bf16 #(.STALL(0), .TAG_WIDTH(TAG_W)) round_inst (
                    .clk(clk), .rst(rst), .ce(1'b1),
                    .in_valid(vs), .in_a(ws), .in_tag(ts),
                    .out_valid(vy), .out_y(sum[16*k +: 16]), .out_tag(ty)
                );
                if (k == 0) begin : g_first
                    assign sum_valid = vy;
                    assign out_tag = ty;
                end else begin : g_rest
                    wire _unused_lane = &{1'b0, vy, ty, 1'b0};
                end
            end
        end
    endgenerate

    wire [FIFO_LOG2:0] fifo_count;
    wire               fifo_s_ready;

    // a place was reserved for every beat in the adders: s_ready is never low here
    onic_fifo #(
        .WIDTH(512 + TAG_W),
        .DEPTH_LOG2(FIFO_LOG2)
    ) fifo_inst (
        .clk(clk),
        .rst(rst),
        .clear(1'b0),
        .s_data({out_tag, sum}),
        .s_valid(sum_valid),
        .s_ready(fifo_s_ready),
        .m_data({m_tuser, m_tlast, m_tkeep, m_tdata}),
        .m_valid(m_tvalid),
        .m_ready(m_tready),
        .count(fifo_count)
    );

    wire _unused_ok = &{1'b0, fifo_count, fifo_s_ready, 1'b0};

endmodule

`resetall
