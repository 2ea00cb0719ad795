// OptimusNIC: 512-bit beats to lane vectors
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Splits each 512-bit beat into 512 / OUT_WIDTH vectors, lowest bits first (element order in
 * memory). The beat is released when its last vector is taken. `clear` forgets a partly used
 * beat position (the FIFO before it is cleared at the same time).
 */
module onic_unpack #(
    // bits per vector out (LANES x element bits); divides 512
    parameter integer OUT_WIDTH = 512
) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire                  clear,

    input  wire [511:0]          s_data,
    input  wire                  s_valid,
    output wire                  s_ready,

    output wire [OUT_WIDTH-1:0]  m_data,
    output wire                  m_valid,
    input  wire                  m_ready
);

    localparam integer RATIO = 512 / OUT_WIDTH;

    initial begin
        if (OUT_WIDTH < 16 || OUT_WIDTH > 512 || RATIO * OUT_WIDTH != 512) begin
            $error("OUT_WIDTH must divide 512 (instance %m)");
            $finish;
        end
    end

    generate
        if (RATIO == 1) begin : g_pass
            assign m_data  = s_data;
            assign m_valid = s_valid;
            assign s_ready = m_ready;
            wire _unused_ok = &{1'b0, clk, rst, clear, 1'b0};
        end else begin : g_split
            localparam integer IDX_BITS = $clog2(RATIO);
            reg [IDX_BITS-1:0] idx_reg;
            // RATIO is a power of two: the last index is all ones
            wire last = &idx_reg;
            always @(posedge clk) begin
                if (rst || clear) begin
                    idx_reg <= {IDX_BITS{1'b0}};
                end else if (s_valid && m_ready) begin
                    idx_reg <= idx_reg + 1'b1;
                end
            end
            assign m_data  = s_data[idx_reg * OUT_WIDTH +: OUT_WIDTH];
            assign m_valid = s_valid;
            assign s_ready = m_ready && last;
        end
    endgenerate

endmodule

`resetall
