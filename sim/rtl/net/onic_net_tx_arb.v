// OptimusNIC: ring protocol transmit arbiter with a store-and-forward frame FIFO
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * Packet-level arbitration of three frame streams into the MAC's transmit AXI4-Stream:
 * s_ctl_* (ACK/NAK frames: highest priority, they carry credits), s_rs_* and s_ag_* (the two
 * data flows, round robin between them). A frame, once chosen, is copied whole before the next
 * choice: beats of two frames never interleave. Choosing takes one clock between frames.
 *
 * A data frame is chosen only while no other data frame waits unstarted in the FIFO: one frame
 * leaving and one whole behind it keep the line busy (a frame is copied in fewer clocks than it
 * takes on the line), and an ACK/NAK then waits behind at most that one, not behind a FIFO full
 * of data frames (a held ACK holds the peer's window, a held NAK its recovery).
 *
 * Store and forward: frames are written into a FIFO (one inferred RAM, 2^FIFO_LOG2 beats of
 * 512 data + 64 keep + 1 last bits) and a frame is offered to the MAC only once all its beats
 * are in the FIFO and have had 3 clocks to reach its read pipeline (a frame counter, incremented
 * 3 clocks after a frame's last beat is written). From its first beat to its last m_axis_tvalid
 * then stays high: the MAC's transmit side never underflows mid-frame. The FIFO must hold the
 * largest frame (MAX_FRAME_BEATS <= 2^FIFO_LOG2), or that frame would never start.
 *
 * Minimum frame size: a frame whose first beat is also its last and carries fewer than 60 bytes
 * is padded to 60 (TKEEP extended, the added bytes zero); the MAC appends the FCS (64 bytes on
 * the wire). Every ring frame has its full 64-byte header beat, ACK/NAK frames included, so none
 * is short; the padding is there for any other single-beat frame. Frames of more than one beat
 * are assumed to have a full first beat (at least 64 bytes).
 *
 * Reset: the MAC is not reset with the kernel, and a frame cut short on its transmit stream is
 * an underflow (the CMAC sends it with a bad FCS; a truncated frame with a good FCS would be
 * worse). So a reset that finds a frame part-sent lets it finish: the FIFO (whole frames only,
 * so its tail is there) and the output side keep running until that frame's last beat is
 * taken, the input side (reset at once) chooses nothing meanwhile, and then the FIFO is emptied
 * (the frames behind it belong to the step the reset abandoned). Between frames, and during
 * rst, no new frame starts. The MAC therefore sees only whole frames.
 */
module onic_net_tx_arb #(
    // log2 of the frame FIFO's depth in 512-bit beats
    parameter integer FIFO_LOG2 = 9,
    // the largest frame in beats (a jumbo frame of 8192 payload bytes: 129 beats)
    parameter integer MAX_FRAME_BEATS = 129
) (
    input  wire         clk,
    input  wire         rst,

    /* ACK/NAK frames */
    input  wire [511:0] s_ctl_axis_tdata,
    input  wire [63:0]  s_ctl_axis_tkeep,
    input  wire         s_ctl_axis_tlast,
    input  wire         s_ctl_axis_tvalid,
    output wire         s_ctl_axis_tready,

    /* reduce-scatter frames */
    input  wire [511:0] s_rs_axis_tdata,
    input  wire [63:0]  s_rs_axis_tkeep,
    input  wire         s_rs_axis_tlast,
    input  wire         s_rs_axis_tvalid,
    output wire         s_rs_axis_tready,

    /* all-gather frames */
    input  wire [511:0] s_ag_axis_tdata,
    input  wire [63:0]  s_ag_axis_tkeep,
    input  wire         s_ag_axis_tlast,
    input  wire         s_ag_axis_tvalid,
    output wire         s_ag_axis_tready,

    /* to the MAC's transmit side (the MAC appends the FCS) */
    output wire [511:0] m_axis_tdata,
    output wire [63:0]  m_axis_tkeep,
    output wire         m_axis_tlast,
    output wire         m_axis_tvalid,
    input  wire         m_axis_tready,

    /* counters, 32-bit saturating, cleared by rst */
    output wire [31:0]  cnt_ctl_frames,
    output wire [31:0]  cnt_rs_frames,
    output wire [31:0]  cnt_ag_frames
);

    localparam [1:0] SEL_CTL = 2'd0;
    localparam [1:0] SEL_RS  = 2'd1;
    localparam [1:0] SEL_AG  = 2'd2;
    localparam [63:0] MIN_KEEP = {4'h0, {60{1'b1}}};  // 60 bytes before the FCS

    initial begin
        if (FIFO_LOG2 < 2 || FIFO_LOG2 > 14) begin
            $error("FIFO_LOG2 must be 2..14 (instance %m)");
            $finish;
        end
        if (MAX_FRAME_BEATS < 1 || MAX_FRAME_BEATS > (1 << FIFO_LOG2)) begin
            $error("MAX_FRAME_BEATS must be 1..2^FIFO_LOG2: the FIFO holds a whole frame (instance %m)");
            $finish;
        end
    end

    /* input side: choose a frame, copy it whole */
    reg       busy_reg;
    reg [1:0] sel_reg;
    reg       rr_ag_reg;   // the last data frame was all-gather: reduce-scatter goes next
    reg       first_reg;   // the next beat is a frame's first
    reg       data_wait_reg;  // a data frame chosen and not yet started at the output

    wire fifo_s_ready;

    wire [511:0] in_data  = sel_reg == SEL_CTL ? s_ctl_axis_tdata  : sel_reg == SEL_RS ? s_rs_axis_tdata  : s_ag_axis_tdata;
    wire [63:0]  in_keep  = sel_reg == SEL_CTL ? s_ctl_axis_tkeep  : sel_reg == SEL_RS ? s_rs_axis_tkeep  : s_ag_axis_tkeep;
    wire         in_last  = sel_reg == SEL_CTL ? s_ctl_axis_tlast  : sel_reg == SEL_RS ? s_rs_axis_tlast  : s_ag_axis_tlast;
    wire         in_valid = sel_reg == SEL_CTL ? s_ctl_axis_tvalid : sel_reg == SEL_RS ? s_rs_axis_tvalid : s_ag_axis_tvalid;

    wire in_fire = busy_reg && in_valid && fifo_s_ready;
    wire in_end  = in_fire && in_last;

    assign s_ctl_axis_tready = busy_reg && sel_reg == SEL_CTL && fifo_s_ready;
    assign s_rs_axis_tready  = busy_reg && sel_reg == SEL_RS && fifo_s_ready;
    assign s_ag_axis_tready  = busy_reg && sel_reg == SEL_AG && fifo_s_ready;

    // padding of a short single-beat frame: keep the 60 low bytes, zero the added ones
    wire         pad = first_reg && in_last;
    wire [63:0]  w_keep = pad ? (in_keep | MIN_KEEP) : in_keep;
    wire [511:0] w_data;
    genvar i;
    generate
        for (i = 0; i < 64; i = i + 1) begin : g_pad
            assign w_data[8*i +: 8] = (pad && !in_keep[i]) ? 8'h00 : in_data[8*i +: 8];
        end
    endgenerate

    // a frame part-sent when a reset came is being finished (see above): choose nothing. Both
    // registers start at 0 at configuration: their reset waits for the frame the MAC is taking.
    /* verilator lint_off PROCASSINIT */
    reg drain_reg = 1'b0;
    reg out_active_reg = 1'b0;   // a frame is being sent
    /* verilator lint_on PROCASSINIT */

    always @(posedge clk) begin
        if (rst) begin
            busy_reg  <= 1'b0;
            sel_reg   <= SEL_CTL;
            rr_ag_reg <= 1'b1;
            first_reg <= 1'b1;
        end else if (!busy_reg) begin
            first_reg <= 1'b1;
            if (drain_reg) begin
                busy_reg <= 1'b0;
            end else if (s_ctl_axis_tvalid) begin
                busy_reg <= 1'b1;
                sel_reg  <= SEL_CTL;
            end else if (data_wait_reg) begin
                busy_reg <= 1'b0;
            end else if (s_rs_axis_tvalid && (rr_ag_reg || !s_ag_axis_tvalid)) begin
                busy_reg <= 1'b1;
                sel_reg  <= SEL_RS;
            end else if (s_ag_axis_tvalid) begin
                busy_reg <= 1'b1;
                sel_reg  <= SEL_AG;
            end
        end else if (in_fire) begin
            first_reg <= in_last;
            if (in_last) begin
                busy_reg <= 1'b0;
                if (sel_reg != SEL_CTL) begin
                    rr_ag_reg <= sel_reg == SEL_AG;
                end
            end
        end
    end

    /* the frame FIFO */
    wire [FIFO_LOG2:0] fifo_count;
    wire               fifo_m_valid;
    wire               fifo_m_last;
    wire               fifo_m_data;   // the beat belongs to a data frame (not ACK/NAK)

    /* verilator lint_off UNUSEDSIGNAL */
    wire [FIFO_LOG2:0] fifo_count_unused = fifo_count;  // frames are counted instead
    /* verilator lint_on UNUSEDSIGNAL */

    // a reset empties the FIFO at once between frames, after the frame part-sent otherwise
    wire fifo_rst   = rst && !out_active_reg;
    wire fifo_clear = drain_reg && !out_active_reg;

    onic_fifo #(
        .WIDTH(578),
        .DEPTH_LOG2(FIFO_LOG2)
    ) frame_fifo (
        .clk(clk),
        .rst(fifo_rst),
        .clear(fifo_clear),
        .s_data({sel_reg != SEL_CTL, in_last, w_keep, w_data}),
        .s_valid(in_fire),
        .s_ready(fifo_s_ready),
        .m_data({fifo_m_data, fifo_m_last, m_axis_tkeep, m_axis_tdata}),
        .m_valid(fifo_m_valid),
        .m_ready(m_axis_tready && m_axis_tvalid),
        .count(fifo_count)
    );

    /* output side: a frame starts only when it is whole in the FIFO */
    reg [2:0]         done_pipe_reg;  // a frame's last beat written, 1, 2 and 3 clocks ago
    reg [FIFO_LOG2:0] frames_reg;     // whole frames in the FIFO, not yet started

    wire out_fire  = m_axis_tvalid && m_axis_tready;
    wire out_start = out_fire && !out_active_reg;

    // a new frame starts only outside a reset and its drain; the one part-sent always finishes
    assign m_axis_tvalid = fifo_m_valid && (out_active_reg
                                            || (frames_reg != {(FIFO_LOG2+1){1'b0}} && !rst && !drain_reg));
    assign m_axis_tlast  = fifo_m_last;

    always @(posedge clk) begin
        if (rst && out_active_reg) begin
            // finish the frame part-sent (its beats are in the FIFO); nothing after it counts
            done_pipe_reg <= 3'b000;
            frames_reg    <= {(FIFO_LOG2+1){1'b0}};
            drain_reg     <= 1'b1;
            if (out_fire) begin
                out_active_reg <= !fifo_m_last;
            end
        end else if (rst || fifo_clear) begin
            done_pipe_reg  <= 3'b000;
            frames_reg     <= {(FIFO_LOG2+1){1'b0}};
            out_active_reg <= 1'b0;
            drain_reg      <= 1'b0;
        end else if (drain_reg) begin
            if (out_fire) begin
                out_active_reg <= !fifo_m_last;
            end
        end else begin
            done_pipe_reg <= {done_pipe_reg[1:0], in_end};
            frames_reg    <= frames_reg + {{FIFO_LOG2{1'b0}}, done_pipe_reg[2]} - {{FIFO_LOG2{1'b0}}, out_start};
            if (out_fire) begin
                out_active_reg <= !fifo_m_last;
            end
        end
    end

    /* a data frame waits: set when one is chosen, cleared when it starts at the output (only
       one at a time is chosen, so the frame starting is that one) */
    wire data_chosen = !rst && !busy_reg && !drain_reg && !s_ctl_axis_tvalid && !data_wait_reg
                       && (s_rs_axis_tvalid || s_ag_axis_tvalid);
    wire data_started = out_start && fifo_m_data;

    always @(posedge clk) begin
        if (rst || fifo_clear || drain_reg) begin
            data_wait_reg <= 1'b0;
        end else if (data_chosen) begin
            data_wait_reg <= 1'b1;
        end else if (data_started) begin
            data_wait_reg <= 1'b0;
        end
    end

    /* counters */
    reg [31:0] c_ctl_reg;
    reg [31:0] c_rs_reg;
    reg [31:0] c_ag_reg;

    always @(posedge clk) begin
        if (rst) begin
            c_ctl_reg <= 32'd0;
            c_rs_reg  <= 32'd0;
            c_ag_reg  <= 32'd0;
        end else if (in_end) begin
            if (sel_reg == SEL_CTL && c_ctl_reg != 32'hFFFFFFFF) c_ctl_reg <= c_ctl_reg + 1'b1;
            if (sel_reg == SEL_RS && c_rs_reg != 32'hFFFFFFFF) c_rs_reg <= c_rs_reg + 1'b1;
            if (sel_reg == SEL_AG && c_ag_reg != 32'hFFFFFFFF) c_ag_reg <= c_ag_reg + 1'b1;
        end
    end

    assign cnt_ctl_frames = c_ctl_reg;
    assign cnt_rs_frames  = c_rs_reg;
    assign cnt_ag_frames  = c_ag_reg;

endmodule

`resetall
