// OptimusNIC: the two-phase step's sum of squares and non-finite flag of the owner's reduced chunk
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * A tap on the reduced chunk's beats (docs/design.md 8.1 "Two-phase step"): it never refuses a
 * beat, so `s_valid` is the handshake of the stream it watches, one beat per clock at most.
 * The fixed order is hls.net.ring.chunk_scalars bit for bit:
 *   - each element widened to fp32 (WIRE_BF16: the pattern as the top half), squared exactly in
 *     float64 (fp32_sq_f64); elements outside TKEEP are +0;
 *   - a beat's LANES squares added as a pairwise tree (adjacent pairs, level by level: LANES - 1
 *     fp64_add, log2(LANES) levels, pipelined);
 *   - beat b's sum added into accumulator b mod 8 by one fp64_add in a loop: the accumulator of
 *     beat b is written back 7 clocks after it was read (an input register, the adder's 6),
 *     before beat b + 8 (at least 8 clocks later) reads it, so the loop takes a beat every clock
 *     and idle clocks change nothing;
 *   - after the chunk's last beat (`s_last`) has left the loop: the 8 accumulators added as a
 *     pairwise tree (4, 2, 1 additions) by the same adder.
 * Every partial is >= +0, a NaN leaves as the canonical 0x7FF8000000000000 (the reference's too).
 * `nonfinite`: some kept element had an all-ones exponent. `start` (between chunks) clears the
 * accumulators and `done`; `done` rises once `sumsq` and `nonfinite` are final and holds.
 */
module onic_net_sumsq #(
    // 0: fp32 wire (16 elements a beat), 1: bf16 wire (32 elements a beat)
    parameter integer WIRE_BF16 = 0
) (
    input  wire         clk,
    input  wire         rst,

    input  wire         start,
    input  wire         s_valid,
    input  wire [511:0] s_data,
    input  wire [63:0]  s_keep,      // whole elements: the first byte's bit is read
    input  wire         s_last,

    output wire         done,
    output wire [63:0]  sumsq,
    output wire         nonfinite
);

    localparam integer LANES = (WIRE_BF16 != 0) ? 32 : 16;
    localparam integer LEVELS = (WIRE_BF16 != 0) ? 5 : 4;
    localparam integer SLOTS = 8;
    localparam integer LOOP_LATENCY = 7;  // accumulator read to write-back: input register + fp64_add

    /* the input register and the squares */
    reg          in_valid_reg, in_last_reg, nonfinite_reg;
    reg  [511:0] in_data_reg;
    reg  [LANES-1:0] in_keep_reg;  // one TKEEP bit per element (elements are kept whole)
    wire [LANES-1:0] elem_keep;

    wire [LANES*64-1:0] level0;
    wire                sq_valid, sq_last;
    reg  [LANES-1:0]    lane_special;

    genvar g;
    generate
        for (g = 0; g < LANES; g = g + 1) begin : sq_lanes
            wire [31:0] x;
            if (WIRE_BF16 != 0) begin : bf16_lane
                assign elem_keep[g] = s_keep[2*g];
                assign x = in_keep_reg[g] ? {in_data_reg[16*g +: 16], 16'd0} : 32'd0;
            end else begin : fp32_lane
                assign elem_keep[g] = s_keep[4*g];
                assign x = in_keep_reg[g] ? in_data_reg[32*g +: 32] : 32'd0;
            end
            always @* lane_special[g] = x[30:23] == 8'hff;
            if (g == 0) begin : with_ctl
                fp32_sq_f64 #(.STALL(0), .TAG_WIDTH(1)) sq_inst (
                    .clk(clk), .rst(rst), .ce(1'b1),
                    .in_valid(in_valid_reg), .in_a(x), .in_tag(in_last_reg),
                    .out_valid(sq_valid), .out_y(level0[64*g +: 64]), .out_tag(sq_last)
                );
            end else begin : data_only
                wire       unused_valid;
                wire [0:0] unused_tag;
                fp32_sq_f64 #(.STALL(0), .TAG_WIDTH(1)) sq_inst (
                    .clk(clk), .rst(rst), .ce(1'b1),
                    .in_valid(1'b0), .in_a(x), .in_tag(1'b0),
                    .out_valid(unused_valid), .out_y(level0[64*g +: 64]), .out_tag(unused_tag)
                );
            end
        end
    endgenerate

    /* the beat's pairwise tree: level l has LANES >> l values */
    localparam integer TW = LANES * 64;
    wire [(LEVELS+1)*TW-1:0] tree;  // level l at [l*TW +: TW] (a flat vector: yosys, not an array)
    wire [LEVELS:0]     tree_valid, tree_last;

    assign tree[TW-1:0] = level0;
    assign tree_valid[0] = sq_valid;
    assign tree_last[0] = sq_last;

    genvar l, k;
    generate
        for (l = 0; l < LEVELS; l = l + 1) begin : levels
            for (k = 0; k < (LANES >> (l + 1)); k = k + 1) begin : adders
                if (k == 0) begin : with_ctl
                    fp64_add #(.STALL(0), .TAG_WIDTH(1)) add_inst (
                        .clk(clk), .rst(rst), .ce(1'b1),
                        .in_valid(tree_valid[l]), .in_a(tree[l*TW+128*k +: 64]), .in_b(tree[l*TW+128*k+64 +: 64]),
                        .in_sub(1'b0), .in_tag(tree_last[l]),
                        .out_valid(tree_valid[l+1]), .out_y(tree[(l+1)*TW+64*k +: 64]), .out_tag(tree_last[l+1])
                    );
                end else begin : data_only
                    wire       unused_valid;
                    wire [0:0] unused_tag;
                    fp64_add #(.STALL(0), .TAG_WIDTH(1)) add_inst (
                        .clk(clk), .rst(rst), .ce(1'b1),
                        .in_valid(1'b0), .in_a(tree[l*TW+128*k +: 64]), .in_b(tree[l*TW+128*k+64 +: 64]),
                        .in_sub(1'b0), .in_tag(1'b0),
                        .out_valid(unused_valid), .out_y(tree[(l+1)*TW+64*k +: 64]), .out_tag(unused_tag)
                    );
                end
            end
            // the upper half of each level's vector is never driven by an adder
            assign tree[(l+1)*TW+(LANES>>(l+1))*64 +: (LANES-(LANES>>(l+1)))*64] = {((LANES - (LANES >> (l + 1))) * 64){1'b0}};
        end
    endgenerate

    wire [63:0] beat_sum = tree[LEVELS*TW +: 64];
    // an element's other TKEEP bits equal its first one; a level's upper half is zero filler
    wire _unused_ok = &{1'b0, s_keep, tree, 1'b0};

    /* the loop: beat b into accumulator b mod 8; then the final tree through the same adder */
    localparam [1:0] ST_RUN = 2'd0, ST_DRAIN = 2'd1, ST_FINAL = 2'd2, ST_DONE = 2'd3;

    reg  [1:0]  state_reg;
    reg  [2:0]  slot_reg;      // the next beat's accumulator
    reg  [3:0]  wait_reg;      // clocks left until the loop is empty
    reg  [2:0]  pairs_reg;     // additions of the final tree's current level (4, 2, 1)
    reg  [1:0]  issue_reg;     // the next of them
    reg  [63:0] acc [0:SLOTS-1];

    wire        beat_in = tree_valid[LEVELS] && state_reg == ST_RUN;
    wire        final_in = state_reg == ST_FINAL;
    wire [2:0]  rd_a = final_in ? {issue_reg, 1'b0} : slot_reg;
    wire [2:0]  rd_b = {issue_reg, 1'b1};
    wire [63:0] add_a = acc[rd_a];
    wire [63:0] add_b = final_in ? acc[rd_b] : beat_sum;
    wire [2:0]  add_tag = final_in ? {1'b0, issue_reg} : slot_reg;

    wire        acc_valid;
    wire [63:0] acc_y;
    wire [2:0]  acc_tag;

    // the accumulator read (8:1) registered before the adder: the adder's first stage is deep
    reg         loop_valid_reg;
    reg  [63:0] loop_a_reg, loop_b_reg;
    reg  [2:0]  loop_tag_reg;

    always @(posedge clk) begin
        loop_valid_reg <= (beat_in || final_in) && !rst && !start;
        loop_a_reg <= add_a;
        loop_b_reg <= add_b;
        loop_tag_reg <= add_tag;
    end

    fp64_add #(.STALL(0), .TAG_WIDTH(3)) loop_inst (
        .clk(clk), .rst(rst || start), .ce(1'b1),
        .in_valid(loop_valid_reg), .in_a(loop_a_reg), .in_b(loop_b_reg), .in_sub(1'b0), .in_tag(loop_tag_reg),
        .out_valid(acc_valid), .out_y(acc_y), .out_tag(acc_tag)
    );

    integer i;
    always @(posedge clk) begin
        in_valid_reg <= s_valid && !rst;
        in_last_reg <= s_last;
        in_data_reg <= s_data;
        in_keep_reg <= elem_keep;

        if (acc_valid) begin
            acc[acc_tag] <= acc_y;
        end

        if (rst || start) begin
            state_reg <= ST_RUN;
            slot_reg <= 3'd0;
            wait_reg <= 4'd0;
            pairs_reg <= 3'd4;
            issue_reg <= 2'd0;
            nonfinite_reg <= 1'b0;
            for (i = 0; i < SLOTS; i = i + 1) begin
                acc[i] <= 64'd0;
            end
        end else begin
            if (in_valid_reg && (lane_special != {LANES{1'b0}})) begin
                nonfinite_reg <= 1'b1;
            end
            case (state_reg)
                ST_RUN: begin
                    if (beat_in) begin
                        slot_reg <= slot_reg + 3'd1;
                        if (tree_last[LEVELS]) begin
                            state_reg <= ST_DRAIN;
                            wait_reg <= LOOP_LATENCY[3:0];
                        end
                    end
                end
                ST_DRAIN: begin
                    if (wait_reg == 4'd0) begin
                        if (pairs_reg == 3'd0) begin
                            state_reg <= ST_DONE;
                        end else begin
                            state_reg <= ST_FINAL;
                            issue_reg <= 2'd0;
                        end
                    end else begin
                        wait_reg <= wait_reg - 4'd1;
                    end
                end
                ST_FINAL: begin
                    if ({1'b0, issue_reg} + 3'd1 == pairs_reg) begin
                        state_reg <= ST_DRAIN;
                        wait_reg <= LOOP_LATENCY[3:0];
                        pairs_reg <= pairs_reg >> 1;
                    end
                    issue_reg <= issue_reg + 2'd1;
                end
                default: begin
                end
            endcase
        end
    end

    assign done = state_reg == ST_DONE;
    assign sumsq = acc[0];
    assign nonfinite = nonfinite_reg;

endmodule

`resetall
