# Transmit side of the ring protocol (sim/rtl/net/README.md "Transmit")
../kernel/onic_fifo.v
../kernel/onic_dup_reg.v
onic_net_tx_header.v
onic_net_csum_beat.v
onic_net_tx_retx.v
onic_net_tx_arb.v
onic_net_tx.v
