// Bench checker beside a card's MAC transmit stream (the ring simulation top of
// templates/net/ring_sim_top.v.j2): what AMD's CMAC cannot take, counted per clock in RTL so the
// bench needs no Python coroutine per clock. cocotbext-eth's EthMacTx only asserts when its own
// queue runs dry at its pacing, so a short TVALID gap would pass unseen there.
// - underflows: clocks with TVALID low while TREADY is high inside a frame (after a beat without
//   TLAST was taken): the CMAC would abort the frame on the line.
// - keep_errors: a beat taken with TKEEP not all ones before the last beat, or on the last beat
//   not contiguous from byte 0 (or empty).
// Both saturate at 16'hFFFF; reset clears them.
`timescale 1ns / 1ps
`default_nettype none

module onic_mac_tx_check (
    input  wire        clk,
    input  wire        rst_n,
    input  wire [63:0] tkeep,
    input  wire        tvalid,
    input  wire        tready,
    input  wire        tlast,
    output reg  [15:0] underflows,
    output reg  [15:0] keep_errors
);
    reg in_frame;
    // contiguous from byte 0 and not empty: tkeep + 1 is a power of two (tkeep = 2^n - 1, n >= 1)
    wire [64:0] keep_plus = {1'b0, tkeep} + 65'd1;
    wire keep_contiguous = tkeep[0] && ((keep_plus & (keep_plus - 65'd1)) == 65'd0);
    wire keep_bad = tlast ? !keep_contiguous : (tkeep != {64{1'b1}});
    wire take = tvalid && tready;

    always @(posedge clk) begin
        if (!rst_n) begin
            in_frame <= 1'b0;
            underflows <= 16'd0;
            keep_errors <= 16'd0;
        end else begin
            if (take)
                in_frame <= !tlast;
            if (in_frame && tready && !tvalid && underflows != 16'hFFFF)
                underflows <= underflows + 16'd1;
            if (take && keep_bad && keep_errors != 16'hFFFF)
                keep_errors <= keep_errors + 16'd1;
        end
    end
endmodule

`default_nettype wire
