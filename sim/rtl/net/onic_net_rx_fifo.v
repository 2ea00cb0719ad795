// OptimusNIC: store-and-forward receive frame buffer (commit or discard whole frames)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * A FIFO of beats whose writer cannot be held back (the MAC has no TREADY) and decides a
 * frame's fate only at its last beat. Beats are written at a tentative pointer; `wr_end` closes
 * the frame: with `wr_commit` the frame becomes visible to the reader, without it the tentative
 * pointer goes back to the last commit, so a dropped frame leaves nothing behind. A beat that
 * finds the buffer full is not written and marks the frame overflowed (`wr_fits` low from then
 * on; the writer must then discard it): no frame is ever delivered partially or corrupted.
 * `wr_fits` is the verdict for the beat offered now included, so the writer can decide at the
 * last beat in the same clock. The read side is a normal AXI4-Stream; the RAM is read through
 * a register and a second output register as in onic_fifo (m_* are registers), so the storage
 * infers block RAM. It holds 2^DEPTH_LOG2 beats in RAM (plus 2 in the output registers).
 */
module onic_net_rx_fifo #(
    // data bits of a beat (TDATA)
    parameter integer DATA_W = 512,
    // TKEEP bits
    parameter integer KEEP_W = 64,
    // log2 of the RAM depth in beats
    parameter integer DEPTH_LOG2 = 9
) (
    input  wire                 clk,
    input  wire                 rst,

    /* writer: tentative beats, then commit or discard at the frame's end */
    input  wire [DATA_W-1:0]    wr_data,
    input  wire [KEEP_W-1:0]    wr_keep,
    input  wire                 wr_last,
    input  wire                 wr_valid,
    input  wire                 wr_end,
    input  wire                 wr_commit,
    output wire                 wr_fits,

    /* reader */
    output wire [DATA_W-1:0]    m_axis_tdata,
    output wire [KEEP_W-1:0]    m_axis_tkeep,
    output wire                 m_axis_tlast,
    output wire                 m_axis_tvalid,
    input  wire                 m_axis_tready,

    /* committed beats in the RAM (not the output registers) */
    output wire [DEPTH_LOG2:0]  count
);

    localparam integer W = DATA_W + KEEP_W + 1;
    localparam integer DEPTH = 1 << DEPTH_LOG2;

    initial begin
        if (DEPTH_LOG2 < 2 || DEPTH_LOG2 > 16) begin
            $error("DEPTH_LOG2 must be 2..16 (instance %m)");
            $finish;
        end
        if (DATA_W < 8 || KEEP_W < 1) begin
            $error("DATA_W must be >= 8 and KEEP_W >= 1 (instance %m)");
            $finish;
        end
    end

    reg [W-1:0]          mem [0:DEPTH-1];
    reg [DEPTH_LOG2:0]   wr_ptr_reg;      // tentative: the frame being written
    reg [DEPTH_LOG2:0]   commit_ptr_reg;  // end of the committed frames
    reg [DEPTH_LOG2:0]   rd_ptr_reg;
    reg                  ovf_reg;         // the frame being written lost a beat
    reg [W-1:0]          ram_q_reg;
    reg                  ram_q_valid_reg;
    reg [W-1:0]          out_reg;
    reg                  out_valid_reg;

    wire [DEPTH_LOG2:0] used = wr_ptr_reg - rd_ptr_reg;
    wire full  = used[DEPTH_LOG2];
    wire push  = wr_valid && !full && !ovf_reg;
    wire lost  = wr_valid && full;

    assign wr_fits = !ovf_reg && !lost;

    wire pop      = m_axis_tready && out_valid_reg;
    wire ram_some = commit_ptr_reg != rd_ptr_reg;
    wire advance  = ram_q_valid_reg && (!out_valid_reg || pop);
    wire rd_en    = ram_some && (!ram_q_valid_reg || advance);

    assign m_axis_tdata  = out_reg[W-1 -: DATA_W];
    assign m_axis_tkeep  = out_reg[KEEP_W:1];
    assign m_axis_tlast  = out_reg[0];
    assign m_axis_tvalid = out_valid_reg;
    assign count         = commit_ptr_reg - rd_ptr_reg;

    always @(posedge clk) begin
        if (push) begin
            mem[wr_ptr_reg[DEPTH_LOG2-1:0]] <= {wr_data, wr_keep, wr_last};
        end
        if (rd_en) begin
            ram_q_reg <= mem[rd_ptr_reg[DEPTH_LOG2-1:0]];
        end
        if (advance) begin
            out_reg <= ram_q_reg;
        end
    end

    wire [DEPTH_LOG2:0] wr_ptr_next = wr_ptr_reg + {{DEPTH_LOG2{1'b0}}, push};

    always @(posedge clk) begin
        if (rst) begin
            wr_ptr_reg      <= {(DEPTH_LOG2+1){1'b0}};
            commit_ptr_reg  <= {(DEPTH_LOG2+1){1'b0}};
            rd_ptr_reg      <= {(DEPTH_LOG2+1){1'b0}};
            ovf_reg         <= 1'b0;
            ram_q_valid_reg <= 1'b0;
            out_valid_reg   <= 1'b0;
        end else begin
            if (wr_end) begin
                ovf_reg <= 1'b0;
                if (wr_commit) begin
                    wr_ptr_reg     <= wr_ptr_next;
                    commit_ptr_reg <= wr_ptr_next;
                end else begin
                    wr_ptr_reg <= commit_ptr_reg;
                end
            end else begin
                wr_ptr_reg <= wr_ptr_next;
                if (lost) begin
                    ovf_reg <= 1'b1;
                end
            end
            if (rd_en) begin
                rd_ptr_reg <= rd_ptr_reg + 1'b1;
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
