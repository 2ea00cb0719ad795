/*
 * OptimusNIC floating-point units: IEEE-754 binary32 adder / subtractor
 *
 * Classic pipeline, round to nearest even, subnormals kept:
 *   1. unpack, order operands by magnitude (|big| >= |small|), special cases
 *   2. align the small mantissa (right shift, guard/round/sticky bits)
 *   3. add or subtract the 27-bit mantissas (the difference is never negative)
 *   4. leading-zero count of the sum, limited so the exponent stays >= 1
 *   5. normalise (1-bit right shift on carry, else left shift by the count)
 *   6. round to nearest even and pack (the rounding carry runs into the exponent,
 *      which also turns the largest finite values into infinity)
 * Three extra bits below the mantissa (guard, round, sticky) are enough: a left
 * shift of more than one place only happens when the exponents differ by at most
 * one, and then no bit has gone into the sticky bit.
 */

// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

module fp32_add #(
    // 1: ce freezes the pipeline (the unit tests stall it); 0: ce is ignored and the
    // pipeline runs free, as onic_adam_lane uses it (no clock-enable net to fan out)
    parameter integer STALL = 1,
    // width of the pass-through tag that travels with each operand
    parameter integer TAG_WIDTH = 1
) (
    input  wire                 clk,
    input  wire                 rst,        // synchronous, active high: clears the valid pipeline only
    input  wire                 ce,         // clock enable: 0 freezes the whole pipeline

    input  wire                 in_valid,
    input  wire [31:0]          in_a,
    input  wire [31:0]          in_b,
    input  wire                 in_sub,     // 1 computes a - b
    input  wire [TAG_WIDTH-1:0] in_tag,

    output wire                 out_valid,
    output wire [31:0]          out_y,
    output wire [TAG_WIDTH-1:0] out_tag
);

wire en = (STALL != 0) ? ce : 1'b1;

localparam integer LATENCY = 6;

/* stage 1: unpack, order by magnitude, special cases */
wire       a_sign = in_a[31];
wire       b_sign = in_b[31] ^ in_sub;  // sign of the effective addend
wire [7:0] a_exp = in_a[30:23];
wire [7:0] b_exp = in_b[30:23];
wire       a_nan = (a_exp == 8'hff) && (in_a[22:0] != 23'd0);
wire       b_nan = (b_exp == 8'hff) && (in_b[22:0] != 23'd0);
wire       a_inf = (a_exp == 8'hff) && (in_a[22:0] == 23'd0);
wire       b_inf = (b_exp == 8'hff) && (in_b[22:0] == 23'd0);
wire       eff_sub = a_sign ^ b_sign;
// comparing {exponent, fraction} as an integer orders finite magnitudes
wire       swap = in_b[30:0] > in_a[30:0];

wire [30:0] big_mag = swap ? in_b[30:0] : in_a[30:0];
wire [30:0] small_mag = swap ? in_a[30:0] : in_b[30:0];
wire        big_sign = swap ? b_sign : a_sign;
// subnormals have no hidden bit and the exponent of the smallest normal
wire [7:0]  a_exp_eff = (a_exp == 8'd0) ? 8'd1 : a_exp;
wire [7:0]  b_exp_eff = (b_exp == 8'd0) ? 8'd1 : b_exp;
wire [7:0]  big_exp = swap ? b_exp_eff : a_exp_eff;
wire [23:0] big_mant = {big_mag[30:23] != 8'd0, big_mag[22:0]};
wire [23:0] small_mant = {small_mag[30:23] != 8'd0, small_mag[22:0]};
// both differences are formed in parallel with the magnitude compare, which then picks one
wire [7:0]  diff_ab = a_exp_eff - b_exp_eff;
wire [7:0]  diff_ba = b_exp_eff - a_exp_eff;
wire [7:0]  exp_diff = swap ? diff_ba : diff_ab;

wire        spec = a_nan || b_nan || a_inf || b_inf;
wire [31:0] spec_y = (a_nan || b_nan || (a_inf && b_inf && eff_sub)) ? 32'h7fc00000 :
                     {a_inf ? a_sign : b_sign, 8'hff, 23'd0};

reg         s1_sign, s1_eff_sub, s1_spec;
reg  [31:0] s1_spec_y;
reg  [7:0]  s1_exp, s1_diff;
reg  [23:0] s1_big, s1_small;

/* stage 2: align the small mantissa, collecting shifted-out bits into the sticky bit */
wire [4:0]  align_shift = (s1_diff > 8'd27) ? 5'd27 : s1_diff[4:0];
wire [53:0] align_wide = {s1_small, 30'd0} >> align_shift;
wire [26:0] aligned = {align_wide[53:28], align_wide[27] | (align_wide[26:0] != 27'd0)};

reg         s2_sign, s2_eff_sub, s2_spec;
reg  [31:0] s2_spec_y;
reg  [7:0]  s2_exp;
reg  [23:0] s2_big;
reg  [26:0] s2_small;

/* stage 3: add or subtract */
wire [27:0] big_ext = {1'b0, s2_big, 3'b000};
wire [27:0] small_ext = {1'b0, s2_small};
wire [27:0] sum = s2_eff_sub ? big_ext - small_ext : big_ext + small_ext;

// the stop bit for stage 4: exponent e allows a left shift of at most e - 1 places, so bit
// 26 - (e - 1) = 27 - e stops the count (none for e > 27); one compare with a constant per bit
reg  [26:0] stop;
integer     si;

always @* begin
    for (si = 0; si < 27; si = si + 1) begin
        stop[si] = s2_exp == 8'd27 - si[7:0];
    end
end

reg         s3_sign, s3_eff_sub, s3_spec;
reg  [31:0] s3_spec_y;
reg  [7:0]  s3_exp;
reg  [27:0] s3_sum;
reg  [26:0] s3_stop;

/* stage 4: leading-zero count, limited so a subnormal result keeps exponent 1: a stop bit at
 * position 26 - (exponent - 1), decoded a stage earlier, ends the count there (a compare of the
 * count with exponent - 1 and a mux after it would be a LUT level more) */
// Two levels, as fp64_add: four 8-bit groups (the 27 bits and 5 ones below them, so a zero sum
// counts 27), each with its leading-zero count and an all-zero flag, then the first group that is
// not all zero picks its count.
wire [31:0] lz_in = {s3_sum[26:0] | s3_stop, 5'h1f};
reg  [3:0]  grp_zero;
reg  [11:0] grp_lz;      // group g's count at [3g +: 3]
reg  [4:0]  sum_lz;
integer     gi, bi;

always @* begin
    for (gi = 0; gi < 4; gi = gi + 1) begin
        grp_zero[gi] = lz_in[31 - 8 * gi -: 8] == 8'd0;
        grp_lz[3 * gi +: 3] = 3'd7;
        for (bi = 0; bi < 8; bi = bi + 1) begin
            if (lz_in[24 - 8 * gi + bi]) begin
                grp_lz[3 * gi +: 3] = 3'd7 - bi[2:0];
            end
        end
    end
    sum_lz = 5'd27;
    for (gi = 3; gi >= 0; gi = gi - 1) begin
        if (!grp_zero[gi]) begin
            sum_lz = {gi[1:0], grp_lz[3 * gi +: 3]};
        end
    end
end

wire [4:0]  norm_shift = sum_lz;

reg         s4_sign, s4_spec;
reg  [31:0] s4_spec_y;
reg  [7:0]  s4_exp;
reg  [4:0]  s4_shift;
reg  [27:0] s4_sum;

/* stage 5: normalise */
wire [26:0] shifted = s4_sum[26:0] << s4_shift;
wire [26:0] norm = s4_sum[27] ? {s4_sum[27:2], s4_sum[1] | s4_sum[0]} : shifted;
wire [8:0]  norm_exp = s4_sum[27] ? {1'b0, s4_exp} + 9'd1 : {1'b0, s4_exp} - {4'd0, s4_shift};
// no hidden bit left: subnormal (or zero), encoded with exponent field 0
wire [8:0]  exp_field = norm[26] ? norm_exp : 9'd0;

reg         s5_sign, s5_spec;
reg  [31:0] s5_spec_y;
reg  [8:0]  s5_exp;
reg  [25:0] s5_norm;  // the hidden bit is already folded into s5_exp

/* stage 6: round to nearest even and pack */
wire        round_up = s5_norm[2] && (s5_norm[1] || s5_norm[0] || s5_norm[3]);
wire [30:0] rounded = {s5_exp[7:0], s5_norm[25:3]} + {30'd0, round_up};
wire [31:0] result = s5_spec ? s5_spec_y :
                     s5_exp[8] || (s5_exp[7:0] == 8'hff) ? {s5_sign, 8'hff, 23'd0} :
                     {s5_sign, rounded};

reg  [31:0] y_reg;

always @(posedge clk) begin
    if (en) begin
        s1_sign <= big_sign;
        s1_eff_sub <= eff_sub;
        s1_spec <= spec;
        s1_spec_y <= spec_y;
        s1_exp <= big_exp;
        s1_diff <= exp_diff;
        s1_big <= big_mant;
        s1_small <= small_mant;

        s2_sign <= s1_sign;
        s2_eff_sub <= s1_eff_sub;
        s2_spec <= s1_spec;
        s2_spec_y <= s1_spec_y;
        s2_exp <= s1_exp;
        s2_big <= s1_big;
        s2_small <= aligned;

        s3_sign <= s2_sign;
        s3_eff_sub <= s2_eff_sub;
        s3_spec <= s2_spec;
        s3_spec_y <= s2_spec_y;
        s3_exp <= s2_exp;
        s3_sum <= sum;
        s3_stop <= stop;

        // an exact zero sum is +0 when subtracting (RNE), else both addends were zeros of one sign
        s4_sign <= (s3_sum == 28'd0 && s3_eff_sub) ? 1'b0 : s3_sign;
        s4_spec <= s3_spec;
        s4_spec_y <= s3_spec_y;
        s4_exp <= s3_exp;
        s4_shift <= norm_shift;
        s4_sum <= s3_sum;

        s5_sign <= s4_sign;
        s5_spec <= s4_spec;
        s5_spec_y <= s4_spec_y;
        s5_exp <= exp_field;
        s5_norm <= norm[25:0];

        y_reg <= result;
    end
end

assign out_y = y_reg;

fp_delay #(
    .TAG_WIDTH(TAG_WIDTH),
    .DEPTH(LATENCY)
) ctl_inst (
    .clk(clk),
    .rst(rst),
    .ce(en),
    .in_valid(in_valid),
    .in_tag(in_tag),
    .out_valid(out_valid),
    .out_tag(out_tag)
);

endmodule

`resetall
