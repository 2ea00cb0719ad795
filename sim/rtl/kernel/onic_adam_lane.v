// OptimusNIC: one Adam/AdamW update lane
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * One element per clock through a chain of floating-point units, in exactly the order
 * of design.md section 3 (hls/golden.py adam_update):
 *
 *   g  = f32(grad) * gs                        widen, then   MUL
 *   Adam:  g = g + l2 * p       AdamW: p = p * decay        MUL (with the line above), ADD
 *   m  = b1 * m + omb1 * g                                  MUL, MUL, ADD
 *   v  = b2 * v + omb2 * (g * g)                            MUL, MUL, MUL, ADD
 *   d  = sqrt(v) * rbc2 + eps                               SQRT, MUL, ADD
 *   p  = p - step_size * (m / d)                            DIV, MUL, SUB
 *   y  = p, or bf16(p)                                      (convert)
 *
 * Operations that do not depend on each other and use the same unit type share a stage; each
 * stage's tag carries whatever later stages still need (p, m, v, partial products), so the
 * lane never needs to know a unit's latency. The lane runs free: every unit's clock enable is
 * tied high (and synthesizes away), in_valid travels with the element, and the caller
 * (onic_adam_core) admits an element only when there is room for it at the far end, so there is
 * no back-pressure and no enable net across the lane's registers. Only the valid bits are reset.
 */
module onic_adam_lane #(
    // 1: AdamW (decoupled decay multiplies p); 0: Adam (L2 term added to g)
    parameter integer ADAMW = 1,
    // gradient format: 0 fp32, 1 bf16 (in grad[15:0]), 2 fp16 (in grad[15:0])
    parameter integer GRAD_FMT = 0,
    // 1: out_y[15:0] is bf16(p) rounded to nearest even; 0: out_y is p
    parameter integer OUT_BF16 = 0,
    // width of the user tag that travels with the element
    parameter integer TAG_WIDTH = 1
) (
    input  wire                  clk,
    // resets the valid bits only (data registers have no reset)
    input  wire                  rst,

    /* scalars (held for a whole run) */
    input  wire [31:0]           gs,
    input  wire [31:0]           wd,          // decay (AdamW) or l2 (Adam)
    input  wire [31:0]           b1,
    input  wire [31:0]           omb1,
    input  wire [31:0]           b2,
    input  wire [31:0]           omb2,
    input  wire [31:0]           rbc2,
    input  wire [31:0]           eps,
    input  wire [31:0]           step_size,

    /* element in */
    input  wire                  in_valid,
    input  wire [31:0]           in_grad,
    input  wire [31:0]           in_p,
    input  wire [31:0]           in_m,
    input  wire [31:0]           in_v,
    input  wire [TAG_WIDTH-1:0]  in_tag,

    /* element out */
    output wire                  out_valid,
    output wire [31:0]           out_p,
    output wire [31:0]           out_m,
    output wire [31:0]           out_v,
    output wire [31:0]           out_y,
    output wire [TAG_WIDTH-1:0]  out_tag
);

    localparam integer T = TAG_WIDTH;

    // the FP units run free here (STALL = 0); their ce port is for their own tests, which stall them
    wire ce = 1'b1;

    initial begin
        if (GRAD_FMT < 0 || GRAD_FMT > 2) begin
            $error("GRAD_FMT must be 0 (fp32), 1 (bf16) or 2 (fp16) (instance %m)");
            $finish;
        end
    end

    /* stage 0: widen the gradient exactly to fp32 */
    wire          s0_valid;
    wire [31:0]   s0_g;
    wire [96+T-1:0] s0_tag;
    generate
        if (GRAD_FMT == 1) begin : g_bf16
            bf16_to_fp32 #(.STALL(0), .TAG_WIDTH(96+T)) widen_inst (
                .clk(clk), .rst(rst), .ce(ce), .in_valid(in_valid), .in_a(in_grad[15:0]),
                .in_tag({in_p, in_m, in_v, in_tag}),
                .out_valid(s0_valid), .out_y(s0_g), .out_tag(s0_tag)
            );
            wire _unused_ok = &{1'b0, in_grad[31:16], 1'b0};
        end else if (GRAD_FMT == 2) begin : g_fp16
            fp16_to_fp32 #(.STALL(0), .TAG_WIDTH(96+T)) widen_inst (
                .clk(clk), .rst(rst), .ce(ce), .in_valid(in_valid), .in_a(in_grad[15:0]),
                .in_tag({in_p, in_m, in_v, in_tag}),
                .out_valid(s0_valid), .out_y(s0_g), .out_tag(s0_tag)
            );
            wire _unused_ok = &{1'b0, in_grad[31:16], 1'b0};
        end else begin : g_fp32
            assign s0_valid = in_valid;
            assign s0_g     = in_grad;
            assign s0_tag   = {in_p, in_m, in_v, in_tag};
        end
    endgenerate
    wire [31:0] s0_p = s0_tag[T+95:T+64];
    wire [31:0] s0_m = s0_tag[T+63:T+32];
    wire [31:0] s0_v = s0_tag[T+31:T];
    wire [T-1:0] s0_u = s0_tag[T-1:0];

    /* stage 1 (MUL x4): g1 = g * gs, m1 = b1 * m, v1 = b2 * v, x = p * decay | l2 * p
     * A widened gradient comes off the widen register through logic the synthesizer folds into the
     * multiplier's unpack (7 LUT levels to its exponent sum): the four multipliers then register
     * their unpacked operands first (UNPACK_STAGE, one clock more), all four so the stage stays aligned. */
    localparam integer US = (GRAD_FMT != 0) ? 1 : 0;
    wire          s1_valid, s1_vm, s1_vv, s1_vx;
    wire [31:0]   s1_g, s1_m1, s1_v1, s1_x;
    wire [32+T-1:0] s1_tag;
    wire [0:0]    s1_tm, s1_tv, s1_tx;
    fp32_mul #(.STALL(0), .TAG_WIDTH(32+T), .UNPACK_STAGE(US)) mul_g_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s0_valid), .in_a(s0_g), .in_b(gs),
        .in_tag({s0_p, s0_u}), .out_valid(s1_valid), .out_y(s1_g), .out_tag(s1_tag)
    );
    fp32_mul #(.STALL(0), .TAG_WIDTH(1), .UNPACK_STAGE(US)) mul_m1_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s0_valid), .in_a(b1), .in_b(s0_m),
        .in_tag(1'b0), .out_valid(s1_vm), .out_y(s1_m1), .out_tag(s1_tm)
    );
    fp32_mul #(.STALL(0), .TAG_WIDTH(1), .UNPACK_STAGE(US)) mul_v1_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s0_valid), .in_a(b2), .in_b(s0_v),
        .in_tag(1'b0), .out_valid(s1_vv), .out_y(s1_v1), .out_tag(s1_tv)
    );
    fp32_mul #(.STALL(0), .TAG_WIDTH(1), .UNPACK_STAGE(US)) mul_x_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s0_valid),
        .in_a(ADAMW != 0 ? s0_p : wd), .in_b(ADAMW != 0 ? wd : s0_p),
        .in_tag(1'b0), .out_valid(s1_vx), .out_y(s1_x), .out_tag(s1_tx)
    );
    wire [31:0]  s1_p = s1_tag[T+31:T];
    wire [T-1:0] s1_u = s1_tag[T-1:0];

    /* stage 1b (Adam: ADD g = g1 + l2 * p); pw is p after weight decay (AdamW) or p (Adam) */
    wire          s1b_valid;
    wire [31:0]   s1b_g, s1b_pw, s1b_m1, s1b_v1;
    wire [T-1:0]  s1b_u;
    generate
        if (ADAMW != 0) begin : g_adamw
            assign s1b_valid = s1_valid;
            assign s1b_g     = s1_g;
            assign s1b_pw    = s1_x;
            assign s1b_m1    = s1_m1;
            assign s1b_v1    = s1_v1;
            assign s1b_u     = s1_u;
            wire _unused_ok = &{1'b0, s1_p, 1'b0};
        end else begin : g_adam
            wire [96+T-1:0] tag;
            // torch adds the L2 term only when weight_decay != 0 (0 * inf would be NaN). With
            // l2 = +-0 the adder gets -0 instead: x + (-0) = x for every x under round to nearest
            // even (+0 + -0 = +0, -0 + -0 = -0), so g passes unchanged through the same latency.
            wire l2_zero = wd[30:0] == 31'd0;
            fp32_add #(.STALL(0), .TAG_WIDTH(96+T)) add_l2_inst (
                .clk(clk), .rst(rst), .ce(ce), .in_valid(s1_valid), .in_a(s1_g),
                .in_b(l2_zero ? 32'h8000_0000 : s1_x),
                .in_sub(1'b0), .in_tag({s1_p, s1_m1, s1_v1, s1_u}),
                .out_valid(s1b_valid), .out_y(s1b_g), .out_tag(tag)
            );
            assign s1b_pw = tag[T+95:T+64];
            assign s1b_m1 = tag[T+63:T+32];
            assign s1b_v1 = tag[T+31:T];
            assign s1b_u  = tag[T-1:0];
        end
    endgenerate

    /* stage 2 (MUL x2): m2 = omb1 * g, gg = g * g */
    wire          s2_valid, s2_vgg;
    wire [31:0]   s2_m2, s2_gg;
    wire [96+T-1:0] s2_tag;
    wire [0:0]    s2_tgg;
    fp32_mul #(.STALL(0), .TAG_WIDTH(96+T)) mul_m2_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s1b_valid), .in_a(omb1), .in_b(s1b_g),
        .in_tag({s1b_pw, s1b_m1, s1b_v1, s1b_u}), .out_valid(s2_valid), .out_y(s2_m2), .out_tag(s2_tag)
    );
    fp32_mul #(.STALL(0), .TAG_WIDTH(1)) mul_gg_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s1b_valid), .in_a(s1b_g), .in_b(s1b_g),
        .in_tag(1'b0), .out_valid(s2_vgg), .out_y(s2_gg), .out_tag(s2_tgg)
    );

    /* stage 3 (MUL): v2 = omb2 * gg */
    wire          s3_valid;
    wire [31:0]   s3_v2;
    wire [128+T-1:0] s3_tag;
    fp32_mul #(.STALL(0), .TAG_WIDTH(128+T)) mul_v2_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s2_valid), .in_a(omb2), .in_b(s2_gg),
        .in_tag({s2_m2, s2_tag}), .out_valid(s3_valid), .out_y(s3_v2), .out_tag(s3_tag)
    );
    wire [31:0]  s3_m2 = s3_tag[T+127:T+96];
    wire [31:0]  s3_pw = s3_tag[T+95:T+64];
    wire [31:0]  s3_m1 = s3_tag[T+63:T+32];
    wire [31:0]  s3_v1 = s3_tag[T+31:T];
    wire [T-1:0] s3_u  = s3_tag[T-1:0];

    /* stage 4 (ADD x2): m = m1 + m2, v = v1 + v2 */
    wire          s4_valid, s4_vv;
    wire [31:0]   s4_m, s4_v;
    wire [32+T-1:0] s4_tag;
    wire [0:0]    s4_tv;
    fp32_add #(.STALL(0), .TAG_WIDTH(32+T)) add_m_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s3_valid), .in_a(s3_m1), .in_b(s3_m2), .in_sub(1'b0),
        .in_tag({s3_pw, s3_u}), .out_valid(s4_valid), .out_y(s4_m), .out_tag(s4_tag)
    );
    fp32_add #(.STALL(0), .TAG_WIDTH(1)) add_v_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s3_valid), .in_a(s3_v1), .in_b(s3_v2), .in_sub(1'b0),
        .in_tag(1'b0), .out_valid(s4_vv), .out_y(s4_v), .out_tag(s4_tv)
    );

    /* stage 5 (SQRT): s = sqrt(v) */
    wire          s5_valid;
    wire [31:0]   s5_s;
    wire [96+T-1:0] s5_tag;
    fp32_sqrt #(.STALL(0), .TAG_WIDTH(96+T)) sqrt_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s4_valid), .in_a(s4_v),
        .in_tag({s4_tag[T+31:T], s4_m, s4_v, s4_tag[T-1:0]}),
        .out_valid(s5_valid), .out_y(s5_s), .out_tag(s5_tag)
    );

    /* stage 6 (MUL): s2 = s * rbc2 */
    wire          s6_valid;
    wire [31:0]   s6_s;
    wire [96+T-1:0] s6_tag;
    fp32_mul #(.STALL(0), .TAG_WIDTH(96+T)) mul_rbc2_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s5_valid), .in_a(s5_s), .in_b(rbc2),
        .in_tag(s5_tag), .out_valid(s6_valid), .out_y(s6_s), .out_tag(s6_tag)
    );

    /* stage 7 (ADD): d = s2 + eps */
    wire          s7_valid;
    wire [31:0]   s7_d;
    wire [96+T-1:0] s7_tag;
    fp32_add #(.STALL(0), .TAG_WIDTH(96+T)) add_eps_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s6_valid), .in_a(s6_s), .in_b(eps), .in_sub(1'b0),
        .in_tag(s6_tag), .out_valid(s7_valid), .out_y(s7_d), .out_tag(s7_tag)
    );

    /* stage 8 (DIV): q = m / d */
    wire          s8_valid;
    wire [31:0]   s8_q;
    wire [96+T-1:0] s8_tag;
    fp32_div #(.STALL(0), .TAG_WIDTH(96+T)) div_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s7_valid), .in_a(s7_tag[T+63:T+32]), .in_b(s7_d),
        .in_tag(s7_tag), .out_valid(s8_valid), .out_y(s8_q), .out_tag(s8_tag)
    );

    /* stage 9 (MUL): u = step_size * q */
    wire          s9_valid;
    wire [31:0]   s9_u;
    wire [96+T-1:0] s9_tag;
    fp32_mul #(.STALL(0), .TAG_WIDTH(96+T)) mul_step_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s8_valid), .in_a(step_size), .in_b(s8_q),
        .in_tag(s8_tag), .out_valid(s9_valid), .out_y(s9_u), .out_tag(s9_tag)
    );

    /* stage 10 (SUB): p = pw - u */
    wire          s10_valid;
    wire [31:0]   s10_p;
    wire [64+T-1:0] s10_tag;
    fp32_add #(.STALL(0), .TAG_WIDTH(64+T)) sub_p_inst (
        .clk(clk), .rst(rst), .ce(ce), .in_valid(s9_valid), .in_a(s9_tag[T+95:T+64]), .in_b(s9_u),
        .in_sub(1'b1), .in_tag(s9_tag[T+63:0]), .out_valid(s10_valid), .out_y(s10_p), .out_tag(s10_tag)
    );

    /* stage 11: output dtype */
    generate
        if (OUT_BF16 != 0) begin : g_out_bf16
            wire [96+T-1:0] tag;
            wire [15:0]     y;
            fp32_to_bf16 #(.STALL(0), .TAG_WIDTH(96+T)) narrow_inst (
                .clk(clk), .rst(rst), .ce(ce), .in_valid(s10_valid), .in_a(s10_p),
                .in_tag({s10_p, s10_tag}), .out_valid(out_valid), .out_y(y), .out_tag(tag)
            );
            assign out_p   = tag[T+95:T+64];
            assign out_m   = tag[T+63:T+32];
            assign out_v   = tag[T+31:T];
            assign out_tag = tag[T-1:0];
            assign out_y   = {16'd0, y};
        end else begin : g_out_fp32
            assign out_valid = s10_valid;
            assign out_p     = s10_p;
            assign out_m     = s10_tag[T+63:T+32];
            assign out_v     = s10_tag[T+31:T];
            assign out_tag   = s10_tag[T-1:0];
            assign out_y     = s10_p;
        end
    endgenerate

    wire _unused_ok = &{1'b0, s1_vm, s1_vv, s1_vx, s1_tm, s1_tv, s1_tx, s2_vgg, s2_tgg, s4_vv, s4_tv,
                        1'b0};

endmodule

`resetall
