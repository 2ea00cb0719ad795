// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * IEEE-754 binary32 square root, y = sqrt(a), round to nearest even, fully pipelined.
 *
 * One operation per enabled clock; the result leaves LATENCY enabled clocks later with its tag.
 * Subnormal inputs are normalized with a leading-zero count; an odd unbiased exponent doubles
 * the significand (radicand in [1, 4)) so the result exponent is exactly half. The root comes
 * from an unrolled radix-2 restoring digit recurrence, one root bit per stage, 26 bits (24 result
 * bits, guard and one more, plus the remainder as sticky). The root of a finite positive binary32
 * is always normal, so rounding is one add on the packed {exponent, fraction}.
 *
 * Stages: 1 unpack/classify/LZC, 2 normalize/exponent, 3..28 recurrence, 29 round/pack.
 */
module fp32_sqrt #(
    // 1: ce freezes the pipeline (the unit tests stall it); 0: ce is ignored and the
    // pipeline runs free, as onic_adam_lane uses it (no clock-enable net to fan out)
    parameter integer STALL = 1,
    // width of the pass-through tag that travels with each operand (context a lane carries)
    parameter integer TAG_WIDTH = 1
) (
    input  wire                 clk,
    input  wire                 rst,        // synchronous, active high: clears the valid pipeline only
    input  wire                 ce,         // clock enable: 0 freezes the whole pipeline

    /* operand */
    input  wire                 in_valid,
    input  wire [31:0]          in_a,
    input  wire [TAG_WIDTH-1:0] in_tag,

    /* result */
    output wire                 out_valid,
    output wire [31:0]          out_y,
    output wire [TAG_WIDTH-1:0] out_tag
);

wire en = (STALL != 0) ? ce : 1'b1;

    // root bits produced by the recurrence (1 integer + 23 fraction + guard + 1 extra)
    localparam integer QBITS = 26;
    // enabled clocks from in_* to out_* (a plain number: the test harness reads it from this file)
    localparam integer LATENCY = 29;

    // what the final stage emits: the computed root or a special value
    localparam [1:0] KIND_FINITE = 2'd0;
    localparam [1:0] KIND_ZERO   = 2'd1;
    localparam [1:0] KIND_INF    = 2'd2;
    localparam [1:0] KIND_NAN    = 2'd3;

    initial begin
        if (LATENCY != QBITS + 3) begin
            $error("Error: LATENCY must equal QBITS + 3, the stage count (instance %m)");
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

    /* stage 1: unpack, classify, count leading zeros of a subnormal significand */
    wire        a_exp_zero = (in_a[30:23] == 8'd0);
    wire        a_exp_max  = (in_a[30:23] == 8'hff);
    wire        a_frac_nz  = (in_a[22:0] != 23'd0);
    wire        a_nan  = a_exp_max && a_frac_nz;
    wire        a_inf  = a_exp_max && !a_frac_nz;
    wire        a_zero = a_exp_zero && !a_frac_nz;
    wire [23:0] a_sig  = {!a_exp_zero, in_a[22:0]};
    wire [4:0]  a_lz;

    fp_divsqrt_lzc24 lzc_a (.in_x(a_sig), .out_count(a_lz));

    reg [1:0]  s1_kind_reg;
    reg        s1_sign_reg;
    reg [23:0] s1_sig_reg;
    reg [7:0]  s1_exp_reg;
    reg [4:0]  s1_lz_reg;

    always @(posedge clk) begin
        if (en) begin
            if (a_nan || (in_a[31] && !a_zero)) begin
                s1_kind_reg <= KIND_NAN;
            end else if (a_inf) begin
                s1_kind_reg <= KIND_INF;
            end else if (a_zero) begin
                s1_kind_reg <= KIND_ZERO;
            end else begin
                s1_kind_reg <= KIND_FINITE;
            end
            // only a zero keeps its sign (sqrt(-0) = -0); every other result is positive or NaN
            s1_sign_reg <= in_a[31];
            s1_sig_reg  <= a_sig;
            // a subnormal has the exponent of the smallest normal, 1
            s1_exp_reg  <= a_exp_zero ? 8'd1 : in_a[30:23];
            s1_lz_reg   <= a_zero ? 5'd0 : a_lz;
        end
    end

    /*
     * stage 2: significand to [1, 2), halve the exponent. With B = biased input exponent after
     * normalization (may be negative), the result's biased exponent is (B + 127) >> 1 and the
     * unbiased input exponent B - 127 is odd exactly when B + 127 is odd.
     */
    wire [8:0]  s2_exp_sum = {1'b0, s1_exp_reg} - {4'd0, s1_lz_reg} + 9'd127;
    wire [23:0] s2_sig     = s1_sig_reg << s1_lz_reg;

    reg [25:0] it_rad_reg  [0:QBITS-1];
    reg [26:0] it_rem_reg  [0:QBITS];
    reg [25:0] it_root_reg [0:QBITS];
    reg [7:0]  it_exp_reg  [0:QBITS];
    reg [1:0]  it_kind_reg [0:QBITS];
    reg        it_sign_reg [0:QBITS];

    always @(posedge clk) begin
        if (en) begin
            // radicand = significand * 2^(odd exponent), its top 26 bits; the rest are zeros
            it_rad_reg[0]  <= s2_exp_sum[0] ? {s2_sig, 2'b00} : {1'b0, s2_sig, 1'b0};
            it_rem_reg[0]  <= 27'd0;
            it_root_reg[0] <= 26'd0;
            it_exp_reg[0]  <= s2_exp_sum[8:1];
            it_kind_reg[0] <= s1_kind_reg;
            it_sign_reg[0] <= s1_sign_reg;
        end
    end

    /*
     * stages 3..QBITS+2: restoring square-root recurrence, one root bit per stage. Bring down
     * two radicand bits, subtract the trial 4 * root + 1 if it fits. The kept remainder stays
     * <= 2 * root, below 2^27 after the last stage.
     */
    genvar k;
    generate
        for (k = 0; k < QBITS; k = k + 1) begin : g_iter
            wire [28:0] r_in  = {it_rem_reg[k][26:0], it_rad_reg[k][25:24]};
            // bits 28:27 of a kept difference are 0 (see the bound above)
            /* verilator lint_off UNUSEDSIGNAL */
            wire [29:0] diff  = {1'b0, r_in} - {2'b00, it_root_reg[k], 2'b01};
            /* verilator lint_on UNUSEDSIGNAL */
            wire        ge    = !diff[29];

            always @(posedge clk) begin
                if (en) begin
                    it_rem_reg[k+1]  <= ge ? diff[26:0] : r_in[26:0];
                    it_root_reg[k+1] <= {it_root_reg[k][24:0], ge};
                    it_exp_reg[k+1]  <= it_exp_reg[k];
                    it_kind_reg[k+1] <= it_kind_reg[k];
                    it_sign_reg[k+1] <= it_sign_reg[k];
                end
            end

            if (k < QBITS - 1) begin : g_rad
                always @(posedge clk) begin
                    if (en) begin
                        it_rad_reg[k+1] <= {it_rad_reg[k][23:0], 2'b00};
                    end
                end
            end
        end
    endgenerate

    /* stage QBITS+3: round to nearest even on the packed magnitude, select specials */
    // bit 25 is the hidden 1, which the packed format drops
    /* verilator lint_off UNUSEDSIGNAL */
    wire [25:0] r_root   = it_root_reg[QBITS];
    /* verilator lint_on UNUSEDSIGNAL */
    wire        r_sticky = r_root[0] || (it_rem_reg[QBITS] != 27'd0);
    wire        r_round  = r_root[1] && (r_sticky || r_root[2]);
    wire [30:0] r_mag    = {it_exp_reg[QBITS], r_root[24:2]} + {30'd0, r_round};

    reg [31:0] out_y_reg;

    always @(posedge clk) begin
        if (en) begin
            case (it_kind_reg[QBITS])
                KIND_NAN:  out_y_reg <= 32'h7fc00000;
                KIND_INF:  out_y_reg <= 32'h7f800000;
                KIND_ZERO: out_y_reg <= {it_sign_reg[QBITS], 31'd0};
                default:   out_y_reg <= {1'b0, r_mag};
            endcase
        end
    end

    assign out_y = out_y_reg;

endmodule

`resetall
