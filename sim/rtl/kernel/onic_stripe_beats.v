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
 * The division by the constant STRIPES is a multiplication by its rounded-up reciprocal
 * (exact for every nb below 2^NB_BITS), pipelined: the outputs follow `n` 4 clocks later.
 * `n` is an argument register, steady while the kernel is idle; onic_run_ctrl waits
 * PREP_CLOCKS (more than 4) after ap_start before the engines load their counts.
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
    localparam integer L = (STRIPES > 1) ? $clog2(STRIPES) : 0;
    localparam integer SHIFT = NB_BITS + L;
    // ceil(2^SHIFT / STRIPES) < 2^(NB_BITS+1): floor(nb * MAGIC / 2^SHIFT) = floor(nb / STRIPES)
    localparam [63:0] S64 = {32'd0, STRIPES};
    localparam [63:0] MAGIC64 = ((64'd1 << SHIFT) + S64 - 64'd1) / S64;
    localparam [NB_BITS:0] MAGIC = MAGIC64[NB_BITS:0];
    localparam [5:0] S6 = S64[5:0];

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

    reg  [NB_BITS-1:0]         nb1_reg, nb2_reg;
    reg  [6:0]                 tail1_reg, tail2_reg, tail3_reg;
    reg  [63:0]                prod_reg;
    reg  [NB_BITS-1:0]         q_reg;
    reg  [5:0]                 r_reg;
    reg  [STRIPES*32-1:0]      beats_reg;
    reg  [STRIPES*7-1:0]       last_bytes_reg;

    wire [35:0]                nb_full  = (n_bytes + 36'd63) >> 6;
    wire [NB_BITS-1:0]         q        = prod_reg[SHIFT +: NB_BITS];
    wire [NB_BITS+5:0]         q_times  = {6'd0, q} * S6;
    wire [NB_BITS+5:0]         r_full   = {6'd0, nb2_reg} - q_times;
    // the stripe that holds the array's last beat (beat nb - 1)
    wire [5:0]                 last_k   = (r_reg == 6'd0) ? S6 - 6'd1 : r_reg - 6'd1;

    always @(posedge clk) begin
        nb1_reg   <= nb_full[NB_BITS-1:0];
        tail1_reg <= (n_bytes[5:0] == 6'd0) ? 7'd64 : {1'b0, n_bytes[5:0]};
        prod_reg  <= {{(64-NB_BITS){1'b0}}, nb1_reg} * {{(63-NB_BITS){1'b0}}, MAGIC};
        nb2_reg   <= nb1_reg;
        tail2_reg <= tail1_reg;
        q_reg     <= q;
        r_reg     <= r_full[5:0];
        tail3_reg <= tail2_reg;
    end

    genvar k;
    generate
        for (k = 0; k < STRIPES; k = k + 1) begin : g_stripe
            localparam [5:0] K6 = k;
            always @(posedge clk) begin
                beats_reg[32*k +: 32]     <= {{(32-NB_BITS){1'b0}}, q_reg} + {31'd0, K6 < r_reg};
                last_bytes_reg[7*k +: 7]  <= (K6 == last_k) ? tail3_reg : 7'd64;
            end
        end
    endgenerate

    assign beats      = beats_reg;
    assign last_bytes = last_bytes_reg;

    wire _unused_ok = &{1'b0, n_bytes[35:34], nb_full[35:NB_BITS], prod_reg, r_full[NB_BITS+5:6], 1'b0};

endmodule

`resetall
