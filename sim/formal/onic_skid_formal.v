// OptimusNIC: formal properties of onic_skid, the two-entry register slice (SymbiYosys, bounded model check)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The skid buffer with an 8-bit payload (the logic does not depend on the width) and every
 * input free: words offered at any clock, any data, TREADY-style m_ready at any clock.
 * Assumed: reset first. Shadow: the words accepted (s_valid && s_ready) and delivered
 * (m_valid && m_ready) since reset, and one chosen word (an arbitrary index, an arbitrary
 * value) followed through. Asserted: no loss, no duplication, order (the chosen word leaves
 * as the word of the same index with the same data), never more than two words held;
 * s_ready is exactly "fewer than two held" and m_valid exactly "one or more held", both
 * functions of the shadow registers, so neither depends on this clock's s_valid or m_ready
 * (READY and VALID registered); m_valid and m_data held until m_ready. Covers: both
 * registers full (s_ready low), three words back to back at one per clock, and words still
 * delivered in order after the buffer filled.
 */
module onic_skid_formal #(
    parameter integer WIDTH = 8
) (
    input  wire             clk,
    input  wire             rst,
    input  wire [WIDTH-1:0] s_data,
    input  wire             s_valid,
    input  wire             m_ready
);
    wire             s_ready, m_valid;
    wire [WIDTH-1:0] m_data;

    onic_skid #(
        .WIDTH(WIDTH)
    ) dut (
        .clk(clk), .rst(rst), .s_data(s_data), .s_valid(s_valid), .s_ready(s_ready),
        .m_data(m_data), .m_valid(m_valid), .m_ready(m_ready)
    );

    (* anyconst *) reg [7:0]       f_k;    // the chosen word's index
    (* anyconst *) reg [WIDTH-1:0] f_val;  // ... and its data

    reg       f_past_valid = 1'b0;
    reg [7:0] f_in;        // words accepted since reset
    reg [7:0] f_out;       // words delivered since reset
    reg [1:0] f_run;       // consecutive clocks with a word delivered (saturating)
    reg       f_full_seen; // both registers were full since reset
    wire s_hs = s_valid && s_ready;
    wire m_hs = m_valid && m_ready;
    wire [7:0] f_held = f_in - f_out;
    always @(posedge clk) begin
        f_past_valid <= 1'b1;
        if (rst) begin
            f_in        <= 8'd0;
            f_out       <= 8'd0;
            f_run       <= 2'd0;
            f_full_seen <= 1'b0;
        end else begin
            f_in  <= f_in + {7'd0, s_hs};
            f_out <= f_out + {7'd0, m_hs};
            f_run <= !m_hs ? 2'd0 : (f_run == 2'd3) ? 2'd3 : f_run + 2'd1;
            if (!s_ready) f_full_seen <= 1'b1;
        end
    end

    always @(*) begin
        if (!f_past_valid) assume(rst);
        // the chosen word is offered with the chosen data (any other word: any data)
        if (!rst && s_hs && f_in == f_k) assume(s_data == f_val);

        if (f_past_valid && !rst) begin
            assert(f_held <= 8'd2);
            assert(s_ready == (f_held < 8'd2));
            assert(m_valid == (f_held != 8'd0));
            if (m_valid && f_out == f_k) assert(m_data == f_val);
        end

        if (f_past_valid && !rst) begin
            cover(!s_ready && s_valid);
            cover(f_run == 2'd3);
            cover(f_full_seen && f_held == 8'd0 && f_out >= 8'd4);
        end
    end

    always @(posedge clk) begin
        if (f_past_valid && !$past(rst) && !rst && $past(m_valid && !m_ready)) begin
            assert(m_valid && m_data == $past(m_data));
        end
    end
endmodule

`resetall
