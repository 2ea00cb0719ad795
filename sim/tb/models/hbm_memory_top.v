// Language: Verilog 2001
// Two AXI4 ports (a, b) wired straight through, the bench of sim/tb/kernel/hbm_memory.py:
// cocotbext-axi AxiMasters drive s_axi_<x>, the card-memory model answers on m_axi_<x> as it
// answers a kernel's m_axi_<port>. No logic, so every beat a master sees is one the model sent.

`resetall
`timescale 1ns / 1ps
`default_nettype none

module hbm_memory_top (
    input  wire                ap_clk,
    input  wire                ap_rst_n,
    /* port a, master side (driven by an AxiMaster) */
    input  wire                s_axi_a_awid,
    input  wire [63:0]         s_axi_a_awaddr,
    input  wire [7:0]          s_axi_a_awlen,
    input  wire [2:0]          s_axi_a_awsize,
    input  wire [1:0]          s_axi_a_awburst,
    input  wire                s_axi_a_awvalid,
    input  wire [511:0]        s_axi_a_wdata,
    input  wire [63:0]         s_axi_a_wstrb,
    input  wire                s_axi_a_wlast,
    input  wire                s_axi_a_wvalid,
    input  wire                s_axi_a_bready,
    input  wire                s_axi_a_arid,
    input  wire [63:0]         s_axi_a_araddr,
    input  wire [7:0]          s_axi_a_arlen,
    input  wire [2:0]          s_axi_a_arsize,
    input  wire [1:0]          s_axi_a_arburst,
    input  wire                s_axi_a_arvalid,
    input  wire                s_axi_a_rready,
    output wire                s_axi_a_awready,
    output wire                s_axi_a_wready,
    output wire                s_axi_a_bid,
    output wire [1:0]          s_axi_a_bresp,
    output wire                s_axi_a_bvalid,
    output wire                s_axi_a_arready,
    output wire                s_axi_a_rid,
    output wire [511:0]        s_axi_a_rdata,
    output wire [1:0]          s_axi_a_rresp,
    output wire                s_axi_a_rlast,
    output wire                s_axi_a_rvalid,
    /* port a, memory side (answered by the card-memory model) */
    output wire                m_axi_a_awid,
    output wire [63:0]         m_axi_a_awaddr,
    output wire [7:0]          m_axi_a_awlen,
    output wire [2:0]          m_axi_a_awsize,
    output wire [1:0]          m_axi_a_awburst,
    output wire                m_axi_a_awvalid,
    output wire [511:0]        m_axi_a_wdata,
    output wire [63:0]         m_axi_a_wstrb,
    output wire                m_axi_a_wlast,
    output wire                m_axi_a_wvalid,
    output wire                m_axi_a_bready,
    output wire                m_axi_a_arid,
    output wire [63:0]         m_axi_a_araddr,
    output wire [7:0]          m_axi_a_arlen,
    output wire [2:0]          m_axi_a_arsize,
    output wire [1:0]          m_axi_a_arburst,
    output wire                m_axi_a_arvalid,
    output wire                m_axi_a_rready,
    input  wire                m_axi_a_awready,
    input  wire                m_axi_a_wready,
    input  wire                m_axi_a_bid,
    input  wire [1:0]          m_axi_a_bresp,
    input  wire                m_axi_a_bvalid,
    input  wire                m_axi_a_arready,
    input  wire                m_axi_a_rid,
    input  wire [511:0]        m_axi_a_rdata,
    input  wire [1:0]          m_axi_a_rresp,
    input  wire                m_axi_a_rlast,
    input  wire                m_axi_a_rvalid,
    /* port b, master side (driven by an AxiMaster) */
    input  wire                s_axi_b_awid,
    input  wire [63:0]         s_axi_b_awaddr,
    input  wire [7:0]          s_axi_b_awlen,
    input  wire [2:0]          s_axi_b_awsize,
    input  wire [1:0]          s_axi_b_awburst,
    input  wire                s_axi_b_awvalid,
    input  wire [511:0]        s_axi_b_wdata,
    input  wire [63:0]         s_axi_b_wstrb,
    input  wire                s_axi_b_wlast,
    input  wire                s_axi_b_wvalid,
    input  wire                s_axi_b_bready,
    input  wire                s_axi_b_arid,
    input  wire [63:0]         s_axi_b_araddr,
    input  wire [7:0]          s_axi_b_arlen,
    input  wire [2:0]          s_axi_b_arsize,
    input  wire [1:0]          s_axi_b_arburst,
    input  wire                s_axi_b_arvalid,
    input  wire                s_axi_b_rready,
    output wire                s_axi_b_awready,
    output wire                s_axi_b_wready,
    output wire                s_axi_b_bid,
    output wire [1:0]          s_axi_b_bresp,
    output wire                s_axi_b_bvalid,
    output wire                s_axi_b_arready,
    output wire                s_axi_b_rid,
    output wire [511:0]        s_axi_b_rdata,
    output wire [1:0]          s_axi_b_rresp,
    output wire                s_axi_b_rlast,
    output wire                s_axi_b_rvalid,
    /* port b, memory side (answered by the card-memory model) */
    output wire                m_axi_b_awid,
    output wire [63:0]         m_axi_b_awaddr,
    output wire [7:0]          m_axi_b_awlen,
    output wire [2:0]          m_axi_b_awsize,
    output wire [1:0]          m_axi_b_awburst,
    output wire                m_axi_b_awvalid,
    output wire [511:0]        m_axi_b_wdata,
    output wire [63:0]         m_axi_b_wstrb,
    output wire                m_axi_b_wlast,
    output wire                m_axi_b_wvalid,
    output wire                m_axi_b_bready,
    output wire                m_axi_b_arid,
    output wire [63:0]         m_axi_b_araddr,
    output wire [7:0]          m_axi_b_arlen,
    output wire [2:0]          m_axi_b_arsize,
    output wire [1:0]          m_axi_b_arburst,
    output wire                m_axi_b_arvalid,
    output wire                m_axi_b_rready,
    input  wire                m_axi_b_awready,
    input  wire                m_axi_b_wready,
    input  wire                m_axi_b_bid,
    input  wire [1:0]          m_axi_b_bresp,
    input  wire                m_axi_b_bvalid,
    input  wire                m_axi_b_arready,
    input  wire                m_axi_b_rid,
    input  wire [511:0]        m_axi_b_rdata,
    input  wire [1:0]          m_axi_b_rresp,
    input  wire                m_axi_b_rlast,
    input  wire                m_axi_b_rvalid
);

assign m_axi_a_awid = s_axi_a_awid;
assign m_axi_a_awaddr = s_axi_a_awaddr;
assign m_axi_a_awlen = s_axi_a_awlen;
assign m_axi_a_awsize = s_axi_a_awsize;
assign m_axi_a_awburst = s_axi_a_awburst;
assign m_axi_a_awvalid = s_axi_a_awvalid;
assign m_axi_a_wdata = s_axi_a_wdata;
assign m_axi_a_wstrb = s_axi_a_wstrb;
assign m_axi_a_wlast = s_axi_a_wlast;
assign m_axi_a_wvalid = s_axi_a_wvalid;
assign m_axi_a_bready = s_axi_a_bready;
assign m_axi_a_arid = s_axi_a_arid;
assign m_axi_a_araddr = s_axi_a_araddr;
assign m_axi_a_arlen = s_axi_a_arlen;
assign m_axi_a_arsize = s_axi_a_arsize;
assign m_axi_a_arburst = s_axi_a_arburst;
assign m_axi_a_arvalid = s_axi_a_arvalid;
assign m_axi_a_rready = s_axi_a_rready;
assign s_axi_a_awready = m_axi_a_awready;
assign s_axi_a_wready = m_axi_a_wready;
assign s_axi_a_bid = m_axi_a_bid;
assign s_axi_a_bresp = m_axi_a_bresp;
assign s_axi_a_bvalid = m_axi_a_bvalid;
assign s_axi_a_arready = m_axi_a_arready;
assign s_axi_a_rid = m_axi_a_rid;
assign s_axi_a_rdata = m_axi_a_rdata;
assign s_axi_a_rresp = m_axi_a_rresp;
assign s_axi_a_rlast = m_axi_a_rlast;
assign s_axi_a_rvalid = m_axi_a_rvalid;
assign m_axi_b_awid = s_axi_b_awid;
assign m_axi_b_awaddr = s_axi_b_awaddr;
assign m_axi_b_awlen = s_axi_b_awlen;
assign m_axi_b_awsize = s_axi_b_awsize;
assign m_axi_b_awburst = s_axi_b_awburst;
assign m_axi_b_awvalid = s_axi_b_awvalid;
assign m_axi_b_wdata = s_axi_b_wdata;
assign m_axi_b_wstrb = s_axi_b_wstrb;
assign m_axi_b_wlast = s_axi_b_wlast;
assign m_axi_b_wvalid = s_axi_b_wvalid;
assign m_axi_b_bready = s_axi_b_bready;
assign m_axi_b_arid = s_axi_b_arid;
assign m_axi_b_araddr = s_axi_b_araddr;
assign m_axi_b_arlen = s_axi_b_arlen;
assign m_axi_b_arsize = s_axi_b_arsize;
assign m_axi_b_arburst = s_axi_b_arburst;
assign m_axi_b_arvalid = s_axi_b_arvalid;
assign m_axi_b_rready = s_axi_b_rready;
assign s_axi_b_awready = m_axi_b_awready;
assign s_axi_b_wready = m_axi_b_wready;
assign s_axi_b_bid = m_axi_b_bid;
assign s_axi_b_bresp = m_axi_b_bresp;
assign s_axi_b_bvalid = m_axi_b_bvalid;
assign s_axi_b_arready = m_axi_b_arready;
assign s_axi_b_rid = m_axi_b_rid;
assign s_axi_b_rdata = m_axi_b_rdata;
assign s_axi_b_rresp = m_axi_b_rresp;
assign s_axi_b_rlast = m_axi_b_rlast;
assign s_axi_b_rvalid = m_axi_b_rvalid;

endmodule

`resetall
