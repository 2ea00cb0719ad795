// OptimusNIC: lane vectors to 512-bit beats
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Collects 512 / IN_WIDTH vectors into one 512-bit beat, lowest bits first. A vector marked
 * s_last closes the beat early (the shard's tail); the unused bytes are zero and the write
 * engine masks them with WSTRB. s_ready depends on registers and s_last only, never on m_ready
 * (with one vector per beat the beat goes through a register slice, onic_skid).
 */
module onic_pack #(
    // bits per vector in (LANES x element bits); divides 512
    parameter integer IN_WIDTH = 512
) (
    input  wire                  clk,
    input  wire                  rst,

    input  wire [IN_WIDTH-1:0]   s_data,
    input  wire                  s_last,
    input  wire                  s_valid,
    output wire                  s_ready,

    output wire [511:0]          m_data,
    output wire                  m_valid,
    input  wire                  m_ready
);

    localparam integer RATIO = 512 / IN_WIDTH;

    initial begin
        if (IN_WIDTH < 16 || IN_WIDTH > 512 || RATIO * IN_WIDTH != 512) begin
            $error("IN_WIDTH must divide 512 (instance %m)");
            $finish;
        end
    end

    generate
        if (RATIO == 1) begin : g_pass
            // every vector is a beat: a register slice, so s_ready does not wait on m_ready
            onic_skid #(
                .WIDTH(512)
            ) slice_inst (
                .clk(clk),
                .rst(rst),
                .s_data(s_data),
                .s_valid(s_valid),
                .s_ready(s_ready),
                .m_data(m_data),
                .m_valid(m_valid),
                .m_ready(m_ready)
            );
            wire _unused_ok = &{1'b0, s_last, 1'b0};
        end else begin : g_join
            reg [511:0] out_data_reg;
            reg         out_valid_reg;
            assign m_data  = out_data_reg;
            assign m_valid = out_valid_reg;
            localparam integer IDX_BITS = $clog2(RATIO);
            reg [IDX_BITS-1:0]       idx_reg;
            reg [512-IN_WIDTH-1:0]   acc_reg;   // vectors 0 .. RATIO-2 of the beat being built
            // RATIO is a power of two: the last index is all ones
            wire close = s_last || &idx_reg;
            // a vector that does not close the beat goes into the accumulator whatever the output
            // does; one that closes it needs the output register free. Not waiting on m_ready
            // keeps the consumer's ready out of the producer's path; the output has RATIO - 1
            // clocks to take the previous beat, so full rate holds.
            assign s_ready = !out_valid_reg || !close;
            wire fire  = s_valid && s_ready;
            // the beat as it will be, if this vector closes it
            wire [511:0] beat = ({{IN_WIDTH{1'b0}}, acc_reg} & ~({512{1'b1}} << (idx_reg * IN_WIDTH))) |
                                ({{(512-IN_WIDTH){1'b0}}, s_data} << (idx_reg * IN_WIDTH));
            always @(posedge clk) begin
                if (fire) begin
                    if (close) begin
                        out_data_reg <= beat;
                    end else begin
                        acc_reg <= beat[512-IN_WIDTH-1:0];
                    end
                end
            end
            always @(posedge clk) begin
                if (rst) begin
                    idx_reg       <= {IDX_BITS{1'b0}};
                    out_valid_reg <= 1'b0;
                end else begin
                    if (m_ready) begin
                        out_valid_reg <= 1'b0;
                    end
                    if (fire) begin
                        idx_reg <= close ? {IDX_BITS{1'b0}} : idx_reg + 1'b1;
                        if (close) begin
                            out_valid_reg <= 1'b1;
                        end
                    end
                end
            end
        end
    endgenerate

endmodule

`resetall
