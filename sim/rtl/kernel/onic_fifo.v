// OptimusNIC: synchronous first-word-fall-through FIFO
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Synchronous FIFO, first word fall through: m_data shows the head whenever m_valid is high.
 * `clear` empties it (a new kernel run starts from nothing). `count` is the fill level, a
 * register, so a producer can reserve space for data it has requested but not yet received.
 */
module onic_fifo #(
    // bits per entry
    parameter integer WIDTH = 512,
    // log2 of the number of entries
    parameter integer DEPTH_LOG2 = 8
) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire                  clear,

    /* input */
    input  wire [WIDTH-1:0]      s_data,
    input  wire                  s_valid,
    output wire                  s_ready,

    /* output */
    output wire [WIDTH-1:0]      m_data,
    output wire                  m_valid,
    input  wire                  m_ready,

    /* fill level */
    output wire [DEPTH_LOG2:0]   count
);

    localparam integer DEPTH = 1 << DEPTH_LOG2;

    initial begin
        if (DEPTH_LOG2 < 1 || DEPTH_LOG2 > 16) begin
            $error("DEPTH_LOG2 must be 1..16 (instance %m)");
            $finish;
        end
    end

    reg [WIDTH-1:0]      mem [0:DEPTH-1];
    reg [DEPTH_LOG2:0]   wr_ptr_reg;
    reg [DEPTH_LOG2:0]   rd_ptr_reg;

    wire full  = (wr_ptr_reg[DEPTH_LOG2] != rd_ptr_reg[DEPTH_LOG2]) &&
                 (wr_ptr_reg[DEPTH_LOG2-1:0] == rd_ptr_reg[DEPTH_LOG2-1:0]);
    wire empty = wr_ptr_reg == rd_ptr_reg;

    wire push = s_valid && !full;
    wire pop  = m_ready && !empty;

    assign s_ready = !full;
    assign m_valid = !empty;
    assign m_data  = mem[rd_ptr_reg[DEPTH_LOG2-1:0]];
    assign count   = wr_ptr_reg - rd_ptr_reg;

    always @(posedge clk) begin
        if (push) begin
            mem[wr_ptr_reg[DEPTH_LOG2-1:0]] <= s_data;
        end
    end

    always @(posedge clk) begin
        if (rst || clear) begin
            wr_ptr_reg <= {(DEPTH_LOG2+1){1'b0}};
            rd_ptr_reg <= {(DEPTH_LOG2+1){1'b0}};
        end else begin
            if (push) begin
                wr_ptr_reg <= wr_ptr_reg + 1'b1;
            end
            if (pop) begin
                rd_ptr_reg <= rd_ptr_reg + 1'b1;
            end
        end
    end

endmodule

`resetall
