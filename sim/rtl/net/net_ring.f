# Ring datapath of the card (sim/rtl/net/README.md "Ring datapath")
../fp/fp_delay.v
../fp/fp_lzc.v
../fp/fp32_add.v
../fp/fp32_to_bf16.v
../kernel/onic_fifo.v
../kernel/onic_dup_reg.v
../kernel/onic_axi_rd.v
../kernel/onic_axi_wr.v
../kernel/onic_beat_merge.v
../kernel/onic_beat_split.v
onic_net_reduce.v
onic_net_chunk_walk.v
onic_net_stripe_run.v
onic_net_rounds.v
onic_net_grad_reader.v
onic_net_packetize.v
onic_net_ring_dp.v
