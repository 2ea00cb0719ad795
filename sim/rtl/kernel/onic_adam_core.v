// OptimusNIC: LANES update lanes with their input join and output back-pressure
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Takes one vector of LANES elements from each of grad, p, m and v per clock (when all four
 * have one), runs it through LANES onic_adam_lane instances, and offers the updated p, m, v
 * and output vectors together. Exactly ceil(n / LANES) vectors are taken per run; the last one
 * is marked.
 *
 * Elastic: the lanes run free (no clock enable; a valid bit travels with each vector) into four
 * output FIFOs (p with the last mark, m, v, y), which pop together when every output path is
 * ready. A registered credit counter holds the FIFOs' free space minus the vectors in flight
 * (input register and lanes): a vector is admitted only when a credit is left, so the FIFOs can
 * never overflow and a stalled write port stops admission instead of freezing the lanes. The
 * FIFOs are 2^OUT_FIFO_LOG2 deep, more than the lane latency (112 clocks at most) plus the
 * credit loop (4 clocks: a popped vector returns its credit a clock late), so the credits never
 * run out while the outputs keep up.
 * The vectors are registered on the way in; the lanes' reset is a registered copy per lane
 * (it resets their valid bits only), the FIFOs and credits stay in reset one clock longer so
 * nothing the lanes still held when reset came is kept.
 */
module onic_adam_core #(
    // update lanes (elements per clock): 1, 2, 4, 8 or 16
    parameter integer LANES = 16,
    // 1: AdamW; 0: Adam
    parameter integer ADAMW = 1,
    // gradient format: 0 fp32, 1 bf16, 2 fp16
    parameter integer GRAD_FMT = 0,
    // 1: bf16 output parameters; 0: fp32
    parameter integer OUT_BF16 = 0,
    // bits per gradient element (derived)
    parameter integer GW = (GRAD_FMT == 0) ? 32 : 16,
    // bits per output element (derived)
    parameter integer OW = (OUT_BF16 != 0) ? 16 : 32,
    // log2 of the output FIFO depth in vectors (at least the lane latency + 3; block RAM)
    parameter integer OUT_FIFO_LOG2 = 8
) (
    input  wire                  clk,
    input  wire                  rst,

    /* run control */
    input  wire                  start,
    input  wire [31:0]           n,

    /* scalars (held for a whole run) */
    input  wire [31:0]           gs,
    input  wire [31:0]           wd,
    input  wire [31:0]           b1,
    input  wire [31:0]           omb1,
    input  wire [31:0]           b2,
    input  wire [31:0]           omb2,
    input  wire [31:0]           rbc2,
    input  wire [31:0]           eps,
    input  wire [31:0]           step_size,

    /* vectors in */
    input  wire [LANES*GW-1:0]   s_grad_data,
    input  wire                  s_grad_valid,
    output wire                  s_grad_ready,
    input  wire [LANES*32-1:0]   s_p_data,
    input  wire                  s_p_valid,
    output wire                  s_p_ready,
    input  wire [LANES*32-1:0]   s_m_data,
    input  wire                  s_m_valid,
    output wire                  s_m_ready,
    input  wire [LANES*32-1:0]   s_v_data,
    input  wire                  s_v_valid,
    output wire                  s_v_ready,

    /* vectors out: one valid per path, all four always equal, high only when every path is ready
       (the readys must not depend on them); m_valid is m_p_valid */
    output wire [LANES*32-1:0]   m_p_data,
    output wire [LANES*32-1:0]   m_m_data,
    output wire [LANES*32-1:0]   m_v_data,
    output wire [LANES*OW-1:0]   m_y_data,
    output wire                  m_last,
    output wire                  m_valid,
    output wire                  m_p_valid,
    output wire                  m_m_valid,
    output wire                  m_v_valid,
    output wire                  m_y_valid,
    input  wire                  m_p_ready,
    input  wire                  m_m_ready,
    input  wire                  m_v_ready,
    input  wire                  m_y_ready
);

    initial begin
        if (LANES != 1 && LANES != 2 && LANES != 4 && LANES != 8 && LANES != 16) begin
            $error("LANES must be 1, 2, 4, 8 or 16 (instance %m)");
            $finish;
        end
        if (OUT_FIFO_LOG2 < 7) begin
            $error("OUT_FIFO_LOG2 must be at least 7: the FIFOs must cover the lane latency (instance %m)");
            $finish;
        end
    end

    localparam integer LANES_LOG2 = (LANES == 1) ? 0 : $clog2(LANES);
    localparam integer CW = OUT_FIFO_LOG2 + 1;
    localparam [CW-1:0] CREDITS = {1'b1, {OUT_FIFO_LOG2{1'b0}}};

    /* resets: the lanes' own copies, and the tail's (FIFOs and credits) held one clock longer */
    wire [LANES-1:0] lane_rst;
    reg tail_rst_d_reg;
    always @(posedge clk) begin
        tail_rst_d_reg <= rst;
    end
    wire tail_rst = rst || tail_rst_d_reg;

    /* vectors per run: ceil(n / LANES), in 33 bits so n = 2^32-1 cannot overflow. n is steady
       for clocks before start (onic_run_ctrl's preparation), so it is registered twice. */
    wire [32:0] n_vec = ({1'b0, n} + LANES - 1) >> LANES_LOG2;
    reg  [31:0] n_vec_reg;
    reg         n_vec_nz_reg;
    reg         n_vec_one_reg;
    always @(posedge clk) begin
        n_vec_reg     <= n_vec[31:0];
        n_vec_nz_reg  <= n_vec_reg != 32'd0;
        n_vec_one_reg <= n_vec_reg == 32'd1;
    end

    reg  [31:0]   left_reg;      // vectors still to take this run
    reg           left_nz_reg;   // left_reg != 0
    reg           left_one_reg;  // left_reg == 1
    reg  [CW-1:0] credit_reg;    // FIFO space not yet promised to a vector
    reg           credit_ok_reg; // credit_reg != 0

    wire all_valid = s_grad_valid && s_p_valid && s_m_valid && s_v_valid;
    wire fire = credit_ok_reg && left_nz_reg && all_valid;

    wire fifo_p_valid, fifo_m_valid, fifo_v_valid, fifo_y_valid;
    // A fork: each output path takes the vector only when all four do, so the valids wait for all
    // four readys (they must not depend on the valids). The four FIFOs are pushed and popped
    // together, so their valids are always equal (checked below in simulation); each path's pop
    // uses its own FIFO's valid, four different signals synthesis cannot merge: at 16 lanes one
    // shared pop drove every data register of the four packers (1,839 loads in the bf16 kernel),
    // each path's pop drives its own packer and FIFO only.
    wire all_ready = m_p_ready && m_m_ready && m_v_ready && m_y_ready;
    wire pop_p = fifo_p_valid && all_ready;
    wire pop_m = fifo_m_valid && all_ready;
    wire pop_v = fifo_v_valid && all_ready;
    wire pop_y = fifo_y_valid && all_ready;
    wire pop   = pop_p;
    assign m_valid   = pop_p;
    assign m_p_valid = pop_p;
    assign m_m_valid = pop_m;
    assign m_v_valid = pop_v;
    assign m_y_valid = pop_y;

    always @(posedge clk) begin
        if (rst) begin
            left_reg     <= 32'd0;
            left_nz_reg  <= 1'b0;
            left_one_reg <= 1'b0;
        end else if (start) begin
            left_reg     <= n_vec_reg;
            left_nz_reg  <= n_vec_nz_reg;
            left_one_reg <= n_vec_one_reg;
        end else if (fire) begin
            left_reg     <= left_reg - 32'd1;
            left_nz_reg  <= !left_one_reg;
            left_one_reg <= left_reg == 32'd2;
        end
    end

    // A popped vector returns its credit a clock later (pop_q_reg): the pop decision comes from the
    // write side's readys, and the counter's adder and zero test must not follow it in one clock.
    // Late credits only make the count conservative. credit_ok is derived from compares of the
    // registered count, not from the adder's output, for the same reason.
    reg           pop_q_reg;
    wire [CW-1:0] credit_next = credit_reg - {{(CW-1){1'b0}}, fire} + {{(CW-1){1'b0}}, pop_q_reg};
    wire          credit_zero = credit_reg == {CW{1'b0}};
    wire          credit_one  = credit_reg == {{(CW-1){1'b0}}, 1'b1};
    always @(posedge clk) begin
        if (tail_rst) begin
            pop_q_reg     <= 1'b0;
            credit_reg    <= CREDITS;
            credit_ok_reg <= 1'b1;
        end else begin
            pop_q_reg     <= pop;
            credit_reg    <= credit_next;
            credit_ok_reg <= !((credit_zero && !pop_q_reg) || (credit_one && fire && !pop_q_reg));
        end
    end

    assign s_grad_ready = fire;
    assign s_p_ready    = fire;
    assign s_m_ready    = fire;
    assign s_v_ready    = fire;

    /* input register: data free-running (no enable, no reset), the valid bit qualifies it */
    reg [LANES*GW-1:0] in_grad_reg;
    reg [LANES*32-1:0] in_p_reg, in_m_reg, in_v_reg;
    reg                in_valid_reg;
    reg                in_last_reg;
    always @(posedge clk) begin
        in_grad_reg <= s_grad_data;
        in_p_reg    <= s_p_data;
        in_m_reg    <= s_m_data;
        in_v_reg    <= s_v_data;
        in_last_reg <= left_one_reg;
    end
    always @(posedge clk) begin
        if (rst) begin
            in_valid_reg <= 1'b0;
        end else begin
            in_valid_reg <= fire;
        end
    end

    wire [LANES-1:0]    lane_valid;
    wire [LANES-1:0]    lane_last;
    wire [LANES*32-1:0] res_p, res_m, res_v;
    wire [LANES*OW-1:0] res_y;

    genvar l;
    generate
        for (l = 0; l < LANES; l = l + 1) begin : g_lane
            wire [31:0] y;
            wire [31:0] grad;
            // each lane's own registered reset (a kept copy: ~120 valid bits per lane)
            onic_dup_reg rst_copy_inst (.clk(clk), .d(rst), .q(lane_rst[l]));
            if (GW == 32) begin : g_g32
                assign grad = in_grad_reg[l*32 +: 32];
            end else begin : g_g16
                assign grad = {16'd0, in_grad_reg[l*16 +: 16]};
            end
`ifdef ONIC_LANE_STUB
            // the timing synthesis of the whole kernel only (hls.rtl.synth): the lane's ports
            // behind one register, the lane itself synthesized alone (sim/rtl/synth)
            onic_adam_lane_stub #(
`else
            onic_adam_lane #(
`endif
                .ADAMW(ADAMW),
                .GRAD_FMT(GRAD_FMT),
                .OUT_BF16(OUT_BF16),
                .TAG_WIDTH(1)
            ) lane_inst (
                .clk(clk), .rst(lane_rst[l]),
                .gs(gs), .wd(wd), .b1(b1), .omb1(omb1), .b2(b2), .omb2(omb2), .rbc2(rbc2), .eps(eps),
                .step_size(step_size),
                .in_valid(in_valid_reg),
                .in_grad(grad),
                .in_p(in_p_reg[l*32 +: 32]),
                .in_m(in_m_reg[l*32 +: 32]),
                .in_v(in_v_reg[l*32 +: 32]),
                .in_tag(in_last_reg),
                .out_valid(lane_valid[l]),
                .out_p(res_p[l*32 +: 32]),
                .out_m(res_m[l*32 +: 32]),
                .out_v(res_v[l*32 +: 32]),
                .out_y(y),
                .out_tag(lane_last[l])
            );
            assign res_y[l*OW +: OW] = y[OW-1:0];
            if (OW == 16) begin : g_y16
                wire _unused_ok = &{1'b0, y[31:16], 1'b0};
            end
        end
    endgenerate

    /* output FIFOs: every lane sees the same valid pattern; lane 0 speaks for all. The credits
       guarantee room, so s_ready is not needed; the four pop together. */
    wire [3:0] fifo_s_ready;
    wire [CW-1:0] fifo_p_count, fifo_m_count, fifo_v_count, fifo_y_count;

    onic_fifo #(
        .WIDTH(LANES*32+1),
        .DEPTH_LOG2(OUT_FIFO_LOG2)
    ) fifo_p_inst (
        .clk(clk), .rst(tail_rst), .clear(1'b0),
        .s_data({lane_last[0], res_p}), .s_valid(lane_valid[0]), .s_ready(fifo_s_ready[0]),
        .m_data({m_last, m_p_data}), .m_valid(fifo_p_valid), .m_ready(pop_p),
        .count(fifo_p_count)
    );
    onic_fifo #(
        .WIDTH(LANES*32),
        .DEPTH_LOG2(OUT_FIFO_LOG2)
    ) fifo_m_inst (
        .clk(clk), .rst(tail_rst), .clear(1'b0),
        .s_data(res_m), .s_valid(lane_valid[0]), .s_ready(fifo_s_ready[1]),
        .m_data(m_m_data), .m_valid(fifo_m_valid), .m_ready(pop_m),
        .count(fifo_m_count)
    );
    onic_fifo #(
        .WIDTH(LANES*32),
        .DEPTH_LOG2(OUT_FIFO_LOG2)
    ) fifo_v_inst (
        .clk(clk), .rst(tail_rst), .clear(1'b0),
        .s_data(res_v), .s_valid(lane_valid[0]), .s_ready(fifo_s_ready[2]),
        .m_data(m_v_data), .m_valid(fifo_v_valid), .m_ready(pop_v),
        .count(fifo_v_count)
    );
    onic_fifo #(
        .WIDTH(LANES*OW),
        .DEPTH_LOG2(OUT_FIFO_LOG2)
    ) fifo_y_inst (
        .clk(clk), .rst(tail_rst), .clear(1'b0),
        .s_data(res_y), .s_valid(lane_valid[0]), .s_ready(fifo_s_ready[3]),
        .m_data(m_y_data), .m_valid(fifo_y_valid), .m_ready(pop_y),
        .count(fifo_y_count)
    );

`ifndef SYNTHESIS
    // the credits make this impossible; a simulation that gets here has a broken credit count
    always @(posedge clk) begin
        if (!tail_rst && lane_valid[0] && !fifo_s_ready[0]) begin
            $display("ERROR: %m: output FIFO overflow, a vector was dropped");
            $finish;
        end
        if (!tail_rst && (fifo_m_valid != fifo_p_valid || fifo_v_valid != fifo_p_valid ||
                          fifo_y_valid != fifo_p_valid)) begin
            $display("ERROR: %m: the output FIFOs disagree on holding a vector");
            $finish;
        end
    end
`endif

    wire _unused_ok = &{1'b0, lane_valid[LANES-1:0], lane_last[LANES-1:0], n_vec[32], fifo_s_ready,
                        fifo_p_count, fifo_m_count, fifo_v_count, fifo_y_count, 1'b0};

endmodule

`resetall
