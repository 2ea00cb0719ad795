// OptimusNIC: sequential unsigned divider for the network kernel's per-step sizes
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * quot = num / den (unsigned, truncated), one quotient bit per clock: 32 clocks after `start`,
 * `done` pulses with the result held in `quot` until the next start. The network kernel sizes a
 * step with it (chunk elements and packets per chunk) once per ap_start, where 32 clocks do not
 * matter and a combinational divider would cost the clock. den = 0 gives all ones.
 */
module onic_net_div (
    input  wire        clk,
    input  wire        rst,
    input  wire        start,
    input  wire [31:0] num,
    input  wire [31:0] den,
    output reg         done,
    output wire [31:0] quot
);

    reg [31:0] q_reg;       // the numerator, shifted out as the quotient shifts in
    reg [32:0] rem_reg;
    reg [31:0] den_reg;
    reg [5:0]  count_reg;   // bits left; 0: idle
    wire       _unused_ok = &{1'b0, rem_reg[32], 1'b0};

    wire [32:0] shifted = {rem_reg[31:0], q_reg[31]};
    wire [32:0] diff    = shifted - {1'b0, den_reg};

    always @(posedge clk) begin
        if (rst) begin
            count_reg <= 6'd0;
            done      <= 1'b0;
            q_reg     <= 32'd0;
            rem_reg   <= 33'd0;
            den_reg   <= 32'd0;
        end else begin
            done <= 1'b0;
            if (start) begin
                q_reg     <= num;
                rem_reg   <= 33'd0;
                den_reg   <= den;
                count_reg <= 6'd32;
            end else if (count_reg != 6'd0) begin
                if (!diff[32]) begin
                    rem_reg <= diff;
                    q_reg   <= {q_reg[30:0], 1'b1};
                end else begin
                    rem_reg <= shifted;
                    q_reg   <= {q_reg[30:0], 1'b0};
                end
                count_reg <= count_reg - 6'd1;
                done      <= count_reg == 6'd1;
            end
        end
    end

    assign quot = q_reg;

endmodule

`resetall
