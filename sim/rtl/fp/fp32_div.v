// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * IEEE-754 binary32 divide, y = a / b, round to nearest even, fully pipelined.
 *
 * One operation per enabled clock; the result leaves LATENCY enabled clocks later with its tag.
 * Subnormal inputs are normalized with a leading-zero count, the 24-bit significands divide in
 * an unrolled radix-2 restoring recurrence (one quotient bit per stage, 26 bits: 24 result bits,
 * guard and one more, plus the remainder as sticky), then a subnormal result is right-shifted
 * with sticky and the packed {exponent, fraction} is rounded in one add, so a carry out of the
 * fraction bumps the exponent (and reaches infinity exactly when IEEE says so).
 *
 * Stages: 1 unpack/classify/LZC, 2 normalize/exponent, 3 pre-scale (a < b), 4..29 recurrence,
 * 30 subnormal shift, 31 round/pack.
 */
module fp32_div #(
    // 1: ce freezes the pipeline (the unit tests stall it); 0: ce is ignored and the
    // pipeline runs free, as onic_adam_lane uses it (no clock-enable net to fan out)
    parameter integer STALL = 1,
    // width of the pass-through tag that travels with each operand (context a lane carries)
    parameter integer TAG_WIDTH = 1
) (
    input  wire                 clk,
    input  wire                 rst,        // synchronous, active high: clears the valid pipeline only
    input  wire                 ce,         // clock enable: 0 freezes the whole pipeline

    /* operands */
    input  wire                 in_valid,
    input  wire [31:0]          in_a,       // dividend
    input  wire [31:0]          in_b,       // divisor
    input  wire [TAG_WIDTH-1:0] in_tag,

    /* result */
    output wire                 out_valid,
    output wire [31:0]          out_y,
    output wire [TAG_WIDTH-1:0] out_tag
);

wire en = (STALL != 0) ? ce : 1'b1;

    // quotient bits produced by the recurrence (1 integer + 23 fraction + guard + 1 extra)
    localparam integer QBITS = 26;
    // enabled clocks from in_* to out_* (a plain number: the test harness reads it from this file)
    localparam integer LATENCY = 31;

    // what the final stage emits: the computed quotient or a special value
    localparam [1:0] KIND_FINITE = 2'd0;
    localparam [1:0] KIND_ZERO   = 2'd1;
    localparam [1:0] KIND_INF    = 2'd2;
    localparam [1:0] KIND_NAN    = 2'd3;

    initial begin
        if (LATENCY != QBITS + 5) begin
            $error("Error: LATENCY must equal QBITS + 5, the stage count (instance %m)");
            $finish;
        end
        if (TAG_WIDTH < 1) begin
            $error("Error: TAG_WIDTH must be at least 1 (instance %m)");
            $finish;
        end
    end

    /* valid and tag travel beside the datapath */
    fp_delay #(
        .TAG_WIDTH(TAG_WIDTH),
        .DEPTH(LATENCY)
    ) u_delay (
        .clk(clk),
        .rst(rst),
        .ce(en),
        .in_valid(in_valid),
        .in_tag(in_tag),
        .out_valid(out_valid),
        .out_tag(out_tag)
    );

    /* stage 1: unpack, classify, count leading zeros of subnormal significands */
    wire       a_exp_zero = (in_a[30:23] == 8'd0);
    wire       b_exp_zero = (in_b[30:23] == 8'd0);
    wire       a_exp_max  = (in_a[30:23] == 8'hff);
    wire       b_exp_max  = (in_b[30:23] == 8'hff);
    wire       a_frac_nz  = (in_a[22:0] != 23'd0);
    wire       b_frac_nz  = (in_b[22:0] != 23'd0);
    wire       a_nan  = a_exp_max && a_frac_nz;
    wire       b_nan  = b_exp_max && b_frac_nz;
    wire       a_inf  = a_exp_max && !a_frac_nz;
    wire       b_inf  = b_exp_max && !b_frac_nz;
    wire       a_zero = a_exp_zero && !a_frac_nz;
    wire       b_zero = b_exp_zero && !b_frac_nz;
    wire [23:0] a_sig = {!a_exp_zero, in_a[22:0]};
    wire [23:0] b_sig = {!b_exp_zero, in_b[22:0]};
    wire [4:0] a_lz;
    wire [4:0] b_lz;

    fp_divsqrt_lzc24 lzc_a (.in_x(a_sig), .out_count(a_lz));
    fp_divsqrt_lzc24 lzc_b (.in_x(b_sig), .out_count(b_lz));

    reg [1:0]  s1_kind_reg;
    reg        s1_sign_reg;
    reg [23:0] s1_a_sig_reg;
    reg [23:0] s1_b_sig_reg;
    reg [7:0]  s1_a_exp_reg;
    reg [7:0]  s1_b_exp_reg;
    reg [4:0]  s1_a_lz_reg;
    reg [4:0]  s1_b_lz_reg;

    always @(posedge clk) begin
        if (en) begin
            if (a_nan || b_nan || (a_inf && b_inf) || (a_zero && b_zero)) begin
                s1_kind_reg <= KIND_NAN;
            end else if (a_inf || b_zero) begin
                s1_kind_reg <= KIND_INF;
            end else if (a_zero || b_inf) begin
                s1_kind_reg <= KIND_ZERO;
            end else begin
                s1_kind_reg <= KIND_FINITE;
            end
            s1_sign_reg  <= in_a[31] ^ in_b[31];
            s1_a_sig_reg <= a_sig;
            s1_b_sig_reg <= b_sig;
            // a subnormal has the exponent of the smallest normal, 1
            s1_a_exp_reg <= a_exp_zero ? 8'd1 : in_a[30:23];
            s1_b_exp_reg <= b_exp_zero ? 8'd1 : in_b[30:23];
            // zeros never reach the recurrence's result; keep their shift in range
            s1_a_lz_reg  <= a_zero ? 5'd0 : a_lz;
            s1_b_lz_reg  <= b_zero ? 5'd0 : b_lz;
        end
    end

    /* stage 2: significands to [1, 2), biased quotient exponent (11-bit two's complement) */
    reg [1:0]  s2_kind_reg;
    reg        s2_sign_reg;
    reg [23:0] s2_a_sig_reg;
    reg [23:0] s2_b_sig_reg;
    reg [10:0] s2_exp_reg;

    always @(posedge clk) begin
        if (en) begin
            s2_kind_reg  <= s1_kind_reg;
            s2_sign_reg  <= s1_sign_reg;
            s2_a_sig_reg <= s1_a_sig_reg << s1_a_lz_reg;
            s2_b_sig_reg <= s1_b_sig_reg << s1_b_lz_reg;
            s2_exp_reg   <= {3'd0, s1_a_exp_reg} - {6'd0, s1_a_lz_reg}
                            - {3'd0, s1_b_exp_reg} + {6'd0, s1_b_lz_reg} + 11'd127;
        end
    end

    /* stage 3: pre-scale the dividend so that the quotient lies in [1, 2) */
    reg [25:0] it_rem_reg  [0:QBITS];
    reg [25:0] it_quo_reg  [0:QBITS];
    reg [23:0] it_div_reg  [0:QBITS];
    reg [10:0] it_exp_reg  [0:QBITS];
    reg [1:0]  it_kind_reg [0:QBITS];
    reg        it_sign_reg [0:QBITS];

    wire a_lt_b = (s2_a_sig_reg < s2_b_sig_reg);

    always @(posedge clk) begin
        if (en) begin
            it_rem_reg[0]  <= a_lt_b ? {1'b0, s2_a_sig_reg, 1'b0} : {2'b00, s2_a_sig_reg};
            it_quo_reg[0]  <= 26'd0;
            it_div_reg[0]  <= s2_b_sig_reg;
            it_exp_reg[0]  <= s2_exp_reg - {10'd0, a_lt_b};
            it_kind_reg[0] <= s2_kind_reg;
            it_sign_reg[0] <= s2_sign_reg;
        end
    end

    /* stages 4..QBITS+3: restoring recurrence, one quotient bit per stage (remainder < 2 * divisor) */
    genvar k;
    generate
        for (k = 0; k < QBITS; k = k + 1) begin : g_iter
            // diff[25] is 0 whenever it is kept (remainder < 2 * divisor)
            /* verilator lint_off UNUSEDSIGNAL */
            wire [26:0] diff = {1'b0, it_rem_reg[k]} - {3'd0, it_div_reg[k]};
            /* verilator lint_on UNUSEDSIGNAL */
            wire        ge   = !diff[26];
            // the remainder before the shift is below the divisor, so 25 bits hold it
            wire [24:0] rem  = ge ? diff[24:0] : it_rem_reg[k][24:0];

            always @(posedge clk) begin
                if (en) begin
                    it_rem_reg[k+1]  <= {rem[24:0], 1'b0};
                    it_quo_reg[k+1]  <= {it_quo_reg[k][24:0], ge};
                    it_div_reg[k+1]  <= it_div_reg[k];
                    it_exp_reg[k+1]  <= it_exp_reg[k];
                    it_kind_reg[k+1] <= it_kind_reg[k];
                    it_sign_reg[k+1] <= it_sign_reg[k];
                end
            end
        end
    endgenerate

    /* stage QBITS+4: overflow test, right shift with sticky for a subnormal result. The exponent
       does not change through the recurrence, so its tests and the shift amount are computed
       from the last iteration's input and registered beside its output (not in this stage's
       path: the shift then starts from a register). */
    wire [10:0] p_exp     = it_exp_reg[QBITS-1];
    wire [10:0] p_sh_full = 11'd1 - p_exp;
    wire        p_sub     = p_exp[10] || (p_exp == 11'd0);
    reg         q_ovf_reg;
    reg         q_sub_reg;
    reg  [4:0]  q_sh_reg;
    always @(posedge clk) begin
        if (en) begin
            q_ovf_reg <= !p_exp[10] && (p_exp[9:0] >= 10'd255);
            q_sub_reg <= p_sub;
            // shifting by QBITS already moves every quotient bit into the sticky
            q_sh_reg  <= !p_sub ? 5'd0 : ((p_sh_full > 11'd26) ? 5'd26 : p_sh_full[4:0]);
        end
    end
    wire [7:0]  q_exp     = it_exp_reg[QBITS][7:0];
    wire        q_ovf     = q_ovf_reg;
    wire        q_sub     = q_sub_reg;
    wire [4:0]  q_sh      = q_sh_reg;
    // bit 51 is the hidden 1 of a normal result, which the packed format drops
    /* verilator lint_off UNUSEDSIGNAL */
    wire [51:0] q_shifted = {it_quo_reg[QBITS], 26'd0} >> q_sh;
    /* verilator lint_on UNUSEDSIGNAL */
    wire [24:0] q_sig     = q_shifted[50:26];

    reg [1:0]  s4_kind_reg;
    reg        s4_sign_reg;
    reg        s4_ovf_reg;
    reg [7:0]  s4_exp_reg;
    reg [24:0] s4_sig_reg;
    reg        s4_sticky_reg;

    always @(posedge clk) begin
        if (en) begin
            s4_kind_reg   <= it_kind_reg[QBITS];
            s4_sign_reg   <= it_sign_reg[QBITS];
            s4_ovf_reg    <= q_ovf;
            s4_exp_reg    <= q_sub ? 8'd0 : q_exp[7:0];
            s4_sig_reg    <= q_sig;
            s4_sticky_reg <= (q_shifted[25:0] != 26'd0) || (it_rem_reg[QBITS] != 26'd0);
        end
    end

    /* stage QBITS+5: round to nearest even on the packed magnitude, select specials */
    wire        r_round   = s4_sig_reg[1] && (s4_sig_reg[0] || s4_sticky_reg || s4_sig_reg[2]);
    wire [30:0] r_mag     = {s4_exp_reg, s4_sig_reg[24:2]} + {30'd0, r_round};

    reg [31:0] out_y_reg;

    always @(posedge clk) begin
        if (en) begin
            case (s4_kind_reg)
                KIND_NAN:  out_y_reg <= 32'h7fc00000;
                KIND_INF:  out_y_reg <= {s4_sign_reg, 8'hff, 23'd0};
                KIND_ZERO: out_y_reg <= {s4_sign_reg, 31'd0};
                default:   out_y_reg <= s4_ovf_reg ? {s4_sign_reg, 8'hff, 23'd0} : {s4_sign_reg, r_mag};
            endcase
        end
    end

    assign out_y = out_y_reg;

endmodule

`resetall
