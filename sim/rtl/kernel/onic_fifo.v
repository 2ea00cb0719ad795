// OptimusNIC: synchronous first-word-fall-through FIFO on a registered-read RAM
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Synchronous FIFO, first word fall through: m_data shows the head whenever m_valid is high.
 * The storage is read through a register (block RAM, or LUT RAM with its output register, for
 * small ones), so no path runs from a pointer through the RAM into the consumer: the head sits
 * in an output register fed by a second prefetch register behind the RAM's own output
 * register, which keeps one word per clock flowing while the consumer takes one per clock.
 * m_data and m_valid are registers. A word written at clock t is at the head at t + 3.
 * `clear` empties it (a new kernel run starts from nothing). `count` is the fill level (RAM
 * and the two output stages), a register, so a producer can reserve space for data it has
 * requested but not yet received; s_ready is a register too. It holds 2^DEPTH_LOG2 words.
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
    localparam [DEPTH_LOG2:0] ALMOST = {1'b0, {DEPTH_LOG2{1'b1}}};  // one word short of full

    initial begin
        if (DEPTH_LOG2 < 1 || DEPTH_LOG2 > 16) begin
            $error("DEPTH_LOG2 must be 1..16 (instance %m)");
            $finish;
        end
    end

    reg [WIDTH-1:0]      mem [0:DEPTH-1];
    reg [DEPTH_LOG2:0]   wr_ptr_reg;
    reg [DEPTH_LOG2:0]   rd_ptr_reg;
    reg [DEPTH_LOG2:0]   count_reg;
    reg                  full_reg;
    reg [WIDTH-1:0]      ram_q_reg;    // the RAM's read register
    reg                  ram_q_valid_reg;
    reg [WIDTH-1:0]      out_reg;      // the head
    reg                  out_valid_reg;

    wire push     = s_valid && !full_reg;
    wire pop      = m_ready && out_valid_reg;
    wire ram_some = wr_ptr_reg != rd_ptr_reg;
    // the head register takes the RAM's word when it is free or being taken
    wire advance  = ram_q_valid_reg && (!out_valid_reg || pop);
    // the RAM is read when its read register is free or being moved on
    wire rd_en    = ram_some && (!ram_q_valid_reg || advance);

    assign s_ready = !full_reg;
    assign m_valid = out_valid_reg;
    assign m_data  = out_reg;
    assign count   = count_reg;

    wire [DEPTH_LOG2:0] count_next = count_reg + {{DEPTH_LOG2{1'b0}}, push} - {{DEPTH_LOG2{1'b0}}, pop};

    always @(posedge clk) begin
        if (push) begin
            mem[wr_ptr_reg[DEPTH_LOG2-1:0]] <= s_data;
        end
        if (rd_en) begin
            ram_q_reg <= mem[rd_ptr_reg[DEPTH_LOG2-1:0]];
        end
        if (advance) begin
            out_reg <= ram_q_reg;
        end
    end

    always @(posedge clk) begin
        if (rst || clear) begin
            wr_ptr_reg      <= {(DEPTH_LOG2+1){1'b0}};
            rd_ptr_reg      <= {(DEPTH_LOG2+1){1'b0}};
            count_reg       <= {(DEPTH_LOG2+1){1'b0}};
            full_reg        <= 1'b0;
            ram_q_valid_reg <= 1'b0;
            out_valid_reg   <= 1'b0;
        end else begin
            if (push) begin
                wr_ptr_reg <= wr_ptr_reg + 1'b1;
            end
            if (rd_en) begin
                rd_ptr_reg <= rd_ptr_reg + 1'b1;
            end
            count_reg <= count_next;
            // from registers and push/pop only (no carry chain after push)
            if (push && !pop) begin
                full_reg <= count_reg == ALMOST;
            end else if (pop && !push) begin
                full_reg <= 1'b0;
            end
            if (rd_en) begin
                ram_q_valid_reg <= 1'b1;
            end else if (advance) begin
                ram_q_valid_reg <= 1'b0;
            end
            if (advance) begin
                out_valid_reg <= 1'b1;
            end else if (pop) begin
                out_valid_reg <= 1'b0;
            end
        end
    end

endmodule

`resetall
