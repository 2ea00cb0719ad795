// OptimusNIC: ap_ctrl_hs run sequencing
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * ap_ctrl_hs handshake on the kernel side: idle until ap_start, then one `run_start` pulse
 * (engines load their arguments, FIFOs clear), then running until no engine is busy, then
 * ap_done and ap_ready for one clock. ap_ready comes with ap_done (the kernel takes no new
 * arguments mid-run), so the control block drops ap_start on that clock and a start written
 * while the kernel runs has no effect. A zero-length run finishes two clocks after start.
 */
module onic_run_ctrl #(
    // number of engines whose busy flags end a run
    parameter integer ENGINES = 5
) (
    input  wire               clk,
    input  wire               rst,

    input  wire               ap_start,
    output wire               ap_idle,
    output wire               ap_done,
    output wire               ap_ready,

    output wire               run_start,
    input  wire [ENGINES-1:0] busy
);

    localparam [1:0] S_IDLE = 2'd0, S_START = 2'd1, S_RUN = 2'd2;

    reg [1:0] state_reg;

    always @(posedge clk) begin
        if (rst) begin
            state_reg <= S_IDLE;
        end else begin
            case (state_reg)
                S_IDLE:  if (ap_start) state_reg <= S_START;
                S_START: state_reg <= S_RUN;
                S_RUN:   if (busy == {ENGINES{1'b0}}) state_reg <= S_IDLE;
                default: state_reg <= S_IDLE;
            endcase
        end
    end

    assign ap_idle   = state_reg == S_IDLE;
    assign run_start = state_reg == S_START;
    assign ap_done   = state_reg == S_RUN && busy == {ENGINES{1'b0}};
    assign ap_ready  = ap_done;

endmodule

`resetall
