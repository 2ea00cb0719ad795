// OptimusNIC: the two-phase step's scalar exchange (one card's end of it)
// Language: Verilog 2001

`resetall
`timescale 1ns / 1ps
`default_nettype none

/*
 * docs/design.md 8.1 "Two-phase step", hls.net.card (`_consume_scalars`, `_forward_scalars`):
 * every card's 16-byte entry (little-endian: u8 rank, u8 non-finite flag, 6 zero bytes, f64 sum
 * of squares) travels the ring in the scalar flow (opcode 5, flow 3, one packet per hop, seq =
 * hop). Card r sends at hop 0 its own entry; the frame it receives at hop h (h + 1 entries,
 * ranks r-1-h .. r-1 mod N) it forwards at hop h + 1 with its own entry appended, up to hop
 * N - 2. After its own entry and N - 1 received ones every entry is in the table (`all_known`).
 *
 * Received packets (header, then the payload beats, TLAST on the last) are consumed one entry
 * per clock into the table; a rank byte other than the expected one, a length other than
 * 16 (h + 1) or a hop out of order sets `error` (hls.net.card's ProtocolError) and the entry is
 * not stored. The packet of hop j leaves once the own entry is known (`own_valid`) and hop j - 1
 * was received: its descriptor (hop j, seq j, length 16 (j + 1); the top ties dtype fp32, flags
 * LAST, chunk 0, offset 0), then its payload built from the table, one entry per clock, TKEEP on
 * the last beat. The entries stay readable at `rd_rank` (one clock later) until the next `start`.
 *
 * The table is two copies of a 256 x 65-bit memory (sum of squares, flag) with one write port
 * (the received entries) and one registered read port each (the transmit side, the host), so it
 * maps to distributed or block RAM; the own entry sits in registers beside it. A received hop h
 * brings exactly one rank not seen before (r - 1 - h), so `all_known` is the own entry and N - 1
 * hops received in order without error.
 */
module onic_net_scalar (
    input  wire         clk,
    input  wire         rst,

    input  wire [7:0]   cfg_rank,
    input  wire [7:0]   cfg_world,
    input  wire         start,          // pulse between steps: the table forgets every entry

    /* this card's entry (the sum of squares unit's result) */
    input  wire         own_valid,
    input  wire [63:0]  own_sumsq,
    input  wire         own_flag,

    /* received scalar packets: header, then payload */
    input  wire [7:0]   s_hdr_hop,
    input  wire [15:0]  s_hdr_len,
    input  wire         s_hdr_valid,
    output wire         s_hdr_ready,
    input  wire [511:0] s_pay_tdata,
    input  wire         s_pay_tlast,
    input  wire         s_pay_tvalid,
    output wire         s_pay_tready,

    /* to the transmit side's scalar flow */
    output wire [7:0]   m_desc_hop,
    output wire [31:0]  m_desc_seq,
    output wire [15:0]  m_desc_len,
    output wire         m_desc_valid,
    input  wire         m_desc_ready,
    output wire [511:0] m_axis_tdata,
    output wire [63:0]  m_axis_tkeep,
    output wire         m_axis_tlast,
    output wire         m_axis_tvalid,
    input  wire         m_axis_tready,

    /* the table */
    input  wire [7:0]   rd_rank,        // read: rd_sumsq / rd_flag one clock later
    output wire [63:0]  rd_sumsq,
    output wire         rd_flag,
    output wire         own_known,
    output wire         sent_all,       // every hop this card sends (0 .. N - 2) has left
    output wire         all_known,
    output wire         error
);

    reg  [64:0]  tab_tx [0:255];    // {flag, sum of squares} per rank, read by the transmit side
    reg  [64:0]  tab_host [0:255];  // the same, read by the host
    reg  [64:0]  tab_tx_q, tab_host_q;
    reg          rd_own_reg;
    reg          own_known_reg;
    reg  [63:0]  own_sumsq_reg;
    reg          own_flag_reg;
    reg          error_reg;

    /* receive: one entry per clock */
    localparam [1:0] R_HDR = 2'd0, R_BEAT = 2'd1, R_ENTRY = 2'd2;
    reg  [1:0]   rstate_reg;
    reg  [7:0]   recv_hops_reg;     // hops received in order (the next expected is this one)
    reg  [8:0]   recv_hops1_reg;    // recv_hops_reg + 1: the next header's entries (its length / 16)
    reg  [7:0]   rx_left_reg;       // entries of the packet still to store
    reg  [7:0]   rx_rank_reg;       // the next entry's expected rank
    reg  [1:0]   rx_lane_reg;
    reg  [511:0] rx_beat_reg;
    reg          rx_last_reg;       // the beat held is the packet's last
    reg          rx_bad_reg;        // the packet's header was wrong: drain it, store nothing

    // lane selects written out: an indexed part-select becomes a shifter whose index fans out
    wire [127:0] rx_entry = rx_lane_reg[1] ? (rx_lane_reg[0] ? rx_beat_reg[511:384] : rx_beat_reg[383:256])
                                           : (rx_lane_reg[0] ? rx_beat_reg[255:128] : rx_beat_reg[127:0]);
    // the 6 pad bytes are zero when sent and ignored when received (as hls.net.card)
    wire _unused_ok = &{1'b0, rx_entry[63:16], 1'b0};
    wire [7:0]   hdr_entries = s_hdr_hop + 8'd1;   // the header's entries (drained as many if it is wrong)
    /* hop + 2 <= N as hop <= N - 2 against a register (N - 2, and N >= 2): no adder in front of the
       compare. cfg_world is loaded a clock or more before start (onic_net_kernel), and a hop is
       only judged after the own entry or a header arrived, long after */
    reg  [7:0]   world_m2_reg;
    reg          world_ge2_reg;
    // all_known's hop + 1 == N the same way: hop == N - 1 (and N >= 1)
    reg  [7:0]   world_m1_reg;
    reg          world_ge1_reg;
    always @(posedge clk) begin
        world_m2_reg  <= cfg_world - 8'd2;
        world_ge2_reg <= cfg_world >= 8'd2;
        world_m1_reg  <= cfg_world - 8'd1;
        world_ge1_reg <= cfg_world != 8'd0;
    end
    // r - 1 - h mod N, as r + N - 1 - h (h <= N - 2: positive, below 2N)
    wire [8:0]   rx_first_w = {1'b0, cfg_rank} + {1'b0, cfg_world} - 9'd1 - {1'b0, s_hdr_hop};
    wire [7:0]   rx_first = (rx_first_w >= {1'b0, cfg_world}) ? rx_first_w[7:0] - cfg_world : rx_first_w[7:0];
    /* the header's hop must be recv_hops_reg, so its checks use the registers: recv_hops_reg a
       hop this card may receive (hop <= N - 2) and the length against 16 (recv_hops_reg + 1),
       registered; no adder or compare with a register between the header queue's output and the
       verdict. A wire, not a function reading world_*_reg: Icarus re-evaluates a function called
       in a continuous assignment only when its arguments change, so in onic_net_kernel (the world
       latched long after reset, recv_hops_reg 0 since reset) the verdict kept the X of the reset
       and no scalar hop was ever counted (sim/rtl/net/README.md "Icarus") */
    wire         recv_hop_ok = world_ge2_reg && recv_hops_reg <= world_m2_reg;
    wire         hdr_ok = s_hdr_hop == recv_hops_reg && recv_hop_ok &&
                          s_hdr_len == {3'd0, recv_hops1_reg, 4'd0};
    wire         rx_store = rstate_reg == R_ENTRY && !rx_bad_reg;
    wire         rx_match = rx_entry[7:0] == rx_rank_reg;
    wire [7:0]   rx_rank_next = (rx_rank_reg + 8'd1 == cfg_world) ? 8'd0 : rx_rank_reg + 8'd1;

    assign s_hdr_ready = rstate_reg == R_HDR;
    assign s_pay_tready = rstate_reg == R_BEAT;

    /* transmit: descriptor, then beats built one entry per clock */
    localparam [2:0] T_IDLE = 3'd0, T_DESC = 3'd1, T_READ = 3'd2, T_PLACE = 3'd3, T_BEAT = 3'd4;
    reg  [2:0]   tstate_reg;
    reg          tx_own_reg;        // the entry being read is this card's own
    reg  [7:0]   send_hop_reg;      // the next hop to send
    reg  [7:0]   tx_left_reg;       // entries of the packet still to place
    reg  [7:0]   tx_rank_reg;
    reg  [1:0]   tx_lane_reg;
    reg  [511:0] tx_beat_reg;
    reg  [63:0]  tx_keep_reg;
    reg          tx_last_reg;

    // r - j mod N, as r + N - j
    wire [8:0]   tx_first_w = {1'b0, cfg_rank} + {1'b0, cfg_world} - {1'b0, send_hop_reg};
    wire [7:0]   tx_first = (tx_first_w >= {1'b0, cfg_world}) ? tx_first_w[7:0] - cfg_world : tx_first_w[7:0];
    /* tx_more is "send_hop_reg <= N - 2" as a register: its next value from send_hop_reg's next
       value and cfg_world (world_m2_reg's next value): h <= N - 2 is h + 2 <= N. The same value
       every clock, with no compare between send_hop_reg and sent_all / tx_go */
    reg          tx_more_reg;
    wire         tx_more = tx_more_reg;
    wire         send_hop_inc = tstate_reg == T_BEAT && m_axis_tready && tx_last_reg;
    always @(posedge clk) begin
        if (rst || start) begin
            tx_more_reg <= cfg_world >= 8'd2;
        end else if (send_hop_inc) begin
            tx_more_reg <= {1'b0, send_hop_reg} + 9'd3 <= {1'b0, cfg_world};
        end else begin
            tx_more_reg <= {1'b0, send_hop_reg} + 9'd2 <= {1'b0, cfg_world};
        end
    end
    wire         tx_go = tstate_reg == T_IDLE && own_known_reg && tx_more && send_hop_reg <= recv_hops_reg;
    reg  [7:0]   tx_place_rank_reg; // the rank of the entry being placed
    wire [63:0]  tx_sumsq = tx_own_reg ? own_sumsq_reg : tab_tx_q[63:0];
    wire         tx_flag = tx_own_reg ? own_flag_reg : tab_tx_q[64];
    wire [127:0] tx_entry = {tx_sumsq, 48'd0, 7'd0, tx_flag, tx_place_rank_reg};
    wire [7:0]   tx_rank_next = (tx_rank_reg + 8'd1 == cfg_world) ? 8'd0 : tx_rank_reg + 8'd1;
    wire [8:0]   tx_entries = {1'b0, send_hop_reg} + 9'd1;

    assign m_desc_hop = send_hop_reg;
    assign m_desc_seq = {24'd0, send_hop_reg};
    assign m_desc_len = {3'd0, tx_entries, 4'd0};
    assign m_desc_valid = tstate_reg == T_DESC;
    assign m_axis_tdata = tx_beat_reg;
    assign m_axis_tkeep = tx_keep_reg;
    assign m_axis_tlast = tx_last_reg;
    assign m_axis_tvalid = tstate_reg == T_BEAT;

    /* the table: one write port, one registered read port per copy */
    always @(posedge clk) begin
        if (rx_store && rx_match) begin
            tab_tx[rx_rank_reg] <= {rx_entry[15:8] != 8'd0, rx_entry[127:64]};
            tab_host[rx_rank_reg] <= {rx_entry[15:8] != 8'd0, rx_entry[127:64]};
        end
        tab_tx_q <= tab_tx[tx_rank_reg];
        tab_host_q <= tab_host[rd_rank];
        rd_own_reg <= rd_rank == cfg_rank;
    end

    integer j;
    always @(posedge clk) begin
        if (rst || start) begin
            own_known_reg <= 1'b0;
            error_reg <= 1'b0;
            rstate_reg <= R_HDR;
            recv_hops_reg <= 8'd0;
            recv_hops1_reg <= 9'd1;
            tstate_reg <= T_IDLE;
            send_hop_reg <= 8'd0;
        end else begin
            if (own_valid && !own_known_reg) begin
                own_known_reg <= 1'b1;
                own_sumsq_reg <= own_sumsq;
                own_flag_reg <= own_flag;
            end

            case (rstate_reg)
                R_HDR: begin
                    if (s_hdr_valid) begin
                        rx_bad_reg <= !hdr_ok;
                        if (!hdr_ok) begin
                            error_reg <= 1'b1;
                        end
                        rx_left_reg <= hdr_entries;
                        rx_rank_reg <= rx_first;
                        rstate_reg <= R_BEAT;
                    end
                end
                R_BEAT: begin
                    if (s_pay_tvalid) begin
                        rx_beat_reg <= s_pay_tdata;
                        rx_last_reg <= s_pay_tlast;
                        rx_lane_reg <= 2'd0;
                        rstate_reg <= R_ENTRY;
                    end
                end
                default: begin  // R_ENTRY
                    if (rx_store) begin
                        if (!rx_match) begin
                            error_reg <= 1'b1;
                        end
                    end
                    rx_rank_reg <= rx_rank_next;
                    rx_left_reg <= (rx_left_reg == 8'd0) ? 8'd0 : rx_left_reg - 8'd1;
                    rx_lane_reg <= rx_lane_reg + 2'd1;
                    if (rx_lane_reg == 2'd3 || rx_left_reg <= 8'd1) begin
                        if (rx_last_reg) begin
                            if (rx_left_reg > 8'd1) begin
                                error_reg <= 1'b1;  // fewer beats than the length says
                            end
                            if (!rx_bad_reg) begin
                                recv_hops_reg <= recv_hops_reg + 8'd1;
                                recv_hops1_reg <= recv_hops1_reg + 9'd1;
                            end
                            rstate_reg <= R_HDR;
                        end else begin
                            rstate_reg <= R_BEAT;
                        end
                    end
                end
            endcase

            case (tstate_reg)
                T_IDLE: begin
                    if (tx_go) begin
                        tx_left_reg <= tx_entries[7:0];
                        tx_rank_reg <= tx_first;
                        tstate_reg <= T_DESC;
                    end
                end
                T_DESC: begin
                    if (m_desc_ready) begin
                        tx_lane_reg <= 2'd0;
                        tx_beat_reg <= 512'd0;
                        tx_keep_reg <= 64'd0;
                        tstate_reg <= T_READ;
                    end
                end
                T_READ: begin  // tab_tx_q takes the entry of tx_rank_reg at this clock
                    tx_own_reg <= tx_rank_reg == cfg_rank;
                    tx_place_rank_reg <= tx_rank_reg;
                    tx_rank_reg <= tx_rank_next;
                    tstate_reg <= T_PLACE;
                end
                T_PLACE: begin
                    for (j = 0; j < 4; j = j + 1) begin
                        if (tx_lane_reg == j[1:0]) begin
                            tx_beat_reg[128*j +: 128] <= tx_entry;
                            tx_keep_reg[16*j +: 16] <= 16'hffff;
                        end
                    end
                    tx_left_reg <= tx_left_reg - 8'd1;
                    tx_lane_reg <= tx_lane_reg + 2'd1;
                    if (tx_lane_reg == 2'd3 || tx_left_reg == 8'd1) begin
                        tx_last_reg <= tx_left_reg == 8'd1;
                        tstate_reg <= T_BEAT;
                    end else begin
                        tstate_reg <= T_READ;
                    end
                end
                default: begin  // T_BEAT
                    if (m_axis_tready) begin
                        tx_lane_reg <= 2'd0;
                        tx_beat_reg <= 512'd0;
                        tx_keep_reg <= 64'd0;
                        if (tx_last_reg) begin
                            send_hop_reg <= send_hop_reg + 8'd1;
                            tstate_reg <= T_IDLE;
                        end else begin
                            tstate_reg <= T_READ;
                        end
                    end
                end
            endcase
        end
    end

    assign rd_sumsq = rd_own_reg ? own_sumsq_reg : tab_host_q[63:0];
    assign rd_flag = rd_own_reg ? own_flag_reg : tab_host_q[64];
    assign own_known = own_known_reg;
    assign sent_all = !tx_more && tstate_reg == T_IDLE;
    assign all_known = own_known_reg && !error_reg && world_ge1_reg && recv_hops_reg == world_m1_reg;
    assign error = error_reg;

endmodule

`resetall
