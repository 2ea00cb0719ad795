// OptimusNIC: LANES update lanes with their input join and output back-pressure
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Takes one vector of LANES elements from each of grad, p, m and v per clock (when all four
 * have one), runs it through LANES onic_adam_lane instances, and offers the updated p, m, v
 * and output vectors together. The lanes run on a shared clock enable that is high whenever
 * all four output paths can take a vector, so a stalled write port freezes the chain instead
 * of dropping data. Exactly ceil(n / LANES) vectors are taken per run; the last one is marked.
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
    parameter integer OW = (OUT_BF16 != 0) ? 16 : 32
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

    /* vectors out (one valid, every path must be ready) */
    output wire [LANES*32-1:0]   m_p_data,
    output wire [LANES*32-1:0]   m_m_data,
    output wire [LANES*32-1:0]   m_v_data,
    output wire [LANES*OW-1:0]   m_y_data,
    output wire                  m_last,
    output wire                  m_valid,
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
    end

    localparam integer LANES_LOG2 = (LANES == 1) ? 0 : $clog2(LANES);

    reg  [31:0] left_reg;   // vectors still to take this run

    wire ce = m_p_ready && m_m_ready && m_v_ready && m_y_ready;
    wire fire = ce && left_reg != 0 && s_grad_valid && s_p_valid && s_m_valid && s_v_valid;

    // vectors: ceil(n / LANES), in 33 bits so n = 2^32-1 cannot overflow
    wire [32:0] n_vec = ({1'b0, n} + LANES - 1) >> LANES_LOG2;

    always @(posedge clk) begin
        if (rst) begin
            left_reg <= 32'd0;
        end else if (start) begin
            left_reg <= n_vec[31:0];
        end else if (fire) begin
            left_reg <= left_reg - 32'd1;
        end
    end

    assign s_grad_ready = fire;
    assign s_p_ready    = fire;
    assign s_m_ready    = fire;
    assign s_v_ready    = fire;

    wire [LANES-1:0] lane_valid;
    wire [LANES-1:0] lane_last;

    genvar l;
    generate
        for (l = 0; l < LANES; l = l + 1) begin : g_lane
            wire [31:0] y;
            wire [31:0] grad;
            if (GW == 32) begin : g_g32
                assign grad = s_grad_data[l*32 +: 32];
            end else begin : g_g16
                assign grad = {16'd0, s_grad_data[l*16 +: 16]};
            end
            onic_adam_lane #(
                .ADAMW(ADAMW),
                .GRAD_FMT(GRAD_FMT),
                .OUT_BF16(OUT_BF16),
                .TAG_WIDTH(1)
            ) lane_inst (
                .clk(clk), .rst(rst), .ce(ce),
                .gs(gs), .wd(wd), .b1(b1), .omb1(omb1), .b2(b2), .omb2(omb2), .rbc2(rbc2), .eps(eps),
                .step_size(step_size),
                .in_valid(fire),
                .in_grad(grad),
                .in_p(s_p_data[l*32 +: 32]),
                .in_m(s_m_data[l*32 +: 32]),
                .in_v(s_v_data[l*32 +: 32]),
                .in_tag(left_reg == 32'd1),
                .out_valid(lane_valid[l]),
                .out_p(m_p_data[l*32 +: 32]),
                .out_m(m_m_data[l*32 +: 32]),
                .out_v(m_v_data[l*32 +: 32]),
                .out_y(y),
                .out_tag(lane_last[l])
            );
            assign m_y_data[l*OW +: OW] = y[OW-1:0];
            if (OW == 16) begin : g_y16
                wire _unused_ok = &{1'b0, y[31:16], 1'b0};
            end
        end
    endgenerate

    // every lane sees the same valid pattern; lane 0 speaks for all
    assign m_valid = lane_valid[0] && ce;
    assign m_last  = lane_last[0];

    wire _unused_ok = &{1'b0, lane_valid, lane_last, n_vec[32], 1'b0};

endmodule

`resetall
