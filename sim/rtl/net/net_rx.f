../kernel/onic_fifo.v
onic_net_csum_beat.v
onic_net_rx_parse.v
onic_net_rx_fifo.v
onic_net_rx_seq.v
onic_net_rx.v
