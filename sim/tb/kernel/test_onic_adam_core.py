"""cocotb test of onic_adam_core on its own: the elastic lanes under hard output back-pressure.

Environment: LANES (the module's parameter, set by the runner), ONIC_SEED, ONIC_VECTORS.
The four input streams offer vectors with independent random gaps; the four output readys
drop independently at random, and in long stretches all at once (longer than the output
FIFOs take), so the credit counter must stop admission. Checked: every output vector bit for
bit against hls/golden.py (AdamW, fp32 in and out), the last mark on the last vector only,
exactly ceil(n / LANES) vectors, and that vectors admitted but not yet taken (in the lanes or
the output FIFOs) reach but never exceed the FIFO depth (the core would $finish on an overflow).
All inputs are written at the falling edge and the handshakes read 1 ns later, so the test runs
the same on every simulator.
"""

from __future__ import annotations

import os
import random
from typing import Any

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, Timer

from hls import golden

F32 = np.float32
OUT_FIFO = 256  # onic_adam_core OUT_FIFO_LOG2 = 8


def _pack(values: np.ndarray) -> int:
    word = 0
    for i, bits in enumerate(values.view(np.uint32).tolist()):
        word |= int(bits) << (32 * i)
    return word


def _unpack(word: int, lanes: int) -> np.ndarray:
    return np.array([(word >> (32 * i)) & 0xFFFFFFFF for i in range(lanes)], dtype=np.uint32)


@cocotb.test()
async def test_backpressure(dut: Any) -> None:
    lanes = int(os.environ["LANES"])
    seed = int(os.environ.get("ONIC_SEED", "1"))
    vectors = int(os.environ.get("ONIC_VECTORS", "1200"))
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    dut._log.info(f"seed {seed}, {lanes} lanes, {vectors} vectors")
    n = vectors * lanes - (lanes - 1 if lanes > 1 else 0)  # the last vector part full
    total = vectors * lanes
    p = nrng.standard_normal(total).astype(F32)
    m = (nrng.standard_normal(total) * 0.1).astype(F32)
    v = np.abs(nrng.standard_normal(total) * 0.01).astype(F32)
    g = nrng.standard_normal(total).astype(F32)
    scalars = golden.prepare_scalars(golden.Hyper(step=3, weight_decay=0.1, grad_scale=0.5), "adamw")
    ep, em, ev = p.copy(), m.copy(), v.copy()
    ey = golden.adam_update(ep, em, ev, g.copy(), scalars, optimizer="adamw")

    regs = scalars.registers("adamw")
    for name, port in (("gs", "gs"), ("decay", "wd"), ("b1", "b1"), ("omb1", "omb1"), ("b2", "b2"),
                       ("omb2", "omb2"), ("rbc2", "rbc2"), ("eps", "eps"), ("step_size", "step_size")):
        getattr(dut, port).value = regs[name]
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    ins = {"grad": g, "p": p, "m": m, "v": v}
    for name in ins:
        getattr(dut, f"s_{name}_valid").value = 0
        getattr(dut, f"s_{name}_data").value = 0
    for r in ("p", "m", "v", "y"):
        getattr(dut, f"m_{r}_ready").value = 0
    dut.start.value = 0
    dut.n.value = n
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 4)  # n is registered twice inside
    await FallingEdge(dut.clk)
    dut.start.value = 1
    await FallingEdge(dut.clk)
    dut.start.value = 0

    nxt = dict.fromkeys(ins, 0)  # next vector each input offers
    got: dict[str, list[np.ndarray]] = {r: [] for r in ("p", "m", "v", "y")}
    lasts: list[int] = []
    admitted = 0
    stall_left = 0
    cycles = 0
    worst_backlog = 0
    while len(lasts) < vectors:
        cycles += 1
        assert cycles < 200 * vectors, f"stuck: {admitted} admitted, {len(lasts)} out"
        for name, arr in ins.items():
            k = nxt[name]
            offer = k < vectors and rng.random() < 0.85
            getattr(dut, f"s_{name}_valid").value = int(offer)
            if k < vectors:
                getattr(dut, f"s_{name}_data").value = _pack(arr[k * lanes:(k + 1) * lanes])
        if stall_left == 0 and rng.random() < 0.004:
            stall_left = rng.randrange(150, 700)  # often longer than the FIFOs and the lanes hold
        if stall_left:
            stall_left -= 1
            readys = dict.fromkeys(("p", "m", "v", "y"), 0)
        else:
            readys = {r: int(rng.random() < 0.7) for r in ("p", "m", "v", "y")}
        for r, val in readys.items():
            getattr(dut, f"m_{r}_ready").value = val
        await Timer(1, unit="ns")
        if int(dut.s_grad_ready.value):
            for name in ins:
                assert int(getattr(dut, f"s_{name}_valid").value), f"{name} taken while not valid"
                nxt[name] += 1
            admitted += 1
        valids = {r: int(getattr(dut, f"m_{r}_valid").value) for r in ("p", "m", "v", "y")}
        assert len(set(valids.values())) == 1 and valids["p"] == int(dut.m_valid.value), f"path valids {valids}"
        if int(dut.m_valid.value) and all(readys.values()):
            for r in ("p", "m", "v", "y"):
                got[r].append(_unpack(int(getattr(dut, f"m_{r}_data").value), lanes))
            lasts.append(int(dut.m_last.value))
        worst_backlog = max(worst_backlog, admitted - len(lasts))
        await FallingEdge(dut.clk)
    for _ in range(300):  # nothing more comes out
        for r in ("p", "m", "v", "y"):
            getattr(dut, f"m_{r}_ready").value = 1
        for name in ins:
            getattr(dut, f"s_{name}_valid").value = 1
        await Timer(1, unit="ns")
        assert not int(dut.m_valid.value), "a vector after the run's last"
        assert not int(dut.s_grad_ready.value), "a vector taken after the run's last"
        await FallingEdge(dut.clk)

    dut._log.info(f"{cycles} clocks, most vectors inside at once {worst_backlog}")
    assert admitted == vectors
    # credits: FIFO contents + vectors in flight never exceed the FIFO depth, and the long stalls
    # used every credit (otherwise the test proved nothing about them)
    assert worst_backlog == OUT_FIFO, f"at most {worst_backlog} vectors inside, expected {OUT_FIFO}"
    assert lasts == [0] * (vectors - 1) + [1], "last mark"
    for r, want in (("p", ep), ("m", em), ("v", ev), ("y", ey)):
        have = np.concatenate(got[r]).view(F32)[:n]
        bad = golden.first_mismatch(have, want[:n])
        assert bad is None, f"{r}[{bad}]: {have[bad]!r} != {want[bad]!r}"
