// OptimusNIC: ap_ctrl_hs run sequencing
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * ap_ctrl_hs handshake on the kernel side: idle until ap_start, PREP_CLOCKS clocks for the
 * stripe beat counts (onic_stripe_beats) to follow the argument registers, then one
 * `run_start` pulse (engines load their arguments, FIFOs clear), then running until no engine is busy, then
 * ap_done and ap_ready for one clock. ap_ready comes with ap_done (the kernel takes no new
 * arguments mid-run), so the control block drops ap_start on that clock and a start written
 * while the kernel runs has no effect. A zero-length run finishes PREP_CLOCKS + 3 clocks after start
 * (+ 2 here, + 1 as the AXI engines take run_start through a register and stay busy meanwhile).
 */
module onic_run_ctrl #(
    // number of engines whose busy flags end a run
    parameter integer ENGINES = 5,
    // clocks from ap_start to run_start (at least the latency of onic_stripe_beats)
    parameter integer PREP_CLOCKS = 6
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

    localparam [1:0] S_IDLE = 2'd0, S_PREP = 2'd1, S_START = 2'd2, S_RUN = 2'd3;

    initial begin
        if (PREP_CLOCKS < 1 || PREP_CLOCKS > 255) begin
            $error("PREP_CLOCKS must be 1..255 (instance %m)");
            $finish;
        end
    end

    localparam [7:0] PREP_LAST = PREP_CLOCKS[7:0] - 8'd1;

    reg [1:0] state_reg;
    reg [7:0] prep_reg;

    always @(posedge clk) begin
        if (rst) begin
            state_reg <= S_IDLE;
            prep_reg  <= 8'd0;
        end else begin
            case (state_reg)
                S_IDLE:  if (ap_start) begin
                    state_reg <= S_PREP;
                    prep_reg  <= 8'd0;
                end
                S_PREP:  begin
                    prep_reg <= prep_reg + 8'd1;
                    if (prep_reg == PREP_LAST) state_reg <= S_START;
                end
                S_START: state_reg <= S_RUN;
                S_RUN:   if (busy == {ENGINES{1'b0}}) state_reg <= S_IDLE;
            endcase
        end
    end

    assign ap_idle   = state_reg == S_IDLE;
    assign run_start = state_reg == S_START;
    assign ap_done   = state_reg == S_RUN && busy == {ENGINES{1'b0}};
    assign ap_ready  = ap_done;

endmodule

`resetall
