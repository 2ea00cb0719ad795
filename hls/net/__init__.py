"""The ring protocol of design.md section 8: the card on the wire.

One concept per module, in layers: `wire` (the frame codec), `ring` (the collective schedule and
the exact reference of a whole step), `reliability` (go-back-N sender and receiver state
machines, no sockets, no clocks) and `card` (the packet-level model of one card, which the RTL
implements and the driver runs). Import the modules directly (`from hls.net import card`).
"""
