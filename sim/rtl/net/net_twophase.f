# The two-phase step's blocks (sim/rtl/net/README.md "Two-phase step")
../fp/fp_delay.v
../fp/fp_lzc.v
../fp/fp64_add.v
../fp/fp32_sq_f64.v
../kernel/onic_fifo.v
../kernel/onic_axi_rd.v
../kernel/onic_axi_wr.v
onic_net_sumsq.v
onic_net_scalar.v
onic_net_twophase.v
