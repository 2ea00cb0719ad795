// OptimusNIC: two-entry skid buffer (full register slice) for a valid/ready channel
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Cuts every combinational path through a valid/ready channel: m_data, m_valid and s_ready are
 * registers, and neither s_valid nor m_ready reaches the other side in the same clock. One word
 * per clock passes while m_ready stays high; when m_ready drops, the word s_* offered in that
 * clock lands in the skid register (s_ready was already high), and s_ready falls the next clock.
 * Placed between the engines and every AXI port of the kernel top, so AXI outputs come from
 * flip-flops and AXI inputs land in flip-flops. Data registers have no reset (only the valid
 * bits do): the payload is don't-care while m_valid is low.
 */
module onic_skid #(
    // payload bits
    parameter integer WIDTH = 32
) (
    input  wire              clk,
    input  wire              rst,

    input  wire [WIDTH-1:0]  s_data,
    input  wire              s_valid,
    output wire              s_ready,

    output wire [WIDTH-1:0]  m_data,
    output wire              m_valid,
    input  wire              m_ready
);

    reg [WIDTH-1:0] out_reg;
    reg             out_valid_reg;
    reg [WIDTH-1:0] skid_reg;
    reg             skid_valid_reg;

    wire s_fire   = s_valid && !skid_valid_reg;
    // the output register is free this clock (empty, or its word is being taken)
    wire out_free = !out_valid_reg || m_ready;

    assign s_ready = !skid_valid_reg;
    assign m_data  = out_reg;
    assign m_valid = out_valid_reg;

    always @(posedge clk) begin
        if (out_free) begin
            if (skid_valid_reg) begin
                out_reg <= skid_reg;
            end else if (s_fire) begin
                out_reg <= s_data;
            end
        end else if (s_fire) begin
            skid_reg <= s_data;
        end
    end

    always @(posedge clk) begin
        if (rst) begin
            out_valid_reg  <= 1'b0;
            skid_valid_reg <= 1'b0;
        end else if (out_free) begin
            out_valid_reg  <= skid_valid_reg || s_fire;
            skid_valid_reg <= 1'b0;
        end else if (s_fire) begin
            skid_valid_reg <= 1'b1;
        end
    end

endmodule

`resetall
