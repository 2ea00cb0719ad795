"""Software cards on the wire (design.md section 8, issue point 5): the golden and csim cards speak
the ring protocol as processes would.

Each card is the protocol's card model (`hls.net.card`) around the owner's Adam kernel on a
software card (`kernel.ShardKernel`), with a UDP socket on 127.0.0.1 as its Ethernet port
(`transport`): every frame's exact bytes, FCS included, are one datagram. A seeded fault layer
(`faults`) can drop, duplicate, reorder, corrupt (one bit: the frame fails its FCS) and delay
frames. `node.RingNode` is one rank's card with its event-loop thread; `cluster.NetCluster` runs
N of them in one process; across processes each rank calls `RingNode.join(..., store=...)` and
learns its peers' addresses through torch.distributed's store (`rendezvous`; the store is
duck-typed, this package never imports torch). The RTL card's network kernel is driven through
`net_kernel` (its arguments checked and written, STATUS, counters and entries read back, over any
register port). The alveo backend cannot join a ring until the network bitstream exists
(`ToolMissing`).

Import the modules directly (`from pynq_driver.net.node import RingNode`).
"""
