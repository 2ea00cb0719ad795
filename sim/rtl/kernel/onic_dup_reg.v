// OptimusNIC: one register that synthesis must keep (a fan-out copy)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * q is d one clock later. Instantiated once per copy where a high-fan-out control net (reset,
 * run start) is split into registered copies, each driving one part of the design. Copies of a
 * register with the same input are otherwise merged back into one by synthesis (yosys opt_merge,
 * Vivado equivalent-register removal); keep_hierarchy keeps each instance, and so each copy.
 */
(* keep_hierarchy = "yes" *)
module onic_dup_reg (
    input  wire clk,
    input  wire d,
    output wire q
);

    reg q_reg;

    always @(posedge clk) begin
        q_reg <= d;
    end

    assign q = q_reg;

endmodule

`resetall
