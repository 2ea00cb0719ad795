// OptimusNIC: a stand-in for onic_adam_lane in the 16-lane timing synthesis only
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The ports and parameters of onic_adam_lane, behind one register per input bit and nothing
 * else. hls.rtl.synth reads it (with the define ONIC_LANE_STUB, which makes onic_adam_core
 * instantiate it instead of the lane) to synthesize the whole kernel at 16 lanes in minutes
 * instead of hours; the lane itself is synthesized alone at full detail and the two are composed
 * (docs/design.md, timing evidence). Never in simulation: no simulation file list names it.
 *
 * Why this shape: every input bit lands in a kept register, so the kernel's logic driving a lane
 * input ends there, exactly as many kernel loads are seen as the real lane would see (its own
 * loads per port are added from the lane-alone run), and nothing the kernel drives is trimmed;
 * every output comes straight from a register, so the kernel's logic after a lane output starts
 * at a register, and the stub adds no LUT level on either side. The outputs are the inputs one
 * clock later (y is the parameter, as the lane's y is p or bf16(p)); the values are meaningless.
 */
module onic_adam_lane_stub #(
    // as onic_adam_lane: 1 AdamW, 0 Adam
    parameter integer ADAMW = 1,
    // as onic_adam_lane: gradient format 0 fp32, 1 bf16, 2 fp16
    parameter integer GRAD_FMT = 0,
    // as onic_adam_lane: 1 bf16 output in out_y[15:0]
    parameter integer OUT_BF16 = 0,
    // as onic_adam_lane: width of the user tag that travels with the element
    parameter integer TAG_WIDTH = 1
) (
    input  wire                  clk,
    input  wire                  rst,

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

    // the scalars and the gradient feed no output here: keep their registers, or synthesis would
    // trim them and the kernel registers behind them
    (* keep = "true" *) reg [9*32-1:0] scalars_reg;
    (* keep = "true" *) reg [31:0]     grad_reg;
    reg [31:0]          p_reg, m_reg, v_reg;
    reg [TAG_WIDTH-1:0] tag_reg;
    reg                 valid_reg;

    always @(posedge clk) begin
        scalars_reg <= {gs, wd, b1, omb1, b2, omb2, rbc2, eps, step_size};
        grad_reg    <= in_grad;
        p_reg       <= in_p;
        m_reg       <= in_m;
        v_reg       <= in_v;
        tag_reg     <= in_tag;
    end

    // the lane resets its valid bits only; so does the stub
    always @(posedge clk) begin
        if (rst) begin
            valid_reg <= 1'b0;
        end else begin
            valid_reg <= in_valid;
        end
    end

    assign out_valid = valid_reg;
    assign out_p     = p_reg;
    assign out_m     = m_reg;
    assign out_v     = v_reg;
    assign out_y     = p_reg;
    assign out_tag   = tag_reg;

    wire _unused_ok = &{1'b0, scalars_reg, grad_reg, ADAMW[0], GRAD_FMT[0], OUT_BF16[0], 1'b0};

endmodule

`resetall
