// Bench top for the switch and port-adapter benches (sim/tb/net/test_eth_switch.py): a stand-in
// card whose MAC transmit stream is the bench's generator stream passed straight through, and
// whose MAC receive stream is registered once onto monitor outputs. The ring-of-peers tests use
// only its clock.
//
// Streams are the card's MAC interfaces: 512-bit AXI4-Stream, tkeep 64; the receive side has no
// tready and tuser 1 (the MAC's frame-check-failed flag on the last beat).
`default_nettype none

module eth_port_loop (
    input  wire         clk,
    input  wire         rst,
    // the bench's generator: the frames the stand-in card transmits
    input  wire [511:0] gen_tdata,
    input  wire [63:0]  gen_tkeep,
    input  wire         gen_tvalid,
    input  wire         gen_tlast,
    output wire         gen_tready,
    // the card's MAC transmit stream (the bench's TxAdapter drives tready)
    output wire [511:0] tx_tdata,
    output wire [63:0]  tx_tkeep,
    output wire         tx_tvalid,
    output wire         tx_tlast,
    input  wire         tx_tready,
    // the card's MAC receive stream (the bench's RxAdapter drives it; no tready)
    input  wire [511:0] rx_tdata,
    input  wire [63:0]  rx_tkeep,
    input  wire         rx_tvalid,
    input  wire         rx_tlast,
    input  wire         rx_tuser,
    // the receive stream one clock later, for the bench's monitor
    output reg  [511:0] mon_tdata,
    output reg  [63:0]  mon_tkeep,
    output reg          mon_tvalid,
    output reg          mon_tlast,
    output reg          mon_tuser
);
    assign tx_tdata   = gen_tdata;
    assign tx_tkeep   = gen_tkeep;
    assign tx_tvalid  = gen_tvalid;
    assign tx_tlast   = gen_tlast;
    assign gen_tready = tx_tready;

    always @(posedge clk) begin
        if (rst) begin
            mon_tvalid <= 1'b0;
        end else begin
            mon_tvalid <= rx_tvalid;
        end
        mon_tdata <= rx_tdata;
        mon_tkeep <= rx_tkeep;
        mon_tlast <= rx_tlast;
        mon_tuser <= rx_tuser;
    end
endmodule

`default_nettype wire
