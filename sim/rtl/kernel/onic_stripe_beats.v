// OptimusNIC: beats of each stripe of an n-element array
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * An array of n elements is cut into nb = ceil(n * ELEM_BYTES / 64) beats of 512 bits; stripe k
 * of STRIPES holds beats k, k + STRIPES, k + 2 STRIPES, ... (hls/layout.py), that is
 * nb / STRIPES beats, one more when k < nb % STRIPES. This module gives every stripe's beat
 * count and how many bytes of its last beat are the array's (64, except in the stripe that
 * holds the array's last beat, where the elements may end early).
 *
 * nb / STRIPES is a long division, two quotient bits per clock over 15 clocks: the remainder
 * stays below STRIPES (at most 5 bits), so a clock holds two 6-bit compare-and-subtract steps
 * and nothing wider than the 36-bit beat-count adder, where a one-clock product by a
 * reciprocal (29 x 30 bits) would need about 5 ns. The outputs are right LATENCY = 18 clocks
 * after `n` last changed (and may take any value meanwhile): `n` is an argument register,
 * steady while the kernel is idle, and onic_run_ctrl waits PREP_CLOCKS (at least 18) after
 * ap_start before the engines load their counts. The division restarts by itself whenever the
 * beat count changes, so the module needs no reset; the dividend register starts at a value no
 * beat count has (all ones: nb < 2^28 + 1), so the first division starts on the first clocks
 * after configuration as after any change.
 */
module onic_stripe_beats #(
    // stripes the array is split into (1 to 32)
    parameter integer STRIPES = 2,
    // bytes per element of the array (4 for fp32, 2 for bf16/fp16)
    parameter integer ELEM_BYTES = 4
) (
    input  wire                  clk,

    input  wire [31:0]           n,

    /* per stripe k: bits [32k +: 32] beats, [7k +: 7] bytes of its last beat (1 to 64) */
    output wire [STRIPES*32-1:0] beats,
    output wire [STRIPES*7-1:0]  last_bytes
);

    // nb < 2^NB_BITS for every n: n * 4 bytes / 64 <= 2^28
    localparam integer NB_BITS = 29;
    // two quotient bits per clock: 15 steps cover 30 >= NB_BITS dividend bits
    localparam integer STEPS = 15;
    localparam integer DIV_BITS = 2 * STEPS;
    localparam [5:0] S6 = STRIPES[5:0];

    initial begin
        if (STRIPES < 1 || STRIPES > 32) begin
            $error("STRIPES must be 1..32 (instance %m)");
            $finish;
        end
        if (ELEM_BYTES != 2 && ELEM_BYTES != 4) begin
            $error("ELEM_BYTES must be 2 or 4 (instance %m)");
            $finish;
        end
    end

    // n * ELEM_BYTES takes up to 34 bits (n up to 2^32-1)
    wire [35:0] n_bytes = {4'd0, n} * ELEM_BYTES;
    wire [35:0] nb_full = (n_bytes + 36'd63) >> 6;

    reg  [NB_BITS-1:0]    nb_reg;
    reg  [6:0]            tail_reg;
    // the dividend of the division under way; its initial value (above) is the only state this
    // module needs, and a configuration value is what every FPGA register has without a reset
    /* verilator lint_off PROCASSINIT */
    reg  [NB_BITS-1:0]    src_reg = {NB_BITS{1'b1}};
    /* verilator lint_on PROCASSINIT */
    reg  [DIV_BITS-1:0]   sh_reg;      // dividend bits not divided yet, most significant first
    reg  [DIV_BITS-1:0]   quo_reg;     // quotient bits so far
    reg  [5:0]            rem_reg;     // partial remainder (< STRIPES <= 32: bit 5 stays 0)
    reg  [3:0]            step_reg;    // steps left
    reg  [STRIPES*32-1:0] beats_reg;
    reg  [STRIPES*7-1:0]  last_bytes_reg;

    // one step: bring the next dividend bit down, subtract STRIPES when it fits
    wire [5:0] t1  = {rem_reg[4:0], sh_reg[DIV_BITS-1]};
    wire       ge1 = t1 >= S6;
    wire [5:0] r1  = ge1 ? t1 - S6 : t1;
    wire [5:0] t2  = {r1[4:0], sh_reg[DIV_BITS-2]};
    wire       ge2 = t2 >= S6;
    wire [5:0] r2  = ge2 ? t2 - S6 : t2;

    always @(posedge clk) begin
        nb_reg   <= nb_full[NB_BITS-1:0];
        tail_reg <= (n_bytes[5:0] == 6'd0) ? 7'd64 : {1'b0, n_bytes[5:0]};
        if (nb_reg != src_reg) begin
            src_reg  <= nb_reg;
            sh_reg   <= {{(DIV_BITS-NB_BITS){1'b0}}, nb_reg};
            quo_reg  <= {DIV_BITS{1'b0}};
            rem_reg  <= 6'd0;
            step_reg <= STEPS[3:0];
        end else if (step_reg != 4'd0) begin
            sh_reg   <= {sh_reg[DIV_BITS-3:0], 2'b00};
            quo_reg  <= {quo_reg[DIV_BITS-3:0], ge1, ge2};
            rem_reg  <= r2;
            step_reg <= step_reg - 4'd1;
        end
    end

    genvar k;
    generate
        for (k = 0; k < STRIPES; k = k + 1) begin : g_stripe
            localparam [5:0] K6 = k;
            // the array's last beat nb - 1 is in stripe k when nb % STRIPES is (k + 1) % STRIPES
            // (for nb = 0 that names the last stripe, whose tail is then 64 bytes anyway)
            localparam integer LAST_REM_I = (k + 1) % STRIPES;
            localparam [5:0] LAST_REM = LAST_REM_I[5:0];
            always @(posedge clk) begin
                beats_reg[32*k +: 32]    <= {{(32-NB_BITS){1'b0}}, quo_reg[NB_BITS-1:0]} + {31'd0, K6 < rem_reg};
                last_bytes_reg[7*k +: 7] <= (rem_reg == LAST_REM) ? tail_reg : 7'd64;
            end
        end
    endgenerate

    assign beats      = beats_reg;
    assign last_bytes = last_bytes_reg;

    wire _unused_ok = &{1'b0, n_bytes[35:34], nb_full[35:NB_BITS], quo_reg[DIV_BITS-1:NB_BITS], rem_reg[5], r1[5], 1'b0};

endmodule

`resetall
