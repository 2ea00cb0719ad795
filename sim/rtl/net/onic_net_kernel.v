// OptimusNIC: the network kernel (Vitis RTL kernel): ring protocol between the MAC and the Adam kernel
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * The network kernel <spec>_net of docs/design.md 8.4 (rail placement): one ring port.
 *
 *   s_axis_mac0 (MAC RX) ─> onic_net_rx ─┬ data headers + payload ─> onic_net_ring_dp ─┬ RS/AG packets ─> onic_net_tx ─> m_axis_mac0 (MAC TX)
 *                                        ├ ACK/NAK headers (flow 1 RS, 2 AG) ─────────┼────────────────> tx senders
 *                                        └ replies due (evt) ─────────────────────────┼────────────────> tx ACK/NAK
 *   m_axi_lgrad0 (read) ─ local gradient ─────────────────────────────────────────────┤
 *   m_axi_gather0 (write) ─ gathered parameters ──────────────────────────────────────┤
 *   m_axis_grad0 ─> the Adam kernel's gradient input; s_axis_param0 <─ its parameter output
 *
 * ap_ctrl_hs: ap_start latches the arguments (onic_net_control_s_axi, hls/net_regmap.py), checks
 * them (STATUS bit4 config_error: world 2..255, rank < world, length >= 1, payload_bytes a
 * multiple of 64 between 64 and MAX_PAYLOAD_BEATS x 64, window and credit >= 1, a chunk of at
 * most 65535 x 16 elements; a bad configuration finishes at once, nothing sent), sizes the step
 * (S = ceil(ceil(L / N) / 16) x 16 elements per chunk, packets per hop = ceil(chunk bytes /
 * payload_bytes) per flow: three sequential divisions, about 100 clocks; each flow's segment: the
 * `segment` argument B, 0 or at least the flow's packets per hop being one round, hop-major
 * order), holds the configuration
 * 8 clocks (the header builders' checksum pipeline) and starts the receive side (step_start),
 * the transmit side and the datapath on one clock. ap_done (with ap_ready) when the datapath has
 * handed the owner's reduced chunk to the Adam kernel (TLAST taken), the all-gather is complete
 * (own chunk sent, every received chunk forwarded and written) and both senders have every
 * packet acknowledged. The receive side keeps answering between steps (re-ACKs of the previous
 * step). `ag_release` is raised once the RS sender's acknowledged base reaches its packet total.
 *
 * STATUS (sticky, cleared by ap_start): bit0 read_response (an RRESP error on m_axi_lgrad0),
 * bit1 write_response (a BRESP error on m_axi_gather0), bit2 protocol_error (a non-data opcode
 * reached the datapath, the parameter stream's TLAST misplaced, an ACK beyond the packets sent,
 * a packet too long for a retransmit slot), bit3 timeout_exhausted (never set: the senders retry
 * without a budget; the host's wait times out instead), bit4 config_error (also: `phase` 2 or 3
 * without a finished phase one of the latched step; a one-phase step of more than one round:
 * round-major order needs the two-phase step).
 *
 * Two-phase step (argument `phase`, docs/design.md 8.1; sim/rtl/net/README.md "Two-phase step"):
 * phase 1 runs the step as above, but the owner's reduced chunk goes to onic_net_twophase
 * (to card memory at sum0 through m_axi_gather0, its sum of squares and non-finite flag), the
 * scalar exchange runs on the AG sender (s_ag_desc_scalar) with scalar headers and their payload
 * routed to the scalar block in queue order, and ap_done comes once the sum is in memory, every
 * entry is known and the RS and scalar flows are acknowledged. The host reads the N entries
 * (`entry`, ENTRY_REGS), derives the scale or the skip and starts phase 2: no argument is read,
 * the receive side is not restarted (AG frames that came early wait in its slots), the AG sender
 * restarts (start_ag) and the sum is read back through m_axi_lgrad0 as m_axis_grad0; then the
 * all-gather as in a one-phase step. A skipped step (a non-finite gradient somewhere) starts
 * phase 3 instead: the Adam kernel is not started and the all-gather's hop 0 is the card's current
 * parameters (its Adam kernel's last output, in the parameter dtype) read from card memory at
 * sum0 (written before this start: the one argument phase 3 reads) through m_axi_lgrad0, so the
 * ring gathers every card's unchanged parameters, as the reference cards do on a skip. In a
 * one-phase step (phase 0) a scalar frame is refused (protocol_error).
 *
 * Round-major order (`segment` B below a flow's packets per hop; design.md 8.2): both flows go in
 * rounds of B packets per hop (onic_net_ring_dp), so a ring of cards with finite buffers cannot
 * deadlock when 2 B is below a flow's transmit plus receive slots, whatever the chunk's size.
 * Such a step must be two-phase: phase one's sum goes to card memory as it arrives and phase two
 * feeds the Adam kernel from there, so its parameter stream, held by the all-gather's rounds,
 * never holds the reduce-scatter. A host wanting the one-phase semantics runs phases one and two
 * and ignores the entries (the scale grad_scale / N; phase 2 even with a non-finite flag).
 *
 * Counters (net_regmap.counter_names() order, 64-bit registers): 32-bit saturating values in the
 * low word, high word 0, cleared by reset only (since the card was made, as hls.net.card).
 * Sums of two flows (retransmissions, timeouts, ACK/NAKs received, stale replies) saturate.
 * frames_out / bytes_out count at m_axis_mac0; bytes exclude the FCS the MAC appends (as
 * bytes_in: the MAC strips it); scalar_payload_bytes_out is the AG sender's payload bytes during
 * phase one (ag_payload_bytes_out the rest).
 *
 * The Ethernet addresses are numbers in network order: MAC 02:00:00:00:00:05 is 0x0000_0200
 * (local_mac_hi) and 0x0000_0005 (local_mac_lo); IPv4 10.0.0.1 is 0x0A000001. succ_port is not
 * used (every ring frame goes to UDP port 0x4F4E).
 */
module onic_net_kernel #(
    // wire dtype (RS payload, the Adam kernel's gradient stream): 0 fp32, 1 bf16
    parameter integer WIRE_BF16 = 0,
    // parameter dtype (the Adam kernel's output, AG payload, gathered buffer): 0 fp32, 1 bf16
    parameter integer PARAM_BF16 = 0,
    // receive buffer: log2 payload beats, log2 frame slots (the credit), largest payload in beats.
    // The payload RAM holds at least 2 x 2^RX_SLOT_LOG2 + 1 frames of RX_FRAME_BEATS (checked below):
    // a flow's first credit is the slot count S, granted against an empty buffer, a later one leaves
    // its flow at most S + 1 frames (the one the datapath is reading is not counted), and two flows
    // of the predecessor run at once (RS with AG in a one-phase step, RS with the scalar flow in
    // phase one, AG with the scalar flow's last frames in phase two): sim/rtl/net/README.md
    parameter integer RX_PAYLOAD_DEPTH_LOG2 = 11,
    parameter integer RX_SLOT_LOG2 = 5,
    parameter integer RX_FRAME_BEATS = 22,
    // transmit side: log2 packets per retransmit buffer, log2 beats per slot, UltraRAM, frame FIFO
    parameter integer TX_SLOTS_LOG2 = 7,
    parameter integer TX_BEATS_LOG2 = 5,
    parameter integer TX_URAM = 1,
    parameter integer TX_FIFO_LOG2 = 9,
    // stripes of the local-gradient and gathered-parameter buffers (1, 2, 4 or 8: hls/layout.py's
    // rule over each whole buffer; onic_net_ring_dp). Stripe k's AXI signals are [k*W +: W] of the
    // m_axi_lgrad0_* / m_axi_gather0_* ports (the packaged wrapper names them m_axi_lgrad<k>_*,
    // m_axi_gather<k>_*); with 1 they are the one port each. The two-phase step's sum (phases 1-3)
    // goes through stripe 0 only.
    parameter integer STRIPES = 1,
    // datapath: gradient prefetch FIFO, gather write FIFO (log2 beats), longest AXI burst
    parameter integer RD_FIFO_LOG2 = 8,
    parameter integer WR_FIFO_LOG2 = 7,
    parameter integer MAX_BURST = 64,
    // ACK coalescing: at most ACK_EVERY accepted frames of a flow per cumulative ACK (1: an ACK
    // per frame), at most a quarter of min(window, credit); a held ACK waits at most ACK_HOLD
    // clocks. On by default: an ACK per frame takes 5.9 % of the transmit line at 1408-byte
    // payloads, more than the 2 % the line-rate goal leaves (sim/rtl/net/README.md)
    parameter integer ACK_EVERY = 8,
    parameter integer ACK_HOLD = 256
) (
    input  wire          ap_clk,
    input  wire          ap_rst_n,
    // the name Vitis requires for the interrupt port (also a common C++ word)
    /* verilator lint_off SYMRSVDWORD */
    output wire          interrupt,
    /* verilator lint_on SYMRSVDWORD */

    /* AXI4-Lite control (hls/net_regmap.py) */
    input  wire [11:0]   s_axi_control_awaddr,
    input  wire          s_axi_control_awvalid,
    output wire          s_axi_control_awready,
    input  wire [31:0]   s_axi_control_wdata,
    input  wire [3:0]    s_axi_control_wstrb,
    input  wire          s_axi_control_wvalid,
    output wire          s_axi_control_wready,
    output wire [1:0]    s_axi_control_bresp,
    output wire          s_axi_control_bvalid,
    input  wire          s_axi_control_bready,
    input  wire [11:0]   s_axi_control_araddr,
    input  wire          s_axi_control_arvalid,
    output wire          s_axi_control_arready,
    output wire [31:0]   s_axi_control_rdata,
    output wire [1:0]    s_axi_control_rresp,
    output wire          s_axi_control_rvalid,
    input  wire          s_axi_control_rready,

    /* AXI4 master: local gradient (read only) */
    output wire [STRIPES*4-1:0] m_axi_lgrad0_arid,
    output wire [STRIPES*64-1:0] m_axi_lgrad0_araddr,
    output wire [STRIPES*8-1:0] m_axi_lgrad0_arlen,
    output wire [STRIPES*3-1:0] m_axi_lgrad0_arsize,
    output wire [STRIPES*2-1:0] m_axi_lgrad0_arburst,
    output wire [STRIPES-1:0] m_axi_lgrad0_arlock,
    output wire [STRIPES*4-1:0] m_axi_lgrad0_arcache,
    output wire [STRIPES*3-1:0] m_axi_lgrad0_arprot,
    output wire [STRIPES*4-1:0] m_axi_lgrad0_arqos,
    output wire [STRIPES-1:0] m_axi_lgrad0_arvalid,
    input  wire [STRIPES-1:0] m_axi_lgrad0_arready,
    input  wire [STRIPES*4-1:0] m_axi_lgrad0_rid,
    input  wire [STRIPES*512-1:0] m_axi_lgrad0_rdata,
    input  wire [STRIPES*2-1:0] m_axi_lgrad0_rresp,
    input  wire [STRIPES-1:0] m_axi_lgrad0_rlast,
    input  wire [STRIPES-1:0] m_axi_lgrad0_rvalid,
    output wire [STRIPES-1:0] m_axi_lgrad0_rready,

    /* AXI4 master: gathered parameters (write only) */
    output wire [STRIPES*4-1:0] m_axi_gather0_awid,
    output wire [STRIPES*64-1:0] m_axi_gather0_awaddr,
    output wire [STRIPES*8-1:0] m_axi_gather0_awlen,
    output wire [STRIPES*3-1:0] m_axi_gather0_awsize,
    output wire [STRIPES*2-1:0] m_axi_gather0_awburst,
    output wire [STRIPES-1:0] m_axi_gather0_awlock,
    output wire [STRIPES*4-1:0] m_axi_gather0_awcache,
    output wire [STRIPES*3-1:0] m_axi_gather0_awprot,
    output wire [STRIPES*4-1:0] m_axi_gather0_awqos,
    output wire [STRIPES-1:0] m_axi_gather0_awvalid,
    input  wire [STRIPES-1:0] m_axi_gather0_awready,
    output wire [STRIPES*512-1:0] m_axi_gather0_wdata,
    output wire [STRIPES*64-1:0] m_axi_gather0_wstrb,
    output wire [STRIPES-1:0] m_axi_gather0_wlast,
    output wire [STRIPES-1:0] m_axi_gather0_wvalid,
    input  wire [STRIPES-1:0] m_axi_gather0_wready,
    input  wire [STRIPES*4-1:0] m_axi_gather0_bid,
    input  wire [STRIPES*2-1:0] m_axi_gather0_bresp,
    input  wire [STRIPES-1:0] m_axi_gather0_bvalid,
    output wire [STRIPES-1:0] m_axi_gather0_bready,

    /* MAC receive (no TREADY; TUSER: FCS failed, on the last beat) */
    input  wire [511:0]  s_axis_mac0_tdata,
    input  wire [63:0]   s_axis_mac0_tkeep,
    input  wire          s_axis_mac0_tvalid,
    input  wire          s_axis_mac0_tlast,
    input  wire          s_axis_mac0_tuser,

    /* MAC transmit (whole frames: TVALID stays high from first to last beat) */
    output wire [511:0]  m_axis_mac0_tdata,
    output wire [63:0]   m_axis_mac0_tkeep,
    output wire          m_axis_mac0_tvalid,
    input  wire          m_axis_mac0_tready,
    output wire          m_axis_mac0_tlast,

    /* to the Adam kernel's gradient input: the owner's reduced chunk, TLAST on its last beat */
    output wire [511:0]  m_axis_grad0_tdata,
    output wire [63:0]   m_axis_grad0_tkeep,
    output wire          m_axis_grad0_tvalid,
    input  wire          m_axis_grad0_tready,
    output wire          m_axis_grad0_tlast,

    /* from the Adam kernel's parameter output: the owner's updated chunk, TLAST on its last beat */
    input  wire [511:0]  s_axis_param0_tdata,
    input  wire [63:0]   s_axis_param0_tkeep,
    input  wire          s_axis_param0_tvalid,
    output wire          s_axis_param0_tready,
    input  wire          s_axis_param0_tlast
);

    localparam integer N_SCALARS  = 25;
    localparam integer N_COUNTERS = 34;
    localparam integer N_EXTRA    = 2;    // net_regmap.ENTRY_REGS
    // the largest payload (beats) both the retransmit slot (header beat + payload) and the receive buffer hold
    localparam integer TX_MAX_BEATS = (1 << TX_BEATS_LOG2) - 1;
    localparam integer MAX_PAYLOAD_BEATS = (TX_MAX_BEATS < RX_FRAME_BEATS) ? TX_MAX_BEATS : RX_FRAME_BEATS;
    localparam [3:0] OP_ACK = 4'd3;
    localparam [3:0] OP_NAK = 4'd4;

    /* reset: active high, registered once per part (this top's own logic, the control block, the
     * receive side, the datapath, the transmit side: one net of some 2,000 loads otherwise), all
     * copies on the same clock; each block registers its own copies below that */
    reg rst_reg;
    always @(posedge ap_clk) rst_reg <= !ap_rst_n;
    wire rst = rst_reg;
    wire rst_ctl, rst_rx, rst_dp, rst_tp, rst_tx;
    onic_dup_reg rst_copy_ctl (.clk(ap_clk), .d(!ap_rst_n), .q(rst_ctl));
    onic_dup_reg rst_copy_rx (.clk(ap_clk), .d(!ap_rst_n), .q(rst_rx));
    onic_dup_reg rst_copy_dp (.clk(ap_clk), .d(!ap_rst_n), .q(rst_dp));
    // the two-phase blocks' own copy: with them on rst_dp that net had 1,001 loads (goal: 1,000)
    onic_dup_reg rst_copy_tp (.clk(ap_clk), .d(!ap_rst_n), .q(rst_tp));
    onic_dup_reg rst_copy_tx (.clk(ap_clk), .d(!ap_rst_n), .q(rst_tx));

    /* ---- control registers ---- */
    wire          ap_start;
    reg           ap_done_reg, ap_idle_reg;
    reg  [31:0]   status_reg;
    wire [64*(N_COUNTERS+N_EXTRA)-1:0] counters;
    wire [64*STRIPES-1:0] arg_lgrad0, arg_gather0;   // stripe k's pointer at [64k +: 64]
    wire [32*N_SCALARS-1:0] scalars;

    onic_net_control_s_axi #(
        .STRIPES(STRIPES),
        .ADDR_BITS(12),
        .N_COUNTERS(N_COUNTERS),
        .N_EXTRA(N_EXTRA),
        .N_SCALARS(N_SCALARS)
    ) control (
        .clk(ap_clk), .rst(rst_ctl),
        .s_axi_control_awaddr(s_axi_control_awaddr), .s_axi_control_awvalid(s_axi_control_awvalid),
        .s_axi_control_awready(s_axi_control_awready), .s_axi_control_wdata(s_axi_control_wdata),
        .s_axi_control_wstrb(s_axi_control_wstrb), .s_axi_control_wvalid(s_axi_control_wvalid),
        .s_axi_control_wready(s_axi_control_wready), .s_axi_control_bresp(s_axi_control_bresp),
        .s_axi_control_bvalid(s_axi_control_bvalid), .s_axi_control_bready(s_axi_control_bready),
        .s_axi_control_araddr(s_axi_control_araddr), .s_axi_control_arvalid(s_axi_control_arvalid),
        .s_axi_control_arready(s_axi_control_arready), .s_axi_control_rdata(s_axi_control_rdata),
        .s_axi_control_rresp(s_axi_control_rresp), .s_axi_control_rvalid(s_axi_control_rvalid),
        .s_axi_control_rready(s_axi_control_rready),
        .interrupt(interrupt), .ap_start(ap_start), .ap_done(ap_done_reg), .ap_ready(ap_done_reg),
        .ap_idle(ap_idle_reg), .status(status_reg), .counters(counters),
        .lgrad(arg_lgrad0), .gather(arg_gather0), .scalars(scalars)
    );

    /* the arguments, latched at ap_start (the host may write the next step's while one runs) */
    reg  [64*STRIPES-1:0] cfg_lgrad_reg, cfg_gather_reg;
    /* The stripes' addresses are latched a clock after the other arguments, on a registered copy of
     * the latch: on the one enable, four stripes' 512 address flops put it at 1,041 loads (yosys;
     * goal 1,000). Still the values of the ap_start: the control port takes at least three clocks
     * from that write to the next argument's, and the datapath reads them only after the step is
     * sized (about 100 clocks). */
    reg                   ptr_latch_reg;
    reg  [47:0] cfg_local_mac_reg, cfg_succ_mac_reg, cfg_pred_mac_reg;
    reg  [31:0] cfg_local_ip_reg, cfg_succ_ip_reg, cfg_pred_ip_reg;
    reg  [15:0] cfg_local_port_reg, cfg_comm_reg;
    reg  [31:0] cfg_rank_reg, cfg_world_reg, cfg_length_reg, cfg_window_reg, cfg_timeout_reg;
    reg  [31:0] cfg_world_m1_reg;
    reg  [31:0] cfg_credit_reg, cfg_payload_reg;
    reg  [31:0] cfg_step_reg;       // loaded in its own block below (cfg_step_nx)
    reg  [1:0]  cfg_phase_reg;      // 0 one-phase step, 1 phase one, 2 phase two, 3 phase two skipped
    reg  [63:0] cfg_sum_reg;        // the owner's sum in card memory (two-phase step)
    reg  [15:0] cfg_segment_reg;    // B: packets per round of each flow (0: hop-major)
    reg         p1_ok_reg;          // phase one of the latched step is done: phase two may start
    reg         p2_start_reg;       // pulse: phase two begins (no new step on the receive side)

    wire [31:0] arg [0:N_SCALARS-1];   // net_regmap.SCALARS order
    genvar g;
    generate
        for (g = 0; g < N_SCALARS; g = g + 1) begin : g_arg
            assign arg[g] = scalars[32 * g +: 32];
        end
    endgenerate

    /* ---- the step's state machine ---- */
    localparam [3:0] S_IDLE = 4'd0, S_CHECK = 4'd1, S_DIV_RANK = 4'd2, S_DIV_RS = 4'd3, S_DIV_AG = 4'd4,
                     S_TOTAL = 4'd5, S_HOLD = 4'd6, S_RUN = 4'd7, S_DONE = 4'd8, S_P2 = 4'd9, S_SEG = 4'd10;
    reg  [3:0]  state_reg;
    reg  [3:0]  hold_reg;           // clocks the configuration has been steady / since the start pulse
    reg         start_pulse_reg;
    reg  [31:0] chunk_elems_reg;    // S
    reg  [31:0] rs_per_hop_reg, ag_per_hop_reg, rs_total_reg, ag_total_reg;
    // round-major order: each flow's segment (B, at most its packets per hop) in packets, beats, elements
    reg  [31:0] rs_seg_reg, ag_seg_reg, rs_seg_beats_reg, ag_seg_beats_reg, rs_seg_elems_reg, ag_seg_elems_reg;
    reg         div_start_reg;
    reg  [31:0] div_num_reg, div_den_reg;
    wire        div_done;
    wire [31:0] div_quot;
    reg         ag_release_reg;

    onic_net_div div (
        .clk(ap_clk), .rst(rst), .start(div_start_reg), .num(div_num_reg), .den(div_den_reg),
        .done(div_done), .quot(div_quot)
    );

    wire [31:0] rs_chunk_bytes = (WIRE_BF16 != 0) ? {chunk_elems_reg[30:0], 1'b0} : {chunk_elems_reg[29:0], 2'b00};
    wire [31:0] ag_chunk_bytes = (PARAM_BF16 != 0) ? {chunk_elems_reg[30:0], 1'b0} : {chunk_elems_reg[29:0], 2'b00};
    wire [31:0] s_from_rank    = {div_quot[31:4] + {27'd0, div_quot[3:0] != 4'd0}, 4'd0};

    wire        config_ok = cfg_world_reg >= 32'd2 && cfg_world_reg <= 32'd255 && cfg_rank_reg < cfg_world_reg
                            && cfg_length_reg != 32'd0 && cfg_length_reg <= 32'hF000_0000
                            && cfg_payload_reg[5:0] == 6'd0 && cfg_payload_reg >= 32'd64
                            && {6'd0, cfg_payload_reg[31:6]} <= MAX_PAYLOAD_BEATS
                            && cfg_window_reg != 32'd0 && cfg_credit_reg != 32'd0 && cfg_phase_reg != 2'd3;
    // registered: its 32-bit compares are 7 LUT levels from the arguments to the divider's load otherwise
    // (S_CHECK reads it on its second clock, the arguments latched two clocks before)
    reg         config_ok_reg;
    always @(posedge ap_clk) config_ok_reg <= config_ok;

    wire [127:0] rs_state, ag_state;
    wire         dp_rs_done, dp_ag_done;
    wire [4:0]   dp_errors;
    wire [3:0]   tx_errors;
    wire         step_complete = dp_rs_done && dp_ag_done && rs_state[31:0] == rs_total_reg
                                 && ag_state[31:0] == ag_total_reg;
    // phase one: the sum in memory, every scalar entry known and the RS and scalar flows
    // acknowledged (the scalar flow runs on the AG sender: N - 1 packets)
    wire         tp_phase1_done;
    wire         tp_phase2_done;    // the stream's last beat taken: dp_ag_done implies it
    wire [2:0]   tp_errors;
    wire         phase1_complete = dp_rs_done && tp_phase1_done && rs_state[31:0] == rs_total_reg
                                   && ag_state[31:0] == cfg_world_m1_reg;

    always @(posedge ap_clk) begin
        if (rst) begin
            state_reg       <= S_IDLE;
            hold_reg        <= 4'd0;
            start_pulse_reg <= 1'b0;
            div_start_reg   <= 1'b0;
            ap_done_reg     <= 1'b0;
            ap_idle_reg     <= 1'b1;
            status_reg      <= 32'd0;
            ag_release_reg  <= 1'b0;
            p2_start_reg    <= 1'b0;
            p1_ok_reg       <= 1'b0;
            cfg_phase_reg   <= 2'd0;
            chunk_elems_reg <= 32'd16;
            rs_per_hop_reg  <= 32'd1;
            ag_per_hop_reg  <= 32'd1;
            rs_total_reg    <= 32'd1;
            ag_total_reg    <= 32'd1;
            div_num_reg     <= 32'd0;
            div_den_reg     <= 32'd1;
        end else begin
            start_pulse_reg <= 1'b0;
            p2_start_reg    <= 1'b0;
            div_start_reg   <= 1'b0;
            ap_done_reg     <= 1'b0;
            case (state_reg)
                S_IDLE: if (ap_start && !ap_done_reg && arg[20][1]) begin
                    // phase two of the latched step: nothing restarts but the AG sender (the
                    // scalar flow's until now). No other argument is read, but for a skipped step
                    // (phase 3) sum0: where the card's current parameters are, the all-gather's hop 0
                    status_reg  <= 32'd0;
                    ap_idle_reg <= 1'b0;
                    hold_reg    <= 4'd0;
                    if (p1_ok_reg) begin
                        cfg_phase_reg <= arg[20][1:0];
                        if (arg[20][0]) cfg_sum_reg <= {arg[22], arg[21]};
                        state_reg     <= S_P2;
                    end else begin
                        status_reg[4] <= 1'b1;
                        state_reg     <= S_DONE;
                    end
                    p1_ok_reg <= 1'b0;
                end else if (ap_start && !ap_done_reg) begin   // ap_start falls the clock after ap_ready
                    cfg_phase_reg      <= arg[20][1:0];
                    cfg_sum_reg        <= {arg[22], arg[21]};
                    p1_ok_reg          <= 1'b0;
                    cfg_local_mac_reg  <= {arg[1][15:0], arg[0]};
                    cfg_local_ip_reg   <= arg[2];
                    cfg_local_port_reg <= arg[3][15:0];
                    cfg_succ_mac_reg   <= {arg[5][15:0], arg[4]};
                    cfg_succ_ip_reg    <= arg[6];
                    cfg_pred_mac_reg   <= {arg[9][15:0], arg[8]};
                    cfg_pred_ip_reg    <= arg[10];
                    cfg_comm_reg       <= arg[11][15:0];
                    cfg_rank_reg       <= arg[12];
                    cfg_world_reg      <= arg[13];
                    cfg_world_m1_reg   <= arg[13] - 32'd1;  // N - 1 for phase1_complete (no subtraction there)
                    cfg_length_reg     <= arg[14];
                    cfg_window_reg     <= arg[15];
                    cfg_timeout_reg    <= arg[16];
                    cfg_credit_reg     <= arg[17];
                    cfg_payload_reg    <= arg[18];
                    cfg_segment_reg    <= arg[24][15:0];
                    status_reg         <= 32'd0;
                    ap_idle_reg        <= 1'b0;
                    ag_release_reg     <= 1'b0;
                    hold_reg           <= 4'd0;
                    state_reg          <= S_CHECK;
                end
                S_CHECK: if (hold_reg == 4'd0) begin
                    hold_reg <= 4'd1;
                end else begin
                    hold_reg <= 4'd0;
                    if (!config_ok_reg) begin
                        status_reg[4] <= 1'b1;
                        state_reg     <= S_DONE;
                    end else begin
                        // ceil(L / N)
                        div_num_reg   <= cfg_length_reg + cfg_world_reg - 32'd1;
                        div_den_reg   <= cfg_world_reg;
                        div_start_reg <= 1'b1;
                        state_reg     <= S_DIV_RANK;
                    end
                end
                S_DIV_RANK: if (div_done) begin
                    if (div_quot > 32'h000F_FFF0) begin   // the header's 16-bit length of a chunk's packets
                        status_reg[4] <= 1'b1;
                        state_reg     <= S_DONE;
                    end else begin
                        chunk_elems_reg <= s_from_rank;
                        state_reg       <= S_DIV_RS;
                    end
                end
                S_DIV_RS: begin
                    if (!div_start_reg && !div_done && hold_reg == 4'd0) begin
                        div_num_reg   <= rs_chunk_bytes + cfg_payload_reg - 32'd1;
                        div_den_reg   <= cfg_payload_reg;
                        div_start_reg <= 1'b1;
                        hold_reg      <= 4'd1;
                    end
                    if (div_done) begin
                        rs_per_hop_reg <= div_quot;
                        div_num_reg    <= ag_chunk_bytes + cfg_payload_reg - 32'd1;
                        div_start_reg  <= 1'b1;
                        hold_reg       <= 4'd0;
                        state_reg      <= S_DIV_AG;
                    end
                end
                S_DIV_AG: if (div_done) begin
                    ag_per_hop_reg <= div_quot;
                    state_reg      <= S_TOTAL;
                end
                S_TOTAL: begin
                    rs_total_reg <= rs_per_hop_reg * (cfg_world_reg - 32'd1);
                    ag_total_reg <= ag_per_hop_reg * (cfg_world_reg - 32'd1);
                    rs_seg_reg   <= (cfg_segment_reg == 16'd0 || {16'd0, cfg_segment_reg} >= rs_per_hop_reg)
                                    ? rs_per_hop_reg : {16'd0, cfg_segment_reg};
                    ag_seg_reg   <= (cfg_segment_reg == 16'd0 || {16'd0, cfg_segment_reg} >= ag_per_hop_reg)
                                    ? ag_per_hop_reg : {16'd0, cfg_segment_reg};
                    hold_reg     <= 4'd0;
                    state_reg    <= S_SEG;
                end
                S_SEG: begin
                    // more than one round needs the two-phase step: in one phase the Adam kernel's
                    // output would wait for ag_release while its input waits for later rounds
                    if (cfg_phase_reg == 2'd0 && (rs_seg_reg != rs_per_hop_reg || ag_seg_reg != ag_per_hop_reg)) begin
                        status_reg[4] <= 1'b1;
                        state_reg     <= S_DONE;
                    end else begin
                        rs_seg_beats_reg <= rs_seg_reg * {16'd0, cfg_payload_reg[21:6]};
                        ag_seg_beats_reg <= ag_seg_reg * {16'd0, cfg_payload_reg[21:6]};
                        state_reg        <= S_HOLD;
                    end
                end
                S_HOLD: begin
                    hold_reg <= hold_reg + 4'd1;
                    rs_seg_elems_reg <= (WIRE_BF16 != 0) ? {rs_seg_beats_reg[26:0], 5'd0} : {rs_seg_beats_reg[27:0], 4'd0};
                    ag_seg_elems_reg <= (PARAM_BF16 != 0) ? {ag_seg_beats_reg[26:0], 5'd0} : {ag_seg_beats_reg[27:0], 4'd0};
                    if (hold_reg == 4'd8) begin
                        start_pulse_reg <= 1'b1;
                        hold_reg        <= 4'd0;
                        state_reg       <= S_RUN;
                    end
                end
                S_RUN: begin
                    // the blocks' step state settles a few clocks after the pulse: done and
                    // ag_release only count from then on
                    if (hold_reg != 4'd15) hold_reg <= hold_reg + 4'd1;
                    if (hold_reg == 4'd15) begin
                        ag_release_reg <= rs_state[31:0] == rs_total_reg;
                        if (cfg_phase_reg == 2'd1 ? phase1_complete : step_complete) state_reg <= S_DONE;
                    end
                end
                S_P2: begin
                    p2_start_reg <= 1'b1;
                    state_reg    <= S_RUN;
                end
                S_DONE: begin
                    p1_ok_reg   <= cfg_phase_reg == 2'd1 && !status_reg[4];
                    ap_done_reg <= 1'b1;
                    ap_idle_reg <= 1'b1;
                    hold_reg    <= 4'd0;
                    state_reg   <= S_IDLE;
                end
                default: state_reg <= S_IDLE;
            endcase
            if (state_reg == S_RUN || state_reg == S_DONE) begin
                status_reg[0] <= status_reg[0] | dp_errors[3] | tp_errors[1];
                status_reg[1] <= status_reg[1] | dp_errors[4] | tp_errors[2];
                status_reg[2] <= status_reg[2] | (|dp_errors[2:0]) | (|tx_errors) | tp_errors[0];
            end
        end
    end

    /* ---- receive side ---- */
    wire         hdr_valid, hdr_ready;
    wire [47:0]  hdr_src_mac;
    wire [31:0]  hdr_src_ip;
    wire [15:0]  hdr_src_port;
    wire [3:0]   hdr_version, hdr_opcode;
    wire [1:0]   hdr_dtype;
    wire [5:0]   hdr_flags;
    wire [15:0]  hdr_comm, hdr_chunk, hdr_length;
    wire [7:0]   hdr_src, hdr_hop;
    wire [31:0]  hdr_step, hdr_seq, hdr_offset;
    wire [511:0] pay_tdata;
    wire [63:0]  pay_tkeep;
    wire         pay_tlast, pay_tvalid, pay_tready;
    wire         evt_valid, evt_ready, evt_nak;
    wire [1:0]   evt_flow;
    wire [31:0]  evt_step, evt_seq, evt_credit;
    wire [31:0]  rx_cnt [0:21];     // frames_in, bytes_in, frames_accepted, then the 19 drop causes

    /* ACK coalescing (onic_net_rx_seq): frames per cumulative ACK, K = min(ACK_EVERY, a quarter of
     * min(window, credit), at least 1), so the senders of the ring (the same window and credit)
     * have 3 K frames of room while an ACK is held; registered from the latched arguments, steady
     * long before step_start. */
    wire [31:0] co_lim   = cfg_window_reg < cfg_credit_reg ? cfg_window_reg : cfg_credit_reg;
    wire [31:0] co_q     = co_lim >> 2;
    reg  [7:0]  ack_every_reg;
    wire [31:0] ctl_credit;          // the credit of the reply sent (below)
    initial begin
        if (ACK_EVERY < 1 || ACK_EVERY > 255 || ACK_HOLD < 2 || ACK_HOLD > 65535) begin
            $error("ACK_EVERY must be 1..255, ACK_HOLD 2..65535 (instance %m)");
            $finish;
        end
        if ((1 << RX_PAYLOAD_DEPTH_LOG2) < (2 * (1 << RX_SLOT_LOG2) + 1) * RX_FRAME_BEATS) begin
            $error("2^RX_PAYLOAD_DEPTH_LOG2 must hold 2 x 2^RX_SLOT_LOG2 + 1 frames of RX_FRAME_BEATS (instance %m)");
            $finish;
        end
    end
    always @(posedge ap_clk) begin
        ack_every_reg <= co_q == 32'd0 ? 8'd1 : co_q < ACK_EVERY ? co_q[7:0] : ACK_EVERY[7:0];
    end

    /* the step id: loaded with the other arguments when a step starts (the S_IDLE branch above that is
     * not phase two), here on its own so that its next value, cfg_step_nx, is a wire: onic_net_rx_seq
     * compares its step registers' next values with it and registers the result (evt_now), so the
     * reply decision below (zero_reg, last_seq_reg) has no 32-bit compare behind the reply state */
    wire        step_load   = !rst && state_reg == S_IDLE && ap_start && !ap_done_reg && !arg[20][1];
    wire [31:0] cfg_step_nx = step_load ? arg[19] : cfg_step_reg;
    always @(posedge ap_clk) cfg_step_reg <= cfg_step_nx;

    // the stripes' addresses, a clock after step_load (see cfg_lgrad_reg)
    always @(posedge ap_clk) begin
        ptr_latch_reg <= step_load;
        if (ptr_latch_reg) begin
            cfg_lgrad_reg  <= arg_lgrad0;
            cfg_gather_reg <= arg_gather0;
        end
    end

    wire         evt_now;   // evt_step == cfg_step_reg (registered compares in onic_net_rx_seq)
    // N - 2, the hop of each flow's final packet (the receive side repeats that packet's ACK)
    reg  [7:0]   last_hop_reg;
    always @(posedge ap_clk) last_hop_reg <= cfg_world_m1_reg[7:0] - 8'd1;

    onic_net_rx #(
        .PAYLOAD_DEPTH_LOG2(RX_PAYLOAD_DEPTH_LOG2),
        .SLOT_LOG2(RX_SLOT_LOG2),
        .FRAME_BEATS(RX_FRAME_BEATS),
        .ACK_HOLD(ACK_HOLD)
    ) rx (
        .clk(ap_clk), .rst(rst_rx),
        .local_mac(cfg_local_mac_reg), .local_ip(cfg_local_ip_reg), .local_comm(cfg_comm_reg),
        .step_start(start_pulse_reg), .step_id(cfg_step_reg), .step_next(cfg_step_nx),
        .cfg_ack_every(ack_every_reg),
        .ack_credit(ctl_credit),
        .cfg_last_hop(last_hop_reg),
        .s_axis_tdata(s_axis_mac0_tdata), .s_axis_tkeep(s_axis_mac0_tkeep), .s_axis_tvalid(s_axis_mac0_tvalid),
        .s_axis_tlast(s_axis_mac0_tlast), .s_axis_tuser(s_axis_mac0_tuser),
        .m_axis_hdr_tvalid(hdr_valid), .m_axis_hdr_tready(hdr_ready),
        .m_axis_hdr_src_mac(hdr_src_mac), .m_axis_hdr_src_ip(hdr_src_ip), .m_axis_hdr_src_port(hdr_src_port),
        .m_axis_hdr_version(hdr_version), .m_axis_hdr_opcode(hdr_opcode), .m_axis_hdr_dtype(hdr_dtype),
        .m_axis_hdr_flags(hdr_flags), .m_axis_hdr_comm(hdr_comm), .m_axis_hdr_src(hdr_src),
        .m_axis_hdr_hop(hdr_hop), .m_axis_hdr_chunk(hdr_chunk), .m_axis_hdr_step(hdr_step),
        .m_axis_hdr_seq(hdr_seq), .m_axis_hdr_offset(hdr_offset), .m_axis_hdr_length(hdr_length),
        .m_axis_payload_tdata(pay_tdata), .m_axis_payload_tkeep(pay_tkeep), .m_axis_payload_tlast(pay_tlast),
        .m_axis_payload_tvalid(pay_tvalid), .m_axis_payload_tready(pay_tready),
        .evt_valid(evt_valid), .evt_ready(evt_ready), .evt_nak(evt_nak), .evt_flow(evt_flow),
        .evt_step(evt_step), .evt_seq(evt_seq), .evt_credit(evt_credit), .evt_now(evt_now),
        .frames_in(rx_cnt[0]), .bytes_in(rx_cnt[1]), .frames_accepted(rx_cnt[2]),
        .dropped_truncated(rx_cnt[3]), .dropped_fcs(rx_cnt[4]), .dropped_mac(rx_cnt[5]),
        .dropped_ethertype(rx_cnt[6]), .dropped_ip_header(rx_cnt[7]), .dropped_ip_checksum(rx_cnt[8]),
        .dropped_ip_address(rx_cnt[9]), .dropped_protocol(rx_cnt[10]), .dropped_port(rx_cnt[11]),
        .dropped_version(rx_cnt[12]), .dropped_opcode(rx_cnt[13]), .dropped_dtype(rx_cnt[14]),
        .dropped_udp_checksum(rx_cnt[15]), .dropped_comm(rx_cnt[16]), .dropped_step(rx_cnt[17]),
        .dropped_previous_step(rx_cnt[18]), .dropped_duplicate(rx_cnt[19]), .dropped_gap(rx_cnt[20]),
        .dropped_overflow(rx_cnt[21])
    );

    /* header routing: ACK/NAKs to their flow's sender at once (a scalar flow's: dropped); data
     * headers into a queue of this top's own (2^RX_SLOT_LOG2, as many as the receive buffer holds)
     * in front of the datapath. Without it an ACK waits behind data headers the datapath cannot
     * take yet: AG packets to forward wait for the own chunk, which waits for ag_release, which
     * waits for that very ACK (the RS sender's last) - a deadlock. The credit advertised counts
     * the queued headers as taken (their payload is still in the receive buffer), so the frames
     * of peers within their credits fit the buffer (twice the slots and one: RX_PAYLOAD_DEPTH_LOG2). The queue holds as many headers as the receive
     * buffer holds frames (a data frame has at least one payload beat there until it is consumed),
     * so a data header at the head of the receive side's FIFO can always move on and no ACK waits
     * behind one even if a peer ran past the credit: with a queue of only the header slots, a hang
     * at 1 % loss had an AG header in front of the re-ACKs that would end the RS flow (README). */
    localparam integer DQ_WIDTH = 4 + 6 + 8 + 16 + 32 + 32 + 16;
    localparam integer DQ_LOG2 = RX_PAYLOAD_DEPTH_LOG2 > RX_SLOT_LOG2 ? RX_PAYLOAD_DEPTH_LOG2 : RX_SLOT_LOG2;
    wire hdr_reply = hdr_opcode == OP_ACK || hdr_opcode == OP_NAK;
    wire [1:0] hdr_flow = hdr_flags[2:1];
    wire rs_ack_ready, ag_ack_ready, dp_hdr_ready, dq_s_ready, dq_m_valid;
    wire [DQ_WIDTH-1:0] dq_m_data;
    wire [DQ_LOG2:0] dq_count;
    wire rs_ack_valid = hdr_valid && hdr_reply && hdr_flow == 2'd1;
    // the AG sender answers to the scalar flow's replies in phase one, to the AG flow's after it
    wire ag_flow_now  = cfg_phase_reg == 2'd1 ? hdr_flow == 2'd3 : hdr_flow == 2'd2;
    wire ag_ack_valid = hdr_valid && hdr_reply && ag_flow_now;
    assign hdr_ready = !hdr_reply ? dq_s_ready
                     : hdr_flow == 2'd1 ? rs_ack_ready
                     : ag_flow_now ? ag_ack_ready
                     : 1'b1;

    onic_fifo #(
        .WIDTH(DQ_WIDTH),
        .DEPTH_LOG2(DQ_LOG2)
    ) data_hdr_queue (
        .clk(ap_clk), .rst(rst), .clear(1'b0),
        .s_data({hdr_opcode, hdr_flags, hdr_hop, hdr_chunk, hdr_seq, hdr_offset, hdr_length}),
        .s_valid(hdr_valid && !hdr_reply), .s_ready(dq_s_ready),
        .m_data(dq_m_data), .m_valid(dq_m_valid), .m_ready(dq_m_ready), .count(dq_count)
    );

    wire [3:0]  dq_opcode = dq_m_data[113:110];
    wire [5:0]  dq_flags  = dq_m_data[109:104];
    wire [7:0]  dq_hop    = dq_m_data[103:96];
    wire [15:0] dq_chunk  = dq_m_data[95:80];
    wire [31:0] dq_seq    = dq_m_data[79:48];
    wire [31:0] dq_offset = dq_m_data[47:16];
    wire [15:0] dq_length = dq_m_data[15:0];

    /* scalar data headers (two-phase step) to the scalar exchange, the rest to the datapath, in
     * queue order; the payload beats follow their headers: a header goes to one side only while
     * the other has no payload outstanding (headers taken, TLAST not yet) */
    wire        dq_to_sc = dq_opcode == 4'd5 && cfg_phase_reg != 2'd0;
    reg  [15:0] out_dp_reg, out_sc_reg;
    // out_*_reg != 0 kept in registers of their own (the 16-bit OR was two LUT levels on the payload path)
    reg         out_dp_nz_reg, out_sc_nz_reg;
    wire        sc_hdr_ready, sc_pay_tready, dp_pay_tready;
    wire        dp_hdr_valid = dq_m_valid && !dq_to_sc && !out_sc_nz_reg;
    wire        sc_hdr_valid = dq_m_valid && dq_to_sc && !out_dp_nz_reg;
    wire        dq_m_ready   = dq_to_sc ? sc_hdr_ready && !out_dp_nz_reg : dp_hdr_ready && !out_sc_nz_reg;
    wire        pay_to_sc    = out_sc_nz_reg;
    assign pay_tready = pay_to_sc ? sc_pay_tready : dp_pay_tready;
    wire        pay_end      = pay_tvalid && pay_tready && pay_tlast;
    wire        dp_inc = dp_hdr_valid && dp_hdr_ready, dp_dec = pay_end && !pay_to_sc;
    wire        sc_inc = sc_hdr_valid && sc_hdr_ready, sc_dec = pay_end && pay_to_sc;
    always @(posedge ap_clk) begin
        if (rst) begin
            out_dp_reg    <= 16'd0;
            out_sc_reg    <= 16'd0;
            out_dp_nz_reg <= 1'b0;
            out_sc_nz_reg <= 1'b0;
        end else begin
            out_dp_reg <= out_dp_reg + {15'd0, dp_inc} - {15'd0, dp_dec};
            out_sc_reg <= out_sc_reg + {15'd0, sc_inc} - {15'd0, sc_dec};
            // non-zero after the clock: one more, or one fewer from a count other than 1, or as before
            out_dp_nz_reg <= dp_inc && !dp_dec ? 1'b1 : dp_dec && !dp_inc ? out_dp_reg != 16'd1 : out_dp_nz_reg;
            out_sc_nz_reg <= sc_inc && !sc_dec ? 1'b1 : sc_dec && !sc_inc ? out_sc_reg != 16'd1 : out_sc_nz_reg;
        end
    end

    // free slots = the receive side's free header slots less the headers queued here, registered (the
    // header counts are a carry chain and a compare away from the reply state otherwise): the value of the
    // clock before, less one, since the slots in use grow by at most one frame a clock; so never more
    // than the slots free now (a peer within its credit never takes more), at most two fewer.
    localparam integer CW = RX_SLOT_LOG2 + 1;
    localparam integer UW = DQ_LOG2 + 2;   // DQ_LOG2 >= RX_SLOT_LOG2: both counts fit
    wire [UW-1:0] rx_free    = {{(UW-CW){1'b0}}, evt_credit[CW-1:0]};
    wire [UW-1:0] dq_used    = {1'b0, dq_count} + {{(UW-1){1'b0}}, 1'b1};
    /* verilator lint_off UNUSEDSIGNAL */
    wire [UW-1:0] free_left  = rx_free - dq_used;   // below rx_free when taken: its low CW bits hold it
    /* verilator lint_on UNUSEDSIGNAL */
    reg  [CW-1:0] credit_reg;
    always @(posedge ap_clk) begin
        if (rst) begin
            credit_reg <= {CW{1'b0}};
        end else begin
            credit_reg <= rx_free > dq_used ? free_left[CW-1:0] : {CW{1'b0}};
        end
    end
    assign        ctl_credit  = {{(32-CW){1'b0}}, credit_reg};
    wire          credit_none = credit_reg == {CW{1'b0}};

    /* replies: the receive side's (evt) first; then a credit refresh: a flow whose last reply in
     * this step advertised no free slot gets its ACK again once a slot is free (the receiver's
     * `release` in hls.net.reliability), else its sender, with nothing in flight, waits forever.
     * The scalar flow of phase one too: a scalar frame taken into the last free slot leaves the
     * predecessor's next one (the entry it forwards) waiting for such a reply. A refresh goes only
     * to a flow of the phase running (scalar in phase one, AG otherwise), so one pending when
     * phase two begins is never sent. A refresh can be lost like any frame, and its sender then has
     * nothing in flight to time out: so a refresh no frame of its flow has answered within one
     * retransmission timeout (`timeout`) goes again, until the flow is complete (its last reply
     * acknowledged the flow's every packet). */
    reg  [2:0]  zero_reg;            // RS, AG, scalar: the last reply carried credit 0
    reg  [31:0] last_seq_reg [0:2];
    reg  [2:0]  rf_wait_reg;         // a refresh went and no frame of its flow came since
    reg  [2:0]  rf_open_reg;         // the flow's last reply did not acknowledge all of it
    reg  [31:0] rf_timer_reg;        // clocks since the last refresh went
    reg         rf_due_reg;          // rf_timer_reg reached the timeout
    wire        p1_now    = cfg_phase_reg == 2'd1;
    wire        ref_rs    = zero_reg[0] && !credit_none;
    wire        ref_ag    = zero_reg[1] && !p1_now && !credit_none;
    wire        ref_sc    = zero_reg[2] && p1_now && !credit_none;
    // only while a step runs, settled: up to the clock of the step's start pulse the registers still
    // hold the last step's flows, and a refresh would carry them under the new step's number
    wire        ref_valid = !evt_valid && state_reg == S_RUN && hold_reg == 4'd15 && (ref_rs || ref_ag || ref_sc);
    wire        ctl_valid = evt_valid || ref_valid;
    wire        ctl_ready;
    wire        ctl_nak   = evt_valid && evt_nak;
    wire [1:0]  ctl_flow  = evt_valid ? evt_flow : ref_rs ? 2'd1 : ref_sc ? 2'd3 : 2'd2;
    wire [31:0] ctl_step  = evt_valid ? evt_step : cfg_step_reg;
    wire [31:0] ctl_seq   = evt_valid ? evt_seq : ref_rs ? last_seq_reg[0] : ref_sc ? last_seq_reg[2]
                                                : last_seq_reg[1];
    wire        ctl_take  = ctl_valid && ctl_ready;
    assign evt_ready = ctl_ready;

    always @(posedge ap_clk) begin
        rf_open_reg <= {last_seq_reg[2] != cfg_world_m1_reg, last_seq_reg[1] != ag_total_reg,
                        last_seq_reg[0] != rs_total_reg};
        // due falls with the restart: a due from before a refresh must not re-arm the flow just refreshed
        if (rst || start_pulse_reg || (ctl_take && !evt_valid)) begin
            rf_timer_reg <= 32'd0;
            rf_due_reg   <= 1'b0;
        end else begin
            if (rf_timer_reg != 32'hFFFF_FFFF) rf_timer_reg <= rf_timer_reg + 32'd1;
            rf_due_reg <= rf_timer_reg >= cfg_timeout_reg;
        end
    end

    always @(posedge ap_clk) begin
        if (rst || start_pulse_reg) begin
            zero_reg        <= 3'b000;
            rf_wait_reg     <= 3'b000;
            last_seq_reg[0] <= 32'd0;
            last_seq_reg[1] <= 32'd0;
            last_seq_reg[2] <= 32'd0;
        end else if (ctl_take) begin
            // evt_now: evt_step == cfg_step_reg, from registers (no compare on this path). Each flow's
            // register written on its own (no computed index: yosys builds `zero_reg[evt_flow == 2'd2]`
            // as a 32-bit $sub / $shift, a carry chain behind the reply state)
            if (evt_valid) begin
                if (evt_now && evt_flow == 2'd1) begin
                    last_seq_reg[0] <= evt_seq;
                    zero_reg[0]     <= credit_none;
                    rf_wait_reg[0]  <= 1'b0;
                end
                if (evt_now && evt_flow == 2'd2) begin
                    last_seq_reg[1] <= evt_seq;
                    zero_reg[1]     <= credit_none;
                    rf_wait_reg[1]  <= 1'b0;
                end
                if (evt_now && evt_flow == 2'd3) begin
                    last_seq_reg[2] <= evt_seq;
                    zero_reg[2]     <= credit_none;
                    rf_wait_reg[2]  <= 1'b0;
                end
            end else if (ref_rs) begin
                zero_reg[0]    <= 1'b0;
                rf_wait_reg[0] <= 1'b1;
            end else if (ref_sc) begin
                zero_reg[2]    <= 1'b0;
                rf_wait_reg[2] <= 1'b1;
            end else begin
                zero_reg[1]    <= 1'b0;
                rf_wait_reg[1] <= 1'b1;
            end
        end else if (rf_due_reg) begin
            // unanswered for a timeout: the refresh goes again (the timer restarts when it does)
            zero_reg    <= zero_reg | (rf_wait_reg & rf_open_reg);
            rf_wait_reg <= rf_wait_reg & ~rf_open_reg;
        end
    end

    /* ---- datapath ---- */
    /* Card memory and the Adam kernel are not reset with this kernel: every VALID and READY of
     * the m_axi ports and the Adam kernel's streams is low from the clock ap_rst_n is low until
     * the registered reset has reset the blocks (as the Adam kernel's out_en), so no handshake
     * happens half-way through a reset. Responses still owed for bursts from before it carry the
     * old reset epoch in their IDs (onic_axi_rd / onic_axi_wr) and are taken and dropped. The
     * MAC's transmit stream is not gated: onic_net_tx_arb finishes a frame part-sent. */
    wire out_en = ap_rst_n && !rst_reg;
    wire dp_grad_tvalid, dp_param_tready;
    wire [511:0] dp_grad_tdata, tp_grad_tdata;
    wire [63:0]  dp_grad_tkeep, tp_grad_tkeep;
    wire         dp_grad_tlast, tp_grad_tlast, tp_grad_tvalid, tp_sum_tready;
    wire         tp_arvalid, tp_rready, tp_awvalid, tp_wvalid, tp_bready;
    // two-phase step: phase one the owner's sum to onic_net_twophase (card memory through gather0),
    // phase two read back through lgrad0 as the Adam kernel's stream; gather0 and lgrad0 are idle
    // on the datapath's side meanwhile (no AG chunk is written before the own update, every local
    // gradient beat is read before the own sum is complete)
    // phase two of a skipped step (3): no Adam kernel; lgrad0 reads the card's current parameters
    // (the Adam kernel's last output, at sum0) into the all-gather's hop 0 instead of its stream
    wire sel_p1 = cfg_phase_reg == 2'd1;
    wire sel_p2 = cfg_phase_reg == 2'd2;
    wire sel_p3 = cfg_phase_reg == 2'd3;
    wire rd_tp  = cfg_phase_reg[1];     // phases 2 and 3: lgrad0's read channels are onic_net_twophase's
    wire dp_grad_tready = out_en && (sel_p1 ? tp_sum_tready : m_axis_grad0_tready && !rd_tp);
    assign m_axis_grad0_tvalid  = out_en && (sel_p2 ? tp_grad_tvalid : dp_grad_tvalid && !sel_p1 && !sel_p3);
    assign m_axis_grad0_tdata   = sel_p2 ? tp_grad_tdata : dp_grad_tdata;
    assign m_axis_grad0_tkeep   = sel_p2 ? tp_grad_tkeep : dp_grad_tkeep;
    assign m_axis_grad0_tlast   = sel_p2 ? tp_grad_tlast : dp_grad_tlast;
    assign s_axis_param0_tready = out_en && dp_param_tready && !sel_p3;
    // stripe 0 is shared with onic_net_twophase (the sum, phases 1-3); stripes 1 .. STRIPES - 1 are
    // the datapath's alone
    localparam [STRIPES-1:0] STRIPE0 = 1;
    wire [STRIPES-1:0] dp_arvalid, dp_rready, dp_awvalid, dp_wvalid, dp_bready;
    wire [STRIPES-1:0] tp_rd0 = STRIPE0 & {STRIPES{rd_tp}};    // stripe 0's reads are the two-phase block's
    wire [STRIPES-1:0] tp_wr0 = STRIPE0 & {STRIPES{sel_p1}};   // stripe 0's writes are the two-phase block's
    assign m_axi_lgrad0_arvalid  = {STRIPES{out_en}} & ((dp_arvalid & ~tp_rd0) | (tp_rd0 & {STRIPES{tp_arvalid}}));
    assign m_axi_lgrad0_rready   = {STRIPES{out_en}} & ((dp_rready & ~tp_rd0) | (tp_rd0 & {STRIPES{tp_rready}}));
    assign m_axi_gather0_awvalid = {STRIPES{out_en}} & ((dp_awvalid & ~tp_wr0) | (tp_wr0 & {STRIPES{tp_awvalid}}));
    assign m_axi_gather0_wvalid  = {STRIPES{out_en}} & ((dp_wvalid & ~tp_wr0) | (tp_wr0 & {STRIPES{tp_wvalid}}));
    assign m_axi_gather0_bready  = {STRIPES{out_en}} & ((dp_bready & ~tp_wr0) | (tp_wr0 & {STRIPES{tp_bready}}));
    wire [STRIPES*4-1:0]   dp_arid, dp_awid;
    wire [STRIPES*64-1:0]  dp_araddr, dp_awaddr;
    wire [STRIPES*8-1:0]   dp_arlen, dp_awlen;
    wire [STRIPES*3-1:0]   dp_arsize, dp_awsize, dp_arprot, dp_awprot;
    wire [STRIPES*2-1:0]   dp_arburst, dp_awburst;
    wire [STRIPES-1:0]     dp_arlock, dp_awlock, dp_wlast;
    wire [STRIPES*4-1:0]   dp_arcache, dp_awcache, dp_arqos, dp_awqos;
    wire [STRIPES*512-1:0] dp_wdata;
    wire [STRIPES*64-1:0]  dp_wstrb;
    wire [0:0]   tp_arid, tp_awid;
    wire [63:0]  tp_araddr, tp_awaddr;
    wire [7:0]   tp_arlen, tp_awlen;
    wire [2:0]   tp_arsize, tp_awsize, tp_arprot, tp_awprot;
    wire [1:0]   tp_arburst, tp_awburst;
    wire         tp_arlock, tp_awlock, tp_wlast;
    wire [3:0]   tp_arcache, tp_awcache, tp_arqos, tp_awqos;
    wire [511:0] tp_wdata;
    wire [63:0]  tp_wstrb;
    assign m_axi_lgrad0_arid[3:0]     = rd_tp  ? {3'd0, tp_arid} : dp_arid[3:0];
    assign m_axi_lgrad0_araddr[63:0]  = rd_tp  ? tp_araddr : dp_araddr[63:0];
    assign m_axi_lgrad0_arlen[7:0]    = rd_tp  ? tp_arlen : dp_arlen[7:0];
    assign m_axi_lgrad0_arsize[2:0]   = rd_tp  ? tp_arsize : dp_arsize[2:0];
    assign m_axi_lgrad0_arburst[1:0]  = rd_tp  ? tp_arburst : dp_arburst[1:0];
    assign m_axi_lgrad0_arlock[0]     = rd_tp  ? tp_arlock : dp_arlock[0];
    assign m_axi_lgrad0_arcache[3:0]  = rd_tp  ? tp_arcache : dp_arcache[3:0];
    assign m_axi_lgrad0_arprot[2:0]   = rd_tp  ? tp_arprot : dp_arprot[2:0];
    assign m_axi_lgrad0_arqos[3:0]    = rd_tp  ? tp_arqos : dp_arqos[3:0];
    assign m_axi_gather0_awid[3:0]    = sel_p1 ? {3'd0, tp_awid} : dp_awid[3:0];
    assign m_axi_gather0_awaddr[63:0] = sel_p1 ? tp_awaddr : dp_awaddr[63:0];
    assign m_axi_gather0_awlen[7:0]   = sel_p1 ? tp_awlen : dp_awlen[7:0];
    assign m_axi_gather0_awsize[2:0]  = sel_p1 ? tp_awsize : dp_awsize[2:0];
    assign m_axi_gather0_awburst[1:0] = sel_p1 ? tp_awburst : dp_awburst[1:0];
    assign m_axi_gather0_awlock[0]    = sel_p1 ? tp_awlock : dp_awlock[0];
    assign m_axi_gather0_awcache[3:0] = sel_p1 ? tp_awcache : dp_awcache[3:0];
    assign m_axi_gather0_awprot[2:0]  = sel_p1 ? tp_awprot : dp_awprot[2:0];
    assign m_axi_gather0_awqos[3:0]   = sel_p1 ? tp_awqos : dp_awqos[3:0];
    assign m_axi_gather0_wdata[511:0] = sel_p1 ? tp_wdata : dp_wdata[511:0];
    assign m_axi_gather0_wstrb[63:0]  = sel_p1 ? tp_wstrb : dp_wstrb[63:0];
    assign m_axi_gather0_wlast[0]     = sel_p1 ? tp_wlast : dp_wlast[0];
    generate
        if (STRIPES > 1) begin : g_stripes
            assign m_axi_lgrad0_arid[STRIPES*4-1:4]      = dp_arid[STRIPES*4-1:4];
            assign m_axi_lgrad0_araddr[STRIPES*64-1:64]  = dp_araddr[STRIPES*64-1:64];
            assign m_axi_lgrad0_arlen[STRIPES*8-1:8]     = dp_arlen[STRIPES*8-1:8];
            assign m_axi_lgrad0_arsize[STRIPES*3-1:3]    = dp_arsize[STRIPES*3-1:3];
            assign m_axi_lgrad0_arburst[STRIPES*2-1:2]   = dp_arburst[STRIPES*2-1:2];
            assign m_axi_lgrad0_arlock[STRIPES-1:1]      = dp_arlock[STRIPES-1:1];
            assign m_axi_lgrad0_arcache[STRIPES*4-1:4]   = dp_arcache[STRIPES*4-1:4];
            assign m_axi_lgrad0_arprot[STRIPES*3-1:3]    = dp_arprot[STRIPES*3-1:3];
            assign m_axi_lgrad0_arqos[STRIPES*4-1:4]     = dp_arqos[STRIPES*4-1:4];
            assign m_axi_gather0_awid[STRIPES*4-1:4]     = dp_awid[STRIPES*4-1:4];
            assign m_axi_gather0_awaddr[STRIPES*64-1:64] = dp_awaddr[STRIPES*64-1:64];
            assign m_axi_gather0_awlen[STRIPES*8-1:8]    = dp_awlen[STRIPES*8-1:8];
            assign m_axi_gather0_awsize[STRIPES*3-1:3]   = dp_awsize[STRIPES*3-1:3];
            assign m_axi_gather0_awburst[STRIPES*2-1:2]  = dp_awburst[STRIPES*2-1:2];
            assign m_axi_gather0_awlock[STRIPES-1:1]     = dp_awlock[STRIPES-1:1];
            assign m_axi_gather0_awcache[STRIPES*4-1:4]  = dp_awcache[STRIPES*4-1:4];
            assign m_axi_gather0_awprot[STRIPES*3-1:3]   = dp_awprot[STRIPES*3-1:3];
            assign m_axi_gather0_awqos[STRIPES*4-1:4]    = dp_awqos[STRIPES*4-1:4];
            assign m_axi_gather0_wdata[STRIPES*512-1:512] = dp_wdata[STRIPES*512-1:512];
            assign m_axi_gather0_wstrb[STRIPES*64-1:64]  = dp_wstrb[STRIPES*64-1:64];
            assign m_axi_gather0_wlast[STRIPES-1:1]      = dp_wlast[STRIPES-1:1];
        end
    endgenerate

    wire [1:0]   rs_desc_dtype, ag_desc_dtype;
    wire [5:0]   rs_desc_flags, ag_desc_flags;
    wire [7:0]   rs_desc_hop, ag_desc_hop;
    wire [15:0]  rs_desc_chunk, ag_desc_chunk, rs_desc_len, ag_desc_len;
    wire [31:0]  rs_desc_seq, ag_desc_seq, rs_desc_offset, ag_desc_offset;
    wire         rs_desc_valid, rs_desc_ready, ag_desc_valid, ag_desc_ready;
    wire [511:0] rs_tdata, ag_tdata;
    wire [63:0]  rs_tkeep, ag_tkeep;
    wire         rs_tlast, rs_tvalid, rs_tready, ag_tlast, ag_tvalid, ag_tready;

    onic_net_ring_dp #(
        .WIRE_BF16(WIRE_BF16),
        .PARAM_BF16(PARAM_BF16),
        .RD_FIFO_LOG2(RD_FIFO_LOG2),
        .WR_FIFO_LOG2(WR_FIFO_LOG2),
        .MAX_BURST(MAX_BURST),
        .ID_BITS(4),
        .STRIPES(STRIPES)
    ) dp (
        .clk(ap_clk), .rst(rst_dp),
        .start(start_pulse_reg), .cfg_rank(cfg_rank_reg[7:0]), .cfg_world(cfg_world_reg[7:0]),
        .cfg_chunk_elems(chunk_elems_reg), .cfg_pkt_beats(cfg_payload_reg[21:6]),
        .cfg_grad_addr(cfg_lgrad_reg), .cfg_gather_addr(cfg_gather_reg), .ag_release(ag_release_reg),
        .cfg_rs_packets(rs_per_hop_reg), .cfg_rs_seg(rs_seg_reg), .cfg_rs_seg_beats(rs_seg_beats_reg),
        .cfg_rs_seg_elems(rs_seg_elems_reg), .cfg_ag_packets(ag_per_hop_reg), .cfg_ag_seg(ag_seg_reg),
        .cfg_ag_seg_beats(ag_seg_beats_reg), .cfg_ag_seg_elems(ag_seg_elems_reg),
        .rs_done(dp_rs_done), .ag_done(dp_ag_done), .errors(dp_errors),
        .s_hdr_opcode(dq_opcode), .s_hdr_flags(dq_flags), .s_hdr_hop(dq_hop), .s_hdr_chunk(dq_chunk),
        .s_hdr_seq(dq_seq), .s_hdr_offset(dq_offset), .s_hdr_length(dq_length),
        .s_hdr_valid(dp_hdr_valid), .s_hdr_ready(dp_hdr_ready),
        .s_pay_tdata(pay_tdata), .s_pay_tkeep(pay_tkeep), .s_pay_tlast(pay_tlast),
        .s_pay_tvalid(pay_tvalid && !pay_to_sc), .s_pay_tready(dp_pay_tready),
        .m_grad_tdata(dp_grad_tdata), .m_grad_tkeep(dp_grad_tkeep), .m_grad_tlast(dp_grad_tlast),
        .m_grad_tvalid(dp_grad_tvalid), .m_grad_tready(dp_grad_tready),
        .s_param_tdata(sel_p3 ? tp_grad_tdata : s_axis_param0_tdata),
        .s_param_tkeep(sel_p3 ? tp_grad_tkeep : s_axis_param0_tkeep),
        .s_param_tlast(sel_p3 ? tp_grad_tlast : s_axis_param0_tlast),
        .s_param_tvalid(out_en && (sel_p3 ? tp_grad_tvalid : s_axis_param0_tvalid)),
        .s_param_tready(dp_param_tready),
        .m_rs_desc_dtype(rs_desc_dtype), .m_rs_desc_flags(rs_desc_flags), .m_rs_desc_hop(rs_desc_hop),
        .m_rs_desc_chunk(rs_desc_chunk), .m_rs_desc_seq(rs_desc_seq), .m_rs_desc_offset(rs_desc_offset),
        .m_rs_desc_len(rs_desc_len), .m_rs_desc_valid(rs_desc_valid), .m_rs_desc_ready(rs_desc_ready),
        .m_rs_axis_tdata(rs_tdata), .m_rs_axis_tkeep(rs_tkeep), .m_rs_axis_tlast(rs_tlast),
        .m_rs_axis_tvalid(rs_tvalid), .m_rs_axis_tready(rs_tready),
        .m_ag_desc_dtype(ag_desc_dtype), .m_ag_desc_flags(ag_desc_flags), .m_ag_desc_hop(ag_desc_hop),
        .m_ag_desc_chunk(ag_desc_chunk), .m_ag_desc_seq(ag_desc_seq), .m_ag_desc_offset(ag_desc_offset),
        .m_ag_desc_len(ag_desc_len), .m_ag_desc_valid(ag_desc_valid), .m_ag_desc_ready(ag_desc_ready),
        .m_ag_axis_tdata(ag_tdata), .m_ag_axis_tkeep(ag_tkeep), .m_ag_axis_tlast(ag_tlast),
        .m_ag_axis_tvalid(ag_tvalid), .m_ag_axis_tready(ag_tready),
        .m_axi_grad_arid(dp_arid), .m_axi_grad_araddr(dp_araddr),
        .m_axi_grad_arlen(dp_arlen), .m_axi_grad_arsize(dp_arsize),
        .m_axi_grad_arburst(dp_arburst), .m_axi_grad_arlock(dp_arlock),
        .m_axi_grad_arcache(dp_arcache), .m_axi_grad_arprot(dp_arprot),
        .m_axi_grad_arqos(dp_arqos), .m_axi_grad_arvalid(dp_arvalid),
        .m_axi_grad_arready({STRIPES{out_en}} & ~tp_rd0 & m_axi_lgrad0_arready), .m_axi_grad_rid(m_axi_lgrad0_rid),
        .m_axi_grad_rdata(m_axi_lgrad0_rdata), .m_axi_grad_rresp(m_axi_lgrad0_rresp),
        .m_axi_grad_rlast(m_axi_lgrad0_rlast), .m_axi_grad_rvalid({STRIPES{out_en}} & ~tp_rd0 & m_axi_lgrad0_rvalid),
        .m_axi_grad_rready(dp_rready),
        .m_axi_gather_awid(dp_awid), .m_axi_gather_awaddr(dp_awaddr),
        .m_axi_gather_awlen(dp_awlen), .m_axi_gather_awsize(dp_awsize),
        .m_axi_gather_awburst(dp_awburst), .m_axi_gather_awlock(dp_awlock),
        .m_axi_gather_awcache(dp_awcache), .m_axi_gather_awprot(dp_awprot),
        .m_axi_gather_awqos(dp_awqos), .m_axi_gather_awvalid(dp_awvalid),
        .m_axi_gather_awready({STRIPES{out_en}} & ~tp_wr0 & m_axi_gather0_awready), .m_axi_gather_wdata(dp_wdata),
        .m_axi_gather_wstrb(dp_wstrb), .m_axi_gather_wlast(dp_wlast),
        .m_axi_gather_wvalid(dp_wvalid), .m_axi_gather_wready({STRIPES{out_en}} & ~tp_wr0 & m_axi_gather0_wready),
        .m_axi_gather_bid(m_axi_gather0_bid), .m_axi_gather_bresp(m_axi_gather0_bresp),
        .m_axi_gather_bvalid({STRIPES{out_en}} & ~tp_wr0 & m_axi_gather0_bvalid), .m_axi_gather_bready(dp_bready)
    );

    /* ---- the two-phase step's card-memory side and scalar exchange ---- */
    wire [7:0]   sc_desc_hop;
    wire [31:0]  sc_desc_seq;
    wire [15:0]  sc_desc_len;
    wire         sc_desc_valid, sc_desc_ready;
    wire [511:0] sc_tdata;
    wire [63:0]  sc_tkeep;
    wire         sc_tlast, sc_tvalid, sc_tready;
    wire [63:0]  entry_sumsq;
    wire         entry_flag;
    // the owner's chunk in 64-byte beats: S is a multiple of 16 (fp32: S / 16 beats of 64 bytes;
    // bf16: ceil(S / 32), the last one 32 bytes when S / 16 is odd)
    wire [31:0]  sum_beats = (WIRE_BF16 != 0) ? {5'd0, chunk_elems_reg[31:5]} + {31'd0, chunk_elems_reg[4]}
                                              : {4'd0, chunk_elems_reg[31:4]};
    wire [6:0]   sum_last  = (WIRE_BF16 != 0 && chunk_elems_reg[4]) ? 7'd32 : 7'd64;
    // phase 3 reads the current parameters instead: the same count in the parameter dtype
    wire [31:0]  par_beats = (PARAM_BF16 != 0) ? {5'd0, chunk_elems_reg[31:5]} + {31'd0, chunk_elems_reg[4]}
                                               : {4'd0, chunk_elems_reg[31:4]};
    wire [6:0]   par_last  = (PARAM_BF16 != 0 && chunk_elems_reg[4]) ? 7'd32 : 7'd64;

    onic_net_twophase #(
        .WIRE_BF16(WIRE_BF16),
        .WR_FIFO_LOG2(WR_FIFO_LOG2),
        .RD_FIFO_LOG2(RD_FIFO_LOG2),
        .MAX_BURST(MAX_BURST)
    ) twophase (
        .clk(ap_clk), .rst(rst_tp),
        .cfg_rank(cfg_rank_reg[7:0]), .cfg_world(cfg_world_reg[7:0]), .cfg_sum_addr(cfg_sum_reg),
        .cfg_chunk_beats(sel_p3 ? par_beats : sum_beats), .cfg_last_bytes(sel_p3 ? par_last : sum_last),
        .start1(start_pulse_reg && sel_p1), .start2(p2_start_reg),
        .phase1_done(tp_phase1_done), .phase2_done(tp_phase2_done), .errors(tp_errors),
        .s_sum_tdata(dp_grad_tdata), .s_sum_tkeep(dp_grad_tkeep), .s_sum_tlast(dp_grad_tlast),
        .s_sum_tvalid(out_en && sel_p1 && dp_grad_tvalid), .s_sum_tready(tp_sum_tready),
        .s_hdr_hop(dq_hop), .s_hdr_len(dq_length), .s_hdr_valid(sc_hdr_valid), .s_hdr_ready(sc_hdr_ready),
        .s_pay_tdata(pay_tdata), .s_pay_tlast(pay_tlast), .s_pay_tvalid(pay_tvalid && pay_to_sc),
        .s_pay_tready(sc_pay_tready),
        .m_desc_hop(sc_desc_hop), .m_desc_seq(sc_desc_seq), .m_desc_len(sc_desc_len),
        .m_desc_valid(sc_desc_valid), .m_desc_ready(sc_desc_ready),
        .m_axis_tdata(sc_tdata), .m_axis_tkeep(sc_tkeep), .m_axis_tlast(sc_tlast),
        .m_axis_tvalid(sc_tvalid), .m_axis_tready(sc_tready),
        .rd_rank(arg[23][7:0]), .rd_sumsq(entry_sumsq), .rd_flag(entry_flag),
        .m_grad_tdata(tp_grad_tdata), .m_grad_tkeep(tp_grad_tkeep), .m_grad_tlast(tp_grad_tlast),
        .m_grad_tvalid(tp_grad_tvalid),
        .m_grad_tready(out_en && (sel_p2 ? m_axis_grad0_tready : sel_p3 && dp_param_tready)),
        .m_axi_sum0_awid(tp_awid), .m_axi_sum0_awaddr(tp_awaddr), .m_axi_sum0_awlen(tp_awlen),
        .m_axi_sum0_awsize(tp_awsize), .m_axi_sum0_awburst(tp_awburst), .m_axi_sum0_awlock(tp_awlock),
        .m_axi_sum0_awcache(tp_awcache), .m_axi_sum0_awprot(tp_awprot), .m_axi_sum0_awqos(tp_awqos),
        .m_axi_sum0_awvalid(tp_awvalid), .m_axi_sum0_awready(out_en && sel_p1 && m_axi_gather0_awready[0]),
        .m_axi_sum0_wdata(tp_wdata), .m_axi_sum0_wstrb(tp_wstrb), .m_axi_sum0_wlast(tp_wlast),
        .m_axi_sum0_wvalid(tp_wvalid), .m_axi_sum0_wready(out_en && sel_p1 && m_axi_gather0_wready[0]),
        .m_axi_sum0_bid(m_axi_gather0_bid[0]), .m_axi_sum0_bresp(m_axi_gather0_bresp[1:0]),
        .m_axi_sum0_bvalid(out_en && sel_p1 && m_axi_gather0_bvalid[0]), .m_axi_sum0_bready(tp_bready),
        .m_axi_sum0_arid(tp_arid), .m_axi_sum0_araddr(tp_araddr), .m_axi_sum0_arlen(tp_arlen),
        .m_axi_sum0_arsize(tp_arsize), .m_axi_sum0_arburst(tp_arburst), .m_axi_sum0_arlock(tp_arlock),
        .m_axi_sum0_arcache(tp_arcache), .m_axi_sum0_arprot(tp_arprot), .m_axi_sum0_arqos(tp_arqos),
        .m_axi_sum0_arvalid(tp_arvalid), .m_axi_sum0_arready(out_en && rd_tp && m_axi_lgrad0_arready[0]),
        .m_axi_sum0_rid(m_axi_lgrad0_rid[0]), .m_axi_sum0_rdata(m_axi_lgrad0_rdata[511:0]),
        .m_axi_sum0_rresp(m_axi_lgrad0_rresp[1:0]), .m_axi_sum0_rlast(m_axi_lgrad0_rlast[0]),
        .m_axi_sum0_rvalid(out_en && rd_tp && m_axi_lgrad0_rvalid[0]), .m_axi_sum0_rready(tp_rready)
    );

    /* the AG port of the transmit side: the scalar flow in phase one, the all-gather after it.
     * From the clock after start1 only: the scalar block keeps the previous step's state until
     * start1 while the latched world may already be the next step's, so it can offer a hop of no
     * step in between (a frame with the old step's addresses in its checksum, seen in the bench). */
    reg sc_go_reg, sc_run_reg;
    always @(posedge ap_clk) begin
        if (rst) begin
            sc_go_reg  <= 1'b0;
            sc_run_reg <= 1'b0;
        end else begin
            sc_go_reg <= start_pulse_reg && sel_p1;
            if (sc_go_reg) sc_run_reg <= 1'b1;
            else if (p2_start_reg || start_pulse_reg) sc_run_reg <= 1'b0;
        end
    end
    wire sel_sc = sc_run_reg;
    wire [1:0]   tx_ag_dtype  = sel_sc ? 2'd0 : ag_desc_dtype;
    wire [5:0]   tx_ag_flags  = sel_sc ? 6'd1 : ag_desc_flags;     // a scalar packet is its hop's last
    wire [7:0]   tx_ag_hop    = sel_sc ? sc_desc_hop : ag_desc_hop;
    wire [15:0]  tx_ag_chunk  = sel_sc ? 16'd0 : ag_desc_chunk;
    wire [31:0]  tx_ag_seq    = sel_sc ? sc_desc_seq : ag_desc_seq;
    wire [31:0]  tx_ag_offset = sel_sc ? 32'd0 : ag_desc_offset;
    wire [15:0]  tx_ag_len    = sel_sc ? sc_desc_len : ag_desc_len;
    wire         tx_ag_valid  = sel_sc ? sc_desc_valid : ag_desc_valid;
    wire         tx_ag_ready;
    assign sc_desc_ready = sel_sc && tx_ag_ready;
    assign ag_desc_ready = !sel_sc && tx_ag_ready;
    wire [511:0] tx_ag_tdata  = sel_sc ? sc_tdata : ag_tdata;
    wire [63:0]  tx_ag_tkeep  = sel_sc ? sc_tkeep : ag_tkeep;
    wire         tx_ag_tlast  = sel_sc ? sc_tlast : ag_tlast;
    wire         tx_ag_tvalid = sel_sc ? sc_tvalid : ag_tvalid;
    wire         tx_ag_tready;
    assign sc_tready = sel_sc && tx_ag_tready;
    assign ag_tready = !sel_sc && tx_ag_tready;

    /* ---- transmit side ---- */
    /* After a reset and before the next step the senders are empty, but cfg_step_reg still holds
     * the aborted step's number (arguments are latched, not reset), so its ACKs would pass as
     * current: one beyond the packets sent (none) sets the sender's sticky protocol error, and
     * the next step's STATUS with it. Until a step begins, an ACK/NAK reaches the senders with a
     * step number that is not theirs: stale, counted (dropped_stale_reply) and ignored. */
    reg stepped_reg;    // a step has begun since the reset
    always @(posedge ap_clk) begin
        if (rst) stepped_reg <= 1'b0;
        else if (start_pulse_reg) stepped_reg <= 1'b1;
    end
    wire [31:0] ack_step = stepped_reg ? hdr_step : ~cfg_step_reg;

    wire [255:0] rs_counters, ag_counters;
    wire [95:0]  tx_counters;

    onic_net_tx #(
        .SLOTS_LOG2(TX_SLOTS_LOG2),
        .BEATS_LOG2(TX_BEATS_LOG2),
        .URAM(TX_URAM),
        .FIFO_LOG2(TX_FIFO_LOG2)
    ) tx (
        .clk(ap_clk), .rst(rst_tx),
        .cfg_local_mac(cfg_local_mac_reg), .cfg_peer_mac(cfg_succ_mac_reg), .cfg_local_ip(cfg_local_ip_reg),
        .cfg_peer_ip(cfg_succ_ip_reg), .cfg_pred_mac(cfg_pred_mac_reg), .cfg_pred_ip(cfg_pred_ip_reg),
        .cfg_udp_sport(cfg_local_port_reg), .cfg_comm(cfg_comm_reg),
        .cfg_rank(cfg_rank_reg[7:0]), .cfg_step(cfg_step_reg), .cfg_rto(cfg_timeout_reg),
        .cfg_rs_window(cfg_window_reg), .cfg_rs_credit(cfg_credit_reg),
        .cfg_ag_window(cfg_window_reg), .cfg_ag_credit(cfg_credit_reg), .start(start_pulse_reg),
        .start_ag(p2_start_reg),
        .s_rs_desc_dtype(rs_desc_dtype), .s_rs_desc_flags(rs_desc_flags), .s_rs_desc_hop(rs_desc_hop),
        .s_rs_desc_chunk(rs_desc_chunk), .s_rs_desc_seq(rs_desc_seq), .s_rs_desc_offset(rs_desc_offset),
        .s_rs_desc_len(rs_desc_len), .s_rs_desc_valid(rs_desc_valid), .s_rs_desc_ready(rs_desc_ready),
        .s_rs_axis_tdata(rs_tdata), .s_rs_axis_tkeep(rs_tkeep), .s_rs_axis_tlast(rs_tlast),
        .s_rs_axis_tvalid(rs_tvalid), .s_rs_axis_tready(rs_tready),
        .s_ag_desc_scalar(sel_sc), .s_ag_desc_dtype(tx_ag_dtype), .s_ag_desc_flags(tx_ag_flags),
        .s_ag_desc_hop(tx_ag_hop), .s_ag_desc_chunk(tx_ag_chunk), .s_ag_desc_seq(tx_ag_seq),
        .s_ag_desc_offset(tx_ag_offset), .s_ag_desc_len(tx_ag_len), .s_ag_desc_valid(tx_ag_valid),
        .s_ag_desc_ready(tx_ag_ready),
        .s_ag_axis_tdata(tx_ag_tdata), .s_ag_axis_tkeep(tx_ag_tkeep), .s_ag_axis_tlast(tx_ag_tlast),
        .s_ag_axis_tvalid(tx_ag_tvalid), .s_ag_axis_tready(tx_ag_tready),
        .s_rs_ack_valid(rs_ack_valid), .s_rs_ack_ready(rs_ack_ready), .s_rs_ack_nak(hdr_opcode == OP_NAK),
        .s_rs_ack_step(ack_step), .s_rs_ack_seq(hdr_seq), .s_rs_ack_credit(hdr_offset),
        .s_ag_ack_valid(ag_ack_valid), .s_ag_ack_ready(ag_ack_ready), .s_ag_ack_nak(hdr_opcode == OP_NAK),
        .s_ag_ack_step(ack_step), .s_ag_ack_seq(hdr_seq), .s_ag_ack_credit(hdr_offset),
        .s_ctl_valid(ctl_valid), .s_ctl_ready(ctl_ready), .s_ctl_nak(ctl_nak), .s_ctl_flow(ctl_flow),
        .s_ctl_step(ctl_step), .s_ctl_seq(ctl_seq), .s_ctl_credit(ctl_credit),
        .m_axis_tdata(m_axis_mac0_tdata), .m_axis_tkeep(m_axis_mac0_tkeep), .m_axis_tlast(m_axis_mac0_tlast),
        .m_axis_tvalid(m_axis_mac0_tvalid), .m_axis_tready(m_axis_mac0_tready),
        .rs_state(rs_state), .ag_state(ag_state), .errors(tx_errors),
        .rs_counters(rs_counters), .ag_counters(ag_counters), .tx_counters(tx_counters)
    );

    /* ---- counters of this top: frames and bytes at the MAC's transmit port, ACK/NAKs sent ---- */
    reg  [31:0] frames_out_reg, bytes_out_reg, acks_sent_reg, naks_sent_reg;
    reg         out_beat_reg, out_last_reg;
    reg  [63:0] out_keep_reg;
    /* a beat's bytes in two registered steps (the 64-bit popcount and the 32-bit saturating add in one
       clock were 7 LUT levels): the bytes of each 16-bit quarter of TKEEP, then their sum into the
       counter; bytes_out counts a beat a clock later than frames_out */
    reg         out_beat2_reg;
    reg  [19:0] out_quarter_reg;        // quarter q's bytes in [5q +: 5]
    function [4:0] ones16;
        input [15:0] k;
        integer i;
        begin
            ones16 = 5'd0;
            for (i = 0; i < 16; i = i + 1) ones16 = ones16 + {4'd0, k[i]};
        end
    endfunction
    wire [6:0]  out_bytes = {2'd0, out_quarter_reg[4:0]} + {2'd0, out_quarter_reg[9:5]}
                          + {2'd0, out_quarter_reg[14:10]} + {2'd0, out_quarter_reg[19:15]};

    function [31:0] sat_add;
        input [31:0] a;
        input [31:0] c;
        reg   [32:0] s;
        begin
            s = {1'b0, a} + {1'b0, c};
            sat_add = s[32] ? 32'hFFFF_FFFF : s[31:0];
        end
    endfunction

    always @(posedge ap_clk) begin
        if (rst) begin
            frames_out_reg <= 32'd0;
            bytes_out_reg  <= 32'd0;
            acks_sent_reg  <= 32'd0;
            naks_sent_reg  <= 32'd0;
            out_beat_reg   <= 1'b0;
            out_last_reg   <= 1'b0;
            out_keep_reg   <= 64'd0;
            out_beat2_reg  <= 1'b0;
            out_quarter_reg <= 20'd0;
        end else begin
            out_beat_reg <= m_axis_mac0_tvalid && m_axis_mac0_tready;
            out_last_reg <= m_axis_mac0_tlast;
            out_keep_reg <= m_axis_mac0_tkeep;
            out_beat2_reg <= out_beat_reg;
            out_quarter_reg <= {ones16(out_keep_reg[63:48]), ones16(out_keep_reg[47:32]),
                                ones16(out_keep_reg[31:16]), ones16(out_keep_reg[15:0])};
            if (out_beat2_reg) begin
                bytes_out_reg <= sat_add(bytes_out_reg, {25'd0, out_bytes});
            end
            if (out_beat_reg) begin
                if (out_last_reg) frames_out_reg <= sat_add(frames_out_reg, 32'd1);
            end
            if (ctl_take) begin
                if (ctl_nak) naks_sent_reg <= sat_add(naks_sent_reg, 32'd1);
                else acks_sent_reg <= sat_add(acks_sent_reg, 32'd1);
            end
        end
    end

    /* the register view, net_regmap.counter_names() order; flow sums registered */
    reg  [31:0] sum_reg [0:5];
    always @(posedge ap_clk) begin
        sum_reg[0] <= sat_add(rs_counters[95:64], ag_counters[95:64]);     // retransmitted_frames
        sum_reg[1] <= sat_add(rs_counters[127:96], ag_counters[127:96]);   // retransmitted_bytes
        sum_reg[2] <= sat_add(rs_counters[191:160], ag_counters[191:160]); // acks_received
        sum_reg[3] <= sat_add(rs_counters[223:192], ag_counters[223:192]); // naks_received
        sum_reg[4] <= sat_add(rs_counters[159:128], ag_counters[159:128]); // timeouts
        sum_reg[5] <= sat_add(rs_counters[255:224], ag_counters[255:224]); // stale replies
    end
    // the AG sender's payload bytes while it carries the scalar flow (phase one) are the scalar flow's
    reg  [31:0] sc_base_reg, sc_prev_reg, sc_view_reg;
    // the AG flow's own bytes registered (the subtraction in front of the register read mux was 7 LUT levels)
    reg  [31:0] ag_view_reg;
    always @(posedge ap_clk) begin
        if (rst) begin
            sc_base_reg <= 32'd0;
            sc_prev_reg <= 32'd0;
            sc_view_reg <= 32'd0;
            ag_view_reg <= 32'd0;
        end else begin
            ag_view_reg <= ag_counters[63:32] - sc_view_reg;
            if (start_pulse_reg && sel_p1) sc_base_reg <= ag_counters[63:32];
            if (sel_p1) sc_view_reg <= sc_prev_reg + (ag_counters[63:32] - sc_base_reg);
            if (p2_start_reg || (start_pulse_reg && !sel_p1)) sc_prev_reg <= sc_view_reg;
        end
    end

    wire [31:0] view [0:N_COUNTERS-1];
    assign view[0]  = rx_cnt[0];        // frames_in
    assign view[1]  = rx_cnt[1];        // bytes_in
    assign view[2]  = frames_out_reg;
    assign view[3]  = bytes_out_reg;
    assign view[4]  = sum_reg[0];
    assign view[5]  = sum_reg[1];
    assign view[6]  = acks_sent_reg;
    assign view[7]  = sum_reg[2];
    assign view[8]  = naks_sent_reg;
    assign view[9]  = sum_reg[3];
    assign view[10] = sum_reg[4];
    assign view[11] = rs_counters[63:32];   // rs_payload_bytes_out
    assign view[12] = ag_view_reg;          // ag_payload_bytes_out
    assign view[13] = sc_view_reg;          // scalar_payload_bytes_out
    generate
        for (g = 0; g < 19; g = g + 1) begin : g_drop
            assign view[14 + g] = rx_cnt[3 + g];   // dropped_truncated .. dropped_overflow
        end
        for (g = 0; g < N_COUNTERS; g = g + 1) begin : g_view
            assign counters[64 * g +: 64] = {32'd0, view[g]};
        end
    endgenerate
    assign view[N_COUNTERS - 1] = sum_reg[5];  // dropped_stale_reply
    assign counters[64 * N_COUNTERS +: 64]       = entry_sumsq;              // entry_sumsq
    assign counters[64 * (N_COUNTERS + 1) +: 64] = {63'd0, entry_flag};      // entry_flag

    // header fields the datapath and the senders do not use (the receive side checked them)
    wire _unused_ok = &{1'b0, hdr_src_mac, hdr_src_ip, hdr_src_port, hdr_version, hdr_dtype, hdr_comm, hdr_src,
                        rx_cnt[2], tx_counters, evt_credit[31:CW], rs_counters[31:0], ag_counters[31:0], rs_state[127:32], ag_state[127:32], arg[7],
                        cfg_world_reg[31:8], cfg_rank_reg[31:8], cfg_payload_reg[31:22], arg[20][31:2],
                        arg[23][31:8], arg[24][31:16], tp_phase2_done, m_axi_gather0_bid[3:1], m_axi_lgrad0_rid[3:1], 1'b0};

endmodule

`resetall
