"""cocotb side of `NetCluster("rtlsim", ...)` (pynq_driver/net/rtlsim.py): N RTL cards in one
simulation (test_onic_ring_cards.Ring: the generated top of `onic_card`s, each the network kernel
and the generated Adam RTL kernel, cocotbext-eth MAC ports, the seeded switch, card memory
models with AXI monitors) serving ring steps to the driver over a Unix socket.

Requests (JSON + a binary payload, the framing of pynq_driver/backends/rtlsim_server.py):
`step` (hyperparameters, two_phase, max_norm; payload: every rank's local gradient, rank order) runs
one ring step on every card and answers the clocks, each card's counters and every rank's gathered
parameters (payload, L elements each, rank order; `skipped` for a two-phase step the entries skip:
`Ring.step` gathers the current parameters then); a card's STATUS, an AXI protocol error, a MAC transmit
underflow or a step that does not finish becomes an error reply. `state` answers each owner's
p, m, v (S float32 each, rank order). `close` ends the simulation. Simulated time advances only
inside `step`.

Environment (set by the driver): ONIC_DRIVER_SOCKET, ONIC_RING (JSON: RingConfig's fields, faults,
seed, grad_stall, buffer_bytes), ONIC_RING_PARAMS (the initial full parameter vector, .npy),
ONIC_MANIFEST (the Adam kernel's manifest.json; absent: network kernels with the stand-in).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import cocotb
import numpy as np
from eth_switch import PortFaults
from test_onic_ring_cards import Ring, RingConfig

from hls.golden import Hyper
from pynq_driver.backends.sim_link import recv_message, send_message


@cocotb.test()
async def serve(dut: Any) -> None:
    opts = json.loads(os.environ["ONIC_RING"])
    cfg = RingConfig(**opts["config"])
    params = np.load(os.environ["ONIC_RING_PARAMS"])
    adam = json.loads(Path(os.environ["ONIC_MANIFEST"]).read_text()) if os.environ.get("ONIC_MANIFEST") else None
    ring_ = Ring(dut, cfg, params, faults=PortFaults(**opts["faults"]), buffer_bytes=opts.get("buffer_bytes"),
                 grad_stall=float(opts.get("grad_stall", 0.3)), seed=int(opts.get("seed", 1)), adam=adam)
    await ring_.reset()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["ONIC_DRIVER_SOCKET"])
    send_message(sock, {"ok": True, "hello": "ringsim", "world": cfg.world})
    n, length = cfg.world, cfg.length
    gdt = "<u2" if cfg.wire_dtype == "bf16" else "<f4"
    pdt = "<u2" if cfg.param_dtype == "bf16" else "<f4"
    while True:
        try:
            req, payload = recv_message(sock)
        except ConnectionError:
            return
        op = req["op"]
        try:
            if op == "step":
                flat = np.frombuffer(payload, gdt)
                if flat.size != n * length:
                    raise ValueError(f"step: {flat.size} gradient elements for {n} ranks of {length}")
                grads = [flat[k * length:(k + 1) * length].copy() for k in range(n)]
                max_norm = req.get("max_norm")
                res = await ring_.step(int(req["step"]), grads, Hyper(**req["hyper"]), limit=int(req["limit"]),
                                       two_phase=bool(req.get("two_phase", False)),
                                       max_norm=None if max_norm is None else float(max_norm))
                bad = [f"card {k}: STATUS {s:#x}" for k, s in enumerate(res.status) if s]
                bad += [f"card {k}: {m}" for k, m in enumerate(res.memory_ok) if m]
                bad += [f"card {k}: AXI {c.monitor.errors[:2]}" for k, c in enumerate(ring_.cards) if c.monitor.errors]
                bad += [f"card {k}: gradient stream {c.grad.errors[:2]}" for k, c in enumerate(ring_.cards)
                        if c.grad is not None and c.grad.errors]
                bad += ring_.tx_errors()
                if bad:
                    raise RuntimeError("; ".join(bad))
                counters = [{k: v for k, v in c.items() if not k.startswith("_")} for c in res.counters]
                out = b"".join(np.ascontiguousarray(g[:length]).astype(pdt, copy=False).tobytes() for g in res.gathered)
                send_message(sock, {"ok": True, "clocks": res.clocks, "counters": counters,
                             "switch": ring_.switch.core.reconcile(), "skipped": res.scale is None}, out)
            elif op == "state":
                shards = ring_.card_shards()  # from card memory (onic_card) or the stand-ins
                out = b"".join(np.asarray(getattr(s, f), np.float32).tobytes() for s in shards for f in "pmv")
                send_message(sock, {"ok": True, "size": int(shards[0].p.size)}, out)
            elif op == "close":
                send_message(sock, {"ok": True})
                sock.close()
                return
            else:
                send_message(sock, {"ok": False, "error": f"unknown request {op!r}"})
        except Exception as exc:  # reported to the driver, which raises it
            send_message(sock, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})

