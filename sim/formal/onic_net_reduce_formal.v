// OptimusNIC: formal properties of onic_net_reduce's flow control (SymbiYosys, bounded model check)
// Language: Verilog 2001 (immediate assertions, read with yosys -formal)

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The ring datapath's beat adder (fp32 wire: 16 lanes of the real fp32_add, its valid/tag delay
 * line included; the sums' bits are cut to free values in the .sby, so the arithmetic, which the
 * cocotb benches check bit for bit, is not part of the proof) under any back-pressure: both
 * inputs' TVALID and the output's TREADY free at every clock, TLAST and TKEEP free (its upper 60
 * bits zero: every TKEEP bit rides the same tag vector, so 4 stand for all 64). Assumed:
 * reset first; AXI4-Stream sources (a beat offered stays, unchanged, until taken); each `a`
 * beat's TUSER is its index (the count of `a` beats taken before it, mod 2^USER_WIDTH), so the
 * output's TUSER names the input beat it came from. Asserted: the two operands are taken
 * together (one `b` beat per `a` beat); the output's beats are the inputs' in order, none lost,
 * none duplicated (beat k out carries index k); an arbitrary tracked beat (any index) leaves
 * with the TKEEP and TLAST it came in with; never more than 2^FIFO_LOG2 beats held, and the
 * inputs are refused only when that many are (a steady stream never waits); the output is an
 * AXI4-Stream (a beat offered stays until taken). Covers: the reduce full (2^FIFO_LOG2 beats
 * held, both inputs offered and refused); after that, the tracked beat leaving with TLAST once
 * the output's back-pressure has held it; a steady stream (one beat in and one out at each of
 * 8 consecutive clocks).
 */
module onic_net_reduce_formal #(
    parameter integer USER_WIDTH = 6,
    parameter integer FIFO_LOG2 = 4
) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire [511:0]          s_a_tdata,
    input  wire [63:0]           s_a_tkeep,
    input  wire                  s_a_tlast,
    input  wire [USER_WIDTH-1:0] s_a_tuser,
    input  wire                  s_a_tvalid,
    input  wire [511:0]          s_b_tdata,
    input  wire                  s_b_tvalid,
    input  wire                  m_tready
);
    wire                  s_a_tready, s_b_tready;
    wire [511:0]          m_tdata;
    wire [63:0]           m_tkeep;
    wire                  m_tlast;
    wire [USER_WIDTH-1:0] m_tuser;
    wire                  m_tvalid;

    onic_net_reduce #(
        .WIRE_BF16(0),
        .USER_WIDTH(USER_WIDTH),
        .FIFO_LOG2(FIFO_LOG2)
    ) dut (
        .clk(clk), .rst(rst),
        .s_a_tdata(s_a_tdata), .s_a_tkeep(s_a_tkeep), .s_a_tlast(s_a_tlast), .s_a_tuser(s_a_tuser),
        .s_a_tvalid(s_a_tvalid), .s_a_tready(s_a_tready),
        .s_b_tdata(s_b_tdata), .s_b_tvalid(s_b_tvalid), .s_b_tready(s_b_tready),
        .m_tdata(m_tdata), .m_tkeep(m_tkeep), .m_tlast(m_tlast), .m_tuser(m_tuser),
        .m_tvalid(m_tvalid), .m_tready(m_tready)
    );

    localparam [USER_WIDTH-1:0] HELD_MAX = 1 << FIFO_LOG2;

    wire a_fire = s_a_tvalid && s_a_tready;
    wire b_fire = s_b_tvalid && s_b_tready;
    wire m_fire = m_tvalid && m_tready;

    // beats taken in and out (mod 2^USER_WIDTH: more than the FIFO holds, so the difference is exact)
    reg [USER_WIDTH-1:0] f_in, f_out;
    wire [USER_WIDTH-1:0] f_held = f_in - f_out;

    // the tracked beat: any index, chosen by the solver
    (* anyconst *) reg [USER_WIDTH-1:0] f_pick;
    reg        f_pick_in, f_pick_out;       // the tracked beat was taken / has left
    reg [63:0] f_pick_keep;
    reg        f_pick_last;

    reg        f_past_valid = 1'b0;
    reg        f_a_wait, f_b_wait, f_m_wait;  // a beat offered and not taken at the last clock
    reg [63:0] f_a_keep, f_m_keep;
    reg        f_a_last, f_m_last;
    reg [USER_WIDTH-1:0] f_m_user;
    reg        f_full_seen;                 // the inputs were refused with the reduce full
    reg [3:0]  f_stream_run;                // consecutive clocks with a beat in and a beat out

    always @(posedge clk) begin
        f_past_valid <= 1'b1;
        f_a_wait <= !rst && s_a_tvalid && !s_a_tready;
        f_b_wait <= !rst && s_b_tvalid && !s_b_tready;
        f_m_wait <= !rst && m_tvalid && !m_tready;
        f_a_keep <= s_a_tkeep;
        f_a_last <= s_a_tlast;
        f_m_keep <= m_tkeep;
        f_m_last <= m_tlast;
        f_m_user <= m_tuser;
        if (rst) begin
            f_in         <= {USER_WIDTH{1'b0}};
            f_out        <= {USER_WIDTH{1'b0}};
            f_pick_in    <= 1'b0;
            f_pick_out   <= 1'b0;
            f_full_seen  <= 1'b0;
            f_stream_run <= 4'd0;
        end else begin
            if (a_fire) f_in <= f_in + 1'b1;
            if (m_fire) f_out <= f_out + 1'b1;
            if (a_fire && f_in == f_pick && !f_pick_in) begin
                f_pick_in   <= 1'b1;
                f_pick_keep <= s_a_tkeep;
                f_pick_last <= s_a_tlast;
            end
            if (m_fire && f_out == f_pick && f_pick_in) f_pick_out <= 1'b1;
            if (f_held == HELD_MAX && s_a_tvalid && s_b_tvalid) f_full_seen <= 1'b1;
            f_stream_run <= a_fire && m_fire ? (f_stream_run == 4'd15 ? 4'd15 : f_stream_run + 4'd1) : 4'd0;
        end
    end

    always @(*) begin
        if (!f_past_valid) assume(rst);
        if (f_past_valid && !rst) begin
            // AXI4-Stream sources: an offered beat stays until taken
            // (the data is not under proof: cut to free values in the .sby)
            if (f_a_wait) assume(s_a_tvalid && s_a_tkeep == f_a_keep && s_a_tlast == f_a_last);
            if (f_b_wait) assume(s_b_tvalid);
        end
        if (s_a_tvalid) assume(s_a_tuser == f_in);
        // every TKEEP bit takes the same path (one tag vector): 4 free bits stand for all 64
        assume(s_a_tkeep[63:4] == 60'd0);

        if (f_past_valid && !rst) begin
            assert(a_fire == b_fire);
            assert(f_held <= HELD_MAX);
            assert(s_a_tready == (s_b_tvalid && f_held != HELD_MAX));
            assert(s_b_tready == (s_a_tvalid && f_held != HELD_MAX));
            if (m_tvalid) assert(f_held != {USER_WIDTH{1'b0}} && m_tuser == f_out);
            if (f_m_wait) assert(m_tvalid && m_tkeep == f_m_keep && m_tlast == f_m_last && m_tuser == f_m_user);
            if (m_fire && f_out == f_pick) assert(f_pick_in && m_tkeep == f_pick_keep && m_tlast == f_pick_last);
        end

        if (f_past_valid && !rst) begin
            cover(f_held == HELD_MAX && s_a_tvalid && s_b_tvalid);
            cover(m_fire && f_out == f_pick && m_tlast && f_m_wait && f_full_seen);
            cover(f_stream_run == 4'd8);
        end
    end
endmodule

`resetall
