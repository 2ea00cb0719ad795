"""cocotb tests of a generated RTL Adam/AdamW kernel (the top rendered from templates/rtl).

Configuration comes from the environment (hls/rtl/bench_runner.py sets it):
ONIC_MANIFEST   path of the generated project's manifest.json (spec and register map)
ONIC_ELEMENTS   comma-separated element counts for test_update (default "0,5,100")
ONIC_RUNS       consecutive kernel runs per element count, state left in memory (default 3)
ONIC_SEED       data and stall seed (default 1)
ONIC_STALLS     probability of a random ready/valid pause per clock on every channel (default 0.2)
ONIC_LATENCY    read latency of the ideal memory in clocks (default 64)
ONIC_MEMORY     card memory: "hbm" (channels of the memory plan with their bandwidth, 100-250 ns
                latency per burst) or "ideal" (no bandwidth limit, ONIC_LATENCY) (default ideal)
ONIC_RESULT     where to write a JSON summary (cycles per run, simulated clocks per second)
ONIC_BENCH_ELEMENTS  element count of test_throughput (default: the largest of ONIC_ELEMENTS)

Every array lives in stripes (hls/layout.py, the manifest's register_map.stripes): one buffer
per stripe, beat b of the array in stripe b % S; p, m and v have a read and a write port per
stripe, both pointed at the stripe's buffer.

test_update      bit-exact against hls/golden.py for every element count and run; memory past
                 each stripe's bytes must be untouched; on the stream, the second run's
                 shard carries junk beats before its TLAST, which the kernel must drop
test_control     ap_ctrl_hs: idle after reset, argument read-back, ap_done clear-on-read,
                 interrupt only when enabled, a start written while busy is ignored
test_status      the sticky STATUS word: a misaligned pointer (nothing read or written, a stream
                 shard dropped), an error response on a read and on a write port, stream shards
                 one beat short and one beat long; every run reaches ap_done and the next clean
                 run is bit-exact with STATUS 0 (every run of test_update checks STATUS too)
test_reset       ap_rst_n pulsed low mid-run at a random clock (seed printed; ONIC_SEED replays it)
                 while bursts are in flight: ap_idle after it, and the next run is bit-exact with
                 STATUS 0 (the protocol monitor checks nothing is valid during reset)
test_reset_interconnect  ap_rst_n pulsed low with card memory not reset (an interconnect on a reset
                 of its own) while read bursts, then write responses are in flight (no W burst
                 part-sent), the interrupted run on junk buffers answered 1,500+ clocks late: its
                 beats come back during the next run with the old ID and are dropped; the next
                 run is bit-exact with STATUS 0 (seed printed)
test_lite_restart  AXI4-Lite writes with random partial WSTRB merge bytes; auto_restart reruns
                 until cleared (n = 0, then three runs on data in place, bit-exact against three
                 golden steps), then the next run is bit-exact with STATUS 0
test_suppress    no write-back of wrong beats: an RRESP error on a random beat of a random p/m/v
                 read port (or, on the stream, a shard one beat short): STATUS and PORT_ERR name
                 it, every element of p, m, v and out is its old value or the golden one, and
                 every element from the failing beat on keeps its old value (seed printed)
test_stream_keep on the stream: TKEEP checked on every beat; null beats mid-shard and a null beat
                 with TLAST are skipped (bit-exact, STATUS 0), a shard one byte short or a mid beat
                 with a byte not kept give stream_keep with write-back suppressed (seed printed)
test_random      constrained-random runs (seed printed; ONIC_SEED replays): per run a random n,
                 per stripe a random 64-byte-aligned base (0, 4 KiB - 64 or any step), random
                 per-burst read and write latency ranges and stall rates; every run bit-exact
                 with STATUS 0 and at least one run with a multi-burst transfer on one port; on
                 the stream the next shard is queued before each run starts (back to back)
test_param_stream  out_sink memory+stream only: each run's m_axis_param packet is the out array
                 byte for byte (bit-exact vs golden and vs memory), TKEEP/TLAST right, TREADY
                 pauses and a 1000-clock hold lose nothing, n = 0 sends nothing
test_throughput  one run, no stalls: clocks and elements per clock (checked bit-exact too), and
                 per memory channel the beats it moved
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge
from hbm_memory import stall_generator
from kernel_tb import AP_DONE, AP_IDLE, AP_READY, AP_START, CTRL, GIE, IER, ISR, KernelTB, run_kernel

from hls import golden, layout

F32 = np.float32
PAGE = 4096
AUTO_RESTART = 1 << 7


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def load_config() -> dict[str, Any]:
    manifest = json.loads(Path(os.environ["ONIC_MANIFEST"]).read_text())
    return {
        "manifest": manifest,
        "spec": manifest["spec"],
        "elements": [int(x) for x in _env("ONIC_ELEMENTS", "0,5,100").split(",") if x.strip()],
        "runs": int(_env("ONIC_RUNS", "3")),
        "seed": int(_env("ONIC_SEED", "1")),
        "stalls": float(_env("ONIC_STALLS", "0.2")),
        "latency": int(_env("ONIC_LATENCY", "64")),
        "memory": _env("ONIC_MEMORY", "ideal"),
    }


def record(key: str, value: Any) -> None:
    path = os.environ.get("ONIC_RESULT")
    if not path:
        return
    p = Path(path)
    data = json.loads(p.read_text()) if p.exists() else {}
    data[key] = value
    p.write_text(json.dumps(data, indent=2))


ARRAY_PORTS = {"grad": ("{k}",), "p": ("{k}_rd", "{k}_wr"), "m": ("{k}_rd", "{k}_wr"), "v": ("{k}_rd", "{k}_wr"),
               "out": ("{k}",)}


class Layout:
    """Where each stripe buffer lives in card memory: page-spaced regions, bases off the page
    start by `skew` bytes (64-byte aligned) so bursts have to split at 4 KiB boundaries; with
    `skews` (a seeded Random) each stripe draws its own: 0, 4 KiB - 64 (its first burst is one
    beat) or any 64-byte step.

    `stripes[array]` is the array's stripe count (0: not in memory); `base[(array, k)]`,
    `used[(array, k)]` (bytes of the array's data in it) and `end[(array, k)]` (end of the
    region: guard bytes up to here) per stripe; `ports[port] = (array, k)`.
    """

    def __init__(self, spec: dict[str, Any], stripes: dict[str, int], n: int, skew: int,
                 skews: random.Random | None = None) -> None:
        gb = 4 if spec["grad_dtype"] == "fp32" else 2
        ob = 4 if spec["out_dtype"] == "fp32" else 2
        self.n = n
        self.elem = {"grad": gb, "p": 4, "m": 4, "v": 4, "out": ob}
        self.stripes = {"grad": stripes["grad"], "p": stripes["state"], "m": stripes["state"],
                        "v": stripes["state"], "out": stripes["out"]}
        self.base: dict[tuple[str, int], int] = {}
        self.used: dict[tuple[str, int], int] = {}
        self.end: dict[tuple[str, int], int] = {}
        self.ports: dict[str, tuple[str, int]] = {}
        addr = PAGE
        for name, eb in self.elem.items():
            count = self.stripes[name]
            nb = layout.beats(n, eb)
            pad = nb * layout.BEAT_BYTES - n * eb
            for k in range(count):
                if skews is not None:
                    skew = skews.choice([0, PAGE - 64, PAGE - 64, 64 * skews.randrange(64)])
                beats = layout.stripe_beats(nb, count, k)
                used = beats * layout.BEAT_BYTES - (pad if nb and k == (nb - 1) % count else 0)
                region = ((beats * layout.BEAT_BYTES + skew + 2 * PAGE - 1) // PAGE) * PAGE
                self.base[name, k] = addr + skew
                self.used[name, k] = used
                self.end[name, k] = addr + region
                addr += region
                for pattern in ARRAY_PORTS[name]:
                    self.ports[name + pattern.format(k=k)] = (name, k)
        self.size = 1 << max(20, (addr + PAGE - 1).bit_length())

    def write(self, mem: Any, name: str, data: np.ndarray) -> None:
        """Array `name` into its stripes: only the array's bytes, the padding keeps what was there."""
        for k, part in enumerate(layout.split(data, self.stripes[name])):
            mem.write(self.base[name, k], part[: self.used[name, k]].tobytes())

    def read(self, mem: Any, name: str, dtype: Any) -> np.ndarray:
        count = self.stripes[name]
        nb = layout.beats(self.n, self.elem[name])
        parts = [np.frombuffer(mem.read(self.base[name, k], layout.stripe_beats(nb, count, k) * layout.BEAT_BYTES),
                               np.uint8) for k in range(count)]
        return layout.join(parts, self.n, dtype)

    def guards(self, mem: Any) -> dict[tuple[str, int], bytes]:
        return {key: mem.read(self.base[key] + self.used[key], self.end[key] - self.base[key] - self.used[key])
                for key in self.base}


def stripe_counts(cfg: dict[str, Any]) -> dict[str, int]:
    return cfg["manifest"]["register_map"]["stripes"]


def make_state(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p = rng.standard_normal(n).astype(F32)
    m = (rng.standard_normal(n) * 0.1).astype(F32)
    v = (np.abs(rng.standard_normal(n)) * 0.01).astype(F32)
    specials = np.array([0.0, -0.0, 1e-40, -1e-45, np.inf, np.nan, 1e-30, -3e38], F32)
    idx = np.arange(n)
    sel = idx % 29 == 7
    p[sel] = specials[idx[sel] // 29 % len(specials)]
    return p, m, v


def make_grad(rng: np.random.Generator, n: int, grad_dtype: str, run: int) -> np.ndarray:
    g = (rng.standard_normal(n) * (10.0 ** rng.integers(-3, 1))).astype(F32)
    specials = np.array([0.0, -0.0, 1e-40, -1e-42, 3e38, -np.inf, np.inf, np.nan, 6e-8, 65504.0], F32)
    idx = np.arange(n)
    sel = idx % 13 == (3 + run) % 13
    g[sel] = specials[idx[sel] // 13 % len(specials)]
    if grad_dtype == "bf16":
        return golden.to_bf16_bits(g)
    if grad_dtype == "fp16":
        with np.errstate(over="ignore"):
            return g.astype(np.float16)
    return g


def describe_mismatch(name: str, got: np.ndarray, want: np.ndarray) -> str:
    i = golden.first_mismatch(got, want)
    if i is None:
        return ""
    bad = int(np.count_nonzero(~golden.bits_equal(got, want)))
    view = np.uint16 if got.dtype == np.uint16 else np.uint32
    return (f"{name}: {bad} of {got.size} elements differ; first at {i}: "
            f"got {int(got.view(view)[i]):#x} want {int(want.view(view)[i]):#x}")


def write_state(tb: KernelTB, lay: Layout, p: np.ndarray, m: np.ndarray, v: np.ndarray) -> None:
    for name, arr in (("p", p), ("m", m), ("v", v)):
        lay.write(tb.mem, name, arr)


def kernel_regs(tb: KernelTB, lay: Layout, n: int, scalars: golden.Scalars, optimizer: str) -> dict[str, int]:
    """The argument registers of one run: n, the optimizer's scalars and every port's stripe address."""
    regs: dict[str, int] = {"n": n, **scalars.registers(optimizer)}
    for name, arg in tb.args.items():
        if arg["kind"] == "pointer":
            regs[name] = lay.base[lay.ports[name]]
    return regs


def feed_grad(tb: KernelTB, lay: Layout, spec: dict[str, Any], grad: np.ndarray, extra: bytes = b"") -> None:
    """The gradient shard on the kernel's source: the AXI4-Stream (with `extra` junk before TLAST),
    or its stripe buffers in card memory."""
    if spec["grad_source"] == "stream":
        tb.send_stream(grad.tobytes() + extra)
    else:
        lay.write(tb.mem, "grad", grad)


def read_results(tb: KernelTB, lay: Layout, spec: dict[str, Any]) -> dict[str, np.ndarray]:
    out_dtype = np.uint16 if spec["out_dtype"] == "bf16" else F32
    return {"p": lay.read(tb.mem, "p", F32), "m": lay.read(tb.mem, "m", F32), "v": lay.read(tb.mem, "v", F32),
            "out": lay.read(tb.mem, "out", out_dtype)}


def make_tb(dut: Any, cfg: dict[str, Any], mem_size: int, stalls: float, seed: int = 1) -> KernelTB:
    return KernelTB(dut, manifest=cfg["manifest"], mem_size=mem_size, memory=cfg["memory"],
                    read_latency=cfg["latency"], stall_probability=stalls, seed=seed)


async def update_session(tb: KernelTB, cfg: dict[str, Any], n: int, rng: np.random.Generator,
                         lay: Layout) -> list[int]:
    """`runs` consecutive steps on one shard; state stays in card memory between runs."""
    spec = cfg["spec"]
    mem = tb.mem
    # garbage everywhere first: whatever the kernel must not touch keeps its value
    for key in lay.base:
        start = lay.base[key] - (lay.base[key] % PAGE)
        mem.write(start, rng.integers(0, 256, lay.end[key] - start, dtype=np.uint8).tobytes())
    p, m, v = make_state(rng, n)
    write_state(tb, lay, p, m, v)
    guard = lay.guards(mem)
    cycles = []
    for run in range(cfg["runs"]):
        grad = make_grad(rng, n, spec["grad_dtype"], run)
        hyper = golden.Hyper(lr=float(rng.choice([1e-3, 3e-4, 1e-2])), weight_decay=0.01, step=run + 1,
                             grad_scale=float(rng.choice([1.0, 0.5, 0.0625])))
        scalars = golden.prepare_scalars(hyper, spec["optimizer"])
        regs = kernel_regs(tb, lay, n, scalars, spec["optimizer"])
        junk = b""
        if spec["grad_source"] == "stream" and run == 1 and n:
            # a shard followed by junk beats before its TLAST: the kernel must drop them
            junk = rng.integers(0, 256, 2 * 64 + 12, dtype=np.uint8).tobytes()
        feed_grad(tb, lay, spec, grad, junk)
        want_out = golden.adam_update(p, m, v, grad, scalars, optimizer=spec["optimizer"],
                                      grad_dtype=spec["grad_dtype"], out_dtype=spec["out_dtype"])
        cycles.append(await run_kernel(tb, regs, timeout_cycles=200 * n + 20_000))
        status = await tb.read_status()
        want_status = 1 << status_bit(cfg, "stream_long") if junk else 0
        assert status == want_status, f"n={n} run {run + 1}: STATUS {status:#x}, want {want_status:#x}"
        got = read_results(tb, lay, spec)
        errors = [describe_mismatch(k, got[k], w) for k, w in (("p", p), ("m", m), ("v", v), ("out", want_out))]
        errors = [e for e in errors if e]
        for key, before in guard.items():
            if mem.read(lay.base[key] + lay.used[key], len(before)) != before:
                errors.append(f"{key[0]} stripe {key[1]}: memory past its {lay.used[key]} bytes was written")
        assert not errors, f"n={n} run {run + 1}: " + "; ".join(errors)
        if spec["grad_source"] == "stream":
            assert not tb.stream.count(), f"n={n} run {run + 1}: the kernel left stream beats unread"
    return cycles


def status_bit(cfg: dict[str, Any], name: str) -> int:
    return int(cfg["manifest"]["register_map"]["status"]["bits"][name])


def fresh_state(tb: KernelTB, spec: dict[str, Any], lay: Layout, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, golden.Scalars]:
    """Random bytes over every buffer's pages, then random p, m, v written and a random gradient:
    (p, m, v, grad, scalars) for one run."""
    for key in lay.base:
        start = lay.base[key] - (lay.base[key] % PAGE)
        tb.mem.write(start, rng.integers(0, 256, lay.end[key] - start, dtype=np.uint8).tobytes())
    p, m, v = make_state(rng, lay.n)
    write_state(tb, lay, p, m, v)
    grad = make_grad(rng, lay.n, spec["grad_dtype"], 0)
    return p, m, v, grad, golden.prepare_scalars(golden.Hyper(), spec["optimizer"])


async def status_run(tb: KernelTB, cfg: dict[str, Any], lay: Layout, rng: np.random.Generator, *,
                     grad_cut: int = 0, grad_extra: bytes = b"", regs_change: dict[str, int] | None = None,
                     check: bool = False) -> tuple[int, bool]:
    """One run on fresh state: (STATUS, whether memory outside p, m, v and out stayed untouched).
    `grad_cut` bytes are taken off the stream shard's end, `grad_extra` added before its TLAST;
    with `check` the results must be bit-exact."""
    spec, n = cfg["spec"], lay.n
    p, m, v, grad, scalars = fresh_state(tb, spec, lay, rng)
    regions = {key: tb.mem.read(lay.base[key], lay.end[key] - lay.base[key]) for key in lay.base}
    regs = {**kernel_regs(tb, lay, n, scalars, spec["optimizer"]), **(regs_change or {})}
    if spec["grad_source"] == "stream":
        data = grad.tobytes()
        tb.send_stream(data[: len(data) - grad_cut] + grad_extra)
    else:
        lay.write(tb.mem, "grad", grad)
        regions = {key: tb.mem.read(lay.base[key], lay.end[key] - lay.base[key]) for key in lay.base}
    await run_kernel(tb, regs, timeout_cycles=200 * n + 20_000)
    status = await tb.read_status()
    untouched = all(tb.mem.read(lay.base[key], len(before)) == before for key, before in regions.items())
    if check:
        want_out = golden.adam_update(p, m, v, grad, scalars, optimizer=spec["optimizer"],
                                      grad_dtype=spec["grad_dtype"], out_dtype=spec["out_dtype"])
        got = read_results(tb, lay, spec)
        errors = [describe_mismatch(k, got[k], w) for k, w in (("p", p), ("m", m), ("v", v), ("out", want_out))]
        assert not any(errors), "; ".join(e for e in errors if e)
    if spec["grad_source"] == "stream":
        assert not tb.stream.count(), "the kernel left stream beats unread"
    return status, untouched


@cocotb.test()
async def test_status(dut: Any) -> None:
    cfg = load_config()
    spec = cfg["spec"]
    seed = cfg["seed"]
    rng = np.random.default_rng(seed + 7)
    n = 20 * spec["lanes"] + 3
    lay = Layout(spec, stripe_counts(cfg), n, skew=61 * 64)
    tb = make_tb(dut, cfg, lay.size, cfg["stalls"], seed)
    dut._log.info("test_status: seed %d", seed)
    await tb.reset()
    assert await tb.read_status() == 0, "STATUS must read 0 after reset"
    bit = {name: 1 << status_bit(cfg, name) for name in cfg["manifest"]["register_map"]["status"]["bits"]}
    ports = [a for a, arg in tb.args.items() if arg["kind"] == "pointer"]
    writer = next(a for a in ports if a.endswith("_wr") or a.startswith("out"))
    reader = next(a for a in ports if not (a.endswith("_wr") or a.startswith("out")))

    status, untouched = await status_run(tb, cfg, lay, rng, regs_change={writer: lay.base[lay.ports[writer]] + 4})
    assert status == bit["misaligned"] and untouched, f"misaligned {writer}: STATUS {status:#x}, untouched {untouched}"
    status, _ = await status_run(tb, cfg, lay, rng, check=True)
    assert status == 0, f"clean run after a misaligned pointer: STATUS {status:#x}"

    tb.ports[reader].read_if.error_bursts = 1
    status, _ = await status_run(tb, cfg, lay, rng)
    assert status == bit["read_response"], f"SLVERR on {reader}: STATUS {status:#x}"
    assert await tb.read_port_errors() == [reader], f"SLVERR on {reader}: PORT_ERR {await tb.read_port_errors()}"
    # the last port in register-map order: its bit is in the last PORT_ERR word
    last = [a for a in ports if a.endswith("_wr") or a.startswith("out")][-1]
    tb.ports[last].write_if.error_bursts = 1
    status, _ = await status_run(tb, cfg, lay, rng)
    assert status == bit["write_response"], f"SLVERR on {last}: STATUS {status:#x}"
    assert await tb.read_port_errors() == [last], f"SLVERR on {last}: PORT_ERR {await tb.read_port_errors()}"
    status, _ = await status_run(tb, cfg, lay, rng, check=True)
    assert status == 0, f"clean run after error responses: STATUS {status:#x}"
    assert await tb.read_port_errors() == [], "PORT_ERR must clear when a run starts"

    # (multi-burst transfers within one run are checked by test_random: multi_burst_ports counts
    # bursts over all runs of a test, so it is only logged here)
    dut._log.info("test_status: %d bursts monitored", tb.monitor.bursts)

    if spec["grad_source"] == "stream":
        nbytes = n * (4 if spec["grad_dtype"] == "fp32" else 2)
        status, _ = await status_run(tb, cfg, lay, rng, grad_cut=nbytes % 64 or 64)
        assert status == bit["stream_short"], f"shard one beat short: STATUS {status:#x}"
        status, _ = await status_run(tb, cfg, lay, rng, grad_extra=bytes(-nbytes % 64 + 64), check=True)
        assert status == bit["stream_long"], f"shard one beat long: STATUS {status:#x}"
        status, _ = await status_run(tb, cfg, lay, rng, regs_change={writer: lay.base[lay.ports[writer]] + 4})
        assert status == bit["misaligned"], f"misaligned with a stream shard: STATUS {status:#x}"
        status, _ = await status_run(tb, cfg, lay, rng, check=True)
        assert status == 0, f"clean run after stream framing errors: STATUS {status:#x}"


@cocotb.test()
async def test_reset(dut: Any) -> None:
    cfg = load_config()
    spec = cfg["spec"]
    seed = cfg["seed"]
    rng = np.random.default_rng(seed + 11)
    pick = random.Random(seed + 11)
    n = 64 * spec["lanes"] + 5
    lay = Layout(spec, stripe_counts(cfg), n, skew=62 * 64)
    tb = make_tb(dut, cfg, lay.size, cfg["stalls"], seed)
    await tb.reset()
    for attempt in range(2):
        at, low = pick.randrange(20, 400), pick.randrange(2, 9)
        dut._log.info("test_reset: seed %d, reset %d clocks after ap_start for %d clocks", seed, at, low)
        p, m, v = make_state(rng, n)
        write_state(tb, lay, p, m, v)
        grad = make_grad(rng, n, spec["grad_dtype"], 0)
        feed_grad(tb, lay, spec, grad)
        scalars = golden.prepare_scalars(golden.Hyper(), spec["optimizer"])
        await tb.write_args(kernel_regs(tb, lay, n, scalars, spec["optimizer"]))
        await tb.write_reg(CTRL, AP_START)
        await ClockCycles(dut.ap_clk, at)
        dut.ap_rst_n.value = 0
        await ClockCycles(dut.ap_clk, low)
        dut.ap_rst_n.value = 1
        await ClockCycles(dut.ap_clk, 4)
        tb.card.start()
        if tb.stream is not None:
            tb.stream.clear()
        assert await tb.read_reg(CTRL) & AP_IDLE, f"attempt {attempt}: not idle after a reset mid-run"
        assert tb.monitor.errors == [], "; ".join(tb.monitor.errors)
        status, _ = await status_run(tb, cfg, lay, rng, check=True)
        assert status == 0, f"attempt {attempt}: STATUS {status:#x} on the run after a reset"


def _w_settled(port: Any) -> bool:
    """No write burst of this monitored port is part-sent: every W beat matched to an AW and back."""
    return not port.aw_lens and not port.w_lens and port.w_beats == 0


@cocotb.test()
async def test_reset_interconnect(dut: Any) -> None:
    """A reset of the kernel alone while card memory (the interconnect) is not reset and keeps
    answering: once with read bursts in flight, once with write responses in flight (never with a
    W burst part-sent: AXI4 gives W no ID, design.md 3b). The interrupted run works on a copy of
    the buffers filled with junk, and its bursts answer 1,500-2,000 clocks late, so their beats
    and responses arrive, with the old epoch's ID, while the next run has its own bursts out; they
    must be dropped: the next run is bit-exact with STATUS 0 and ends with its own responses, and
    the stale ones were really seen on the ports."""
    cfg = load_config()
    spec = cfg["spec"]
    seed = cfg["seed"]
    rng = np.random.default_rng(seed + 13)
    pick = random.Random(seed + 13)
    n = 256 * spec["lanes"] + 5
    lay = Layout(spec, stripe_counts(cfg), n, skew=60 * 64)
    tb = KernelTB(dut, manifest=cfg["manifest"], mem_size=2 * lay.size, memory=cfg["memory"],
                  read_latency=cfg["latency"], stall_probability=cfg["stalls"], seed=seed, memory_reset=False)
    await tb.reset()
    normal, late = (100, 300), (1500, 2000)
    mon = tb.monitor
    readers = [p for p in mon.ports if p.has_ar]
    writers = [p for p in mon.ports if p.has_aw]
    for case in ("read bursts", "write responses"):
        p, m, v = make_state(rng, n)
        write_state(tb, lay, p, m, v)
        feed_grad(tb, lay, spec, make_grad(rng, n, spec["grad_dtype"], 0))
        scalars = golden.prepare_scalars(golden.Hyper(), spec["optimizer"])
        # the interrupted run on junk in a copy of the buffers (lay.size further on): a stale beat
        # taken as the next run's data would show
        tb.mem.write(lay.size, rng.integers(0, 256, lay.size, dtype=np.uint8).tobytes())
        regs = kernel_regs(tb, lay, n, scalars, spec["optimizer"])
        await tb.write_args({name: value + lay.size if tb.args[name]["kind"] == "pointer" else value
                             for name, value in regs.items()})
        tb.card.set_latency(read=late if case == "read bursts" else normal,
                            write=late if case == "write responses" else normal)
        await tb.write_reg(CTRL, AP_START)
        skip = pick.randrange(0, 40)  # not always the first such clock
        for _ in range(50_000):
            await RisingEdge(dut.ap_clk)
            await ReadOnly()
            if case == "read bursts":
                hazard = any(sum(b[1] for b in port.r_bursts) for port in readers)
            else:
                hazard = any(port.b_wait for port in writers)
            if hazard and all(_w_settled(port) for port in writers):
                if skip == 0:
                    break
                skip -= 1
        else:
            raise AssertionError(f"{case}: no clock with them in flight and no W burst part-sent")
        owed_r = sum(b[1] for port in readers for b in port.r_bursts)
        owed_b = sum(len(port.b_wait) for port in writers)
        stale_r, stale_b = mon.stale_r_beats, mon.stale_b
        await FallingEdge(dut.ap_clk)
        low = pick.randrange(2, 9)
        dut.ap_rst_n.value = 0
        await ClockCycles(dut.ap_clk, low)
        dut.ap_rst_n.value = 1
        tb.card.set_latency(read=normal, write=normal)
        await ClockCycles(dut.ap_clk, 4)
        if tb.stream is not None:
            tb.stream.clear()
        assert await tb.read_reg(CTRL) & AP_IDLE, f"{case}: not idle after the reset"
        status, _ = await status_run(tb, cfg, lay, rng, check=True)
        seen_r, seen_b = mon.stale_r_beats - stale_r, mon.stale_b - stale_b
        dut._log.info("test_reset_interconnect: seed %d, %s: reset for %d clocks with %d R beats and %d B responses "
                      "owed; %d stale R beats and %d stale B responses came after it", seed, case, low, owed_r, owed_b,
                      seen_r, seen_b)
        assert status == 0, f"{case}: STATUS {status:#x} on the run after a reset"
        assert not mon.errors, "AXI4 protocol monitor: " + "; ".join(mon.errors)
        assert (seen_r if case == "read bursts" else seen_b) > 0, f"{case}: none came back after the reset"


@cocotb.test()
async def test_lite_restart(dut: Any) -> None:
    """AXI4-Lite writes with partial WSTRB merge bytes; auto_restart reruns until cleared; the run
    after it is bit-exact with STATUS 0. Seeded (ONIC_SEED replays it)."""
    cfg = load_config()
    spec = cfg["spec"]
    seed = cfg["seed"]
    pick = random.Random(seed + 23)
    rng = np.random.default_rng(seed + 23)
    n = 8 * spec["lanes"] + 1
    lay = Layout(spec, stripe_counts(cfg), n, skew=63 * 64)
    tb = make_tb(dut, cfg, lay.size, cfg["stalls"], seed)
    await tb.reset()
    scalars = [name for name, arg in tb.args.items() if arg["kind"] == "scalar"]
    for _ in range(8):
        name = pick.choice(scalars)
        offset = tb.args[name]["offset"]
        old, new = pick.getrandbits(32), pick.getrandbits(32)
        strb = pick.randrange(1, 15)
        dut._log.info("test_lite_restart: seed %d, %s: %#x then %#x with WSTRB %#x", seed, name, old, new, strb)
        await tb.write_reg(offset, old)
        for byte in range(4):
            if strb >> byte & 1:
                await tb.host.write(offset + byte, bytes([new >> (8 * byte) & 0xFF]))
        mask = sum(0xFF << (8 * b) for b in range(4) if strb >> b & 1)
        want = (new & mask) | (old & ~mask & 0xFFFFFFFF)
        got = await tb.read_reg(offset)
        assert got == want, f"{name}: WSTRB {strb:#x} wrote {got:#x}, want {want:#x}"

    # auto_restart with n = 0: the kernel reruns by itself until bit 7 is cleared
    await tb.write_args({"n": 0})
    await tb.write_reg(CTRL, AP_START | AUTO_RESTART)
    dones = 0
    for _ in range(200):
        await ClockCycles(dut.ap_clk, 4)
        dones += bool(await tb.read_reg(CTRL) & AP_DONE)
        if dones >= 3:
            break
    assert dones >= 3, f"auto_restart: {dones} runs seen"
    await tb.write_reg(CTRL, 0)
    for _ in range(200):
        ctrl = await tb.read_reg(CTRL)
        if ctrl & AP_IDLE and not ctrl & AP_START:
            break
        await ClockCycles(dut.ap_clk, 4)
    assert ctrl & AP_IDLE and not ctrl & AP_START, f"auto_restart cleared, CTRL {ctrl:#x}"
    await ClockCycles(dut.ap_clk, 50)
    assert await tb.read_reg(CTRL) & AP_IDLE, "the kernel restarted after auto_restart was cleared"

    # auto_restart with data: cleared right after the second ap_done, while the third run (which
    # starts on the clock of that done) goes on, so exactly three runs update the state in place
    # (on the stream, three shards queued back to back), each bit-exact against the golden model
    p, m, v = make_state(rng, n)
    write_state(tb, lay, p, m, v)
    grad = make_grad(rng, n, spec["grad_dtype"], 0)
    step_scalars = golden.prepare_scalars(golden.Hyper(step=2), spec["optimizer"])
    if spec["grad_source"] == "stream":
        for _ in range(3):
            tb.send_stream(grad.tobytes())
    else:
        lay.write(tb.mem, "grad", grad)
    await tb.write_args(kernel_regs(tb, lay, n, step_scalars, spec["optimizer"]))
    await tb.write_reg(CTRL, AP_START | AUTO_RESTART)
    dones = 0
    for _ in range(20_000):
        ctrl = await tb.read_reg(CTRL)
        dones += bool(ctrl & AP_DONE)
        if dones == 2:
            await tb.write_reg(CTRL, 0)
            break
    for _ in range(20_000):
        ctrl = await tb.read_reg(CTRL)
        dones += bool(ctrl & AP_DONE)
        if ctrl & AP_IDLE and not ctrl & AP_START:
            break
    assert dones == 3, f"auto_restart with n={n}: {dones} runs, want 3 (cleared after the second)"
    for _ in range(3):
        want_out = golden.adam_update(p, m, v, grad, step_scalars, optimizer=spec["optimizer"],
                                      grad_dtype=spec["grad_dtype"], out_dtype=spec["out_dtype"])
    got = read_results(tb, lay, spec)
    errors = [describe_mismatch(k, got[k], w) for k, w in (("p", p), ("m", m), ("v", v), ("out", want_out))]
    assert not any(errors), "three auto_restart runs: " + "; ".join(e for e in errors if e)
    assert await tb.read_status() == 0, "STATUS after auto_restart runs with data"
    tb.monitor.check_idle()
    assert not tb.monitor.errors, "AXI4 protocol monitor: " + "; ".join(tb.monitor.errors)
    if tb.stream is not None:
        assert not tb.stream.count(), "auto_restart runs left stream shards unread"

    status, _ = await status_run(tb, cfg, lay, rng, check=True)
    assert status == 0, f"STATUS {status:#x} after auto_restart runs"


@cocotb.test()
async def test_update(dut: Any) -> None:
    cfg = load_config()
    seed = cfg["seed"]
    rng = np.random.default_rng(seed)
    biggest = Layout(cfg["spec"], stripe_counts(cfg), max(cfg["elements"] + [1]), skew=63 * 64)
    tb = make_tb(dut, cfg, biggest.size, cfg["stalls"], seed)
    await tb.reset()
    assert await tb.read_reg(CTRL) & AP_IDLE, "ap_idle must be set after reset"
    summary = {}
    wall = time.perf_counter()
    clocks = 0
    for k, n in enumerate(cfg["elements"]):
        lay = Layout(cfg["spec"], stripe_counts(cfg), n, skew=(k * 5 % 64) * 64)
        cycles = await update_session(tb, cfg, n, rng, lay)
        summary[str(n)] = cycles
        clocks += sum(cycles)
        dut._log.info("n=%d: %d runs bit-exact, clocks per run %s", n, cfg["runs"], cycles)
    record("update", {"cycles": summary, "wall_s": time.perf_counter() - wall, "clocks": clocks})


@cocotb.test()
async def test_throughput(dut: Any) -> None:
    """One run, no stalls: the clocks a shard of n elements takes (the efficiency benchmark)."""
    cfg = load_config()
    spec = cfg["spec"]
    n = int(_env("ONIC_BENCH_ELEMENTS", str(max(cfg["elements"]))))
    rng = np.random.default_rng(cfg["seed"])
    lay = Layout(spec, stripe_counts(cfg), n, skew=0)
    tb = make_tb(dut, cfg, lay.size, 0.0)
    await tb.reset()
    p, m, v = make_state(rng, n)
    grad = make_grad(rng, n, spec["grad_dtype"], 0)
    write_state(tb, lay, p, m, v)
    scalars = golden.prepare_scalars(golden.Hyper(), spec["optimizer"])
    regs = kernel_regs(tb, lay, n, scalars, spec["optimizer"])
    feed_grad(tb, lay, spec, grad)
    tb.card.reset_counters()
    wall, cpu = time.perf_counter(), time.process_time()
    cycles = await run_kernel(tb, regs, timeout_cycles=100 * n + 20_000, use_interrupt=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    channels = tb.card.stats()
    want_out = golden.adam_update(p, m, v, grad, scalars, optimizer=spec["optimizer"],
                                  grad_dtype=spec["grad_dtype"], out_dtype=spec["out_dtype"])
    got = read_results(tb, lay, spec)
    error = describe_mismatch("out", got["out"], want_out)
    assert not error, error
    result = {
        "elements": n,
        "cycles": cycles,
        "elements_per_cycle": n / cycles if cycles else 0.0,
        "lanes": spec["lanes"],
        "fraction_of_ideal": (n / cycles) / spec["lanes"] if cycles else 0.0,
        "latency": cfg["latency"],
        "memory": cfg["memory"],
        "stripes": stripe_counts(cfg),
        "channels": channels,
        "wall_s": wall,
        "sim_clocks_per_s": cycles / wall if wall > 0 else 0.0,
        # CPU time of the simulator process (HDL model and Python models): the rate on an idle core
        "cpu_s": cpu,
        "sim_clocks_per_cpu_s": cycles / cpu if cpu > 0 else 0.0,
    }
    dut._log.info("throughput: %s", result)
    record("throughput", result)


@cocotb.test()
async def test_control(dut: Any) -> None:
    cfg = load_config()
    spec = cfg["spec"]
    rng = np.random.default_rng(cfg["seed"] + 100)
    n = 600
    lay = Layout(spec, stripe_counts(cfg), n, skew=64)
    tb = make_tb(dut, cfg, lay.size, 0.0)
    await tb.reset()
    ctrl = await tb.read_reg(CTRL)
    assert ctrl & AP_IDLE and not ctrl & (AP_START | AP_DONE | AP_READY), f"after reset CTRL={ctrl:#x}"
    assert not int(dut.interrupt.value)

    # arguments read back, reserved words read 0
    pattern = random.Random(cfg["seed"])
    regs: dict[str, int] = {}
    for name, arg in tb.args.items():
        if arg["kind"] == "pointer":
            regs[name] = pattern.getrandbits(64) & ~0x3F
        elif arg["kind"] == "scalar":
            regs[name] = pattern.getrandbits(32)
    await tb.write_args(regs)
    for name, value in regs.items():
        got = await tb.read_arg(name)
        assert got == value, f"{name}: wrote {value:#x}, read back {got:#x}"
        arg = tb.args[name]
        reserved = arg["offset"] + (8 if arg["kind"] == "pointer" else 4)
        assert await tb.read_reg(reserved) == 0, f"{name}: reserved word at {reserved:#x} is not 0"

    # one real run, interrupts disabled: no interrupt; a second start while busy is ignored
    p, m, v = make_state(rng, n)
    write_state(tb, lay, p, m, v)
    grad = make_grad(rng, n, spec["grad_dtype"], 0)
    scalars = golden.prepare_scalars(golden.Hyper(step=1), spec["optimizer"])
    regs = kernel_regs(tb, lay, n, scalars, spec["optimizer"])
    feed_grad(tb, lay, spec, grad)
    want = golden.adam_update(p, m, v, grad, scalars, optimizer=spec["optimizer"],
                              grad_dtype=spec["grad_dtype"], out_dtype=spec["out_dtype"])
    await tb.write_args(regs)
    # IER on, GIE off: ISR records done (so the host can see it without reading CTRL, which
    # would clear ap_done) while the interrupt pin must stay low
    await tb.write_reg(IER, 1)
    await tb.write_reg(CTRL, AP_START)
    ctrl = await tb.read_reg(CTRL)
    assert ctrl & AP_START and not ctrl & AP_IDLE, f"running: CTRL={ctrl:#x}"
    await tb.write_reg(CTRL, AP_START)  # second start while busy
    seen_irq = False
    for _ in range(200 * n):
        await ClockCycles(dut.ap_clk, 8)
        seen_irq |= bool(int(dut.interrupt.value))
        if await tb.read_reg(ISR) & 1:
            break
    await ClockCycles(dut.ap_clk, 50)
    assert not seen_irq and not int(dut.interrupt.value), "interrupt fired with GIE off"
    await tb.write_reg(ISR, 1)
    await tb.write_reg(IER, 0)
    ctrl = await tb.read_reg(CTRL)
    assert ctrl & AP_DONE and ctrl & AP_IDLE and ctrl & AP_READY and not ctrl & AP_START, \
        f"after the run CTRL={ctrl:#x} (expected done, idle, ready; no start pending)"
    ctrl = await tb.read_reg(CTRL)
    assert not ctrl & AP_DONE and not ctrl & AP_READY, f"ap_done/ap_ready must clear on read: CTRL={ctrl:#x}"
    await ClockCycles(dut.ap_clk, 200)
    assert await tb.read_reg(CTRL) & AP_IDLE, "a start written while busy started a second run"
    got = read_results(tb, lay, spec)
    error = describe_mismatch("out", got["out"], want)
    assert not error, error
    assert not describe_mismatch("p", got["p"], p), "p was updated more than once"

    # interrupt: enabled -> fires on done; ISR toggles on write; drops when cleared
    await tb.write_reg(GIE, 1)
    await tb.write_reg(IER, 1)
    assert await tb.read_reg(GIE) == 1 and await tb.read_reg(IER) == 1
    regs["n"] = 0
    cycles = await run_kernel(tb, regs, timeout_cycles=1000, use_interrupt=True)
    assert cycles < 100, f"a zero-element run took {cycles} clocks"
    assert not int(dut.interrupt.value), "interrupt still high after ISR was cleared"
    assert await tb.read_reg(ISR) == 0
    # ready interrupt (IER bit 1) too, then GIE off masks the pin but not ISR
    await tb.write_reg(IER, 3)
    await tb.write_args({"n": 0})
    await tb.write_reg(CTRL, AP_START)
    for _ in range(200):
        await RisingEdge(dut.ap_clk)
        if int(dut.interrupt.value):
            break
    assert int(dut.interrupt.value), "interrupt did not fire with GIE and IER set"
    assert await tb.read_reg(ISR) == 3, "ISR must show done and ready"
    await tb.write_reg(GIE, 0)
    await ClockCycles(dut.ap_clk, 2)
    assert not int(dut.interrupt.value), "GIE=0 must mask the interrupt pin"
    await tb.write_reg(ISR, 1)
    assert await tb.read_reg(ISR) == 2, "writing 1 to ISR bit 0 must toggle only that bit"
    await tb.write_reg(ISR, 2)
    assert await tb.read_reg(ISR) == 0
    await tb.read_reg(CTRL)
    assert await tb.read_reg(CTRL) & AP_IDLE


def kept_or_golden(before: dict[str, np.ndarray], got: dict[str, np.ndarray], want: dict[str, np.ndarray],
                   first_bad: int) -> list[str]:
    """In p, m, v and out, every element is its old value or the golden one; from `first_bad` on, the old one."""
    errors = []
    for name in ("p", "m", "v", "out"):
        old = golden.bits_equal(got[name], before[name])
        new = golden.bits_equal(got[name], want[name])
        wrong = np.flatnonzero(~(old | new))
        if wrong.size:
            errors.append(f"{name}: {wrong.size} elements neither old nor golden, first at {wrong[0]}")
        late = np.flatnonzero(~old[first_bad:])
        if late.size:
            errors.append(f"{name}: {late.size} elements at or after element {first_bad} (the failing beat) were "
                          f"written, first at {first_bad + late[0]}")
    return errors


async def suppress_run(tb: KernelTB, cfg: dict[str, Any], lay: Layout, rng: np.random.Generator, *,
                       grad_cut: int = 0, beats: Any = None) -> tuple[int, dict[str, np.ndarray],
                                                                 dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One run on fresh state whose error the caller armed: (STATUS, arrays before, after, golden).
    On the stream, `beats` (a function of the shard's bytes giving (bytes, TKEEP) beats) sends the
    shard beat by beat, else it goes whole less its last `grad_cut` bytes."""
    spec, n = cfg["spec"], lay.n
    p, m, v, grad, scalars = fresh_state(tb, spec, lay, rng)
    if spec["grad_source"] == "stream" and beats is not None:
        tb.send_stream_beats(beats(grad.tobytes()))
    elif spec["grad_source"] == "stream":
        data = grad.tobytes()
        tb.send_stream(data[: len(data) - grad_cut])
    else:
        lay.write(tb.mem, "grad", grad)
    before = read_results(tb, lay, spec)
    await run_kernel(tb, kernel_regs(tb, lay, n, scalars, spec["optimizer"]), timeout_cycles=200 * n + 20_000)
    status = await tb.read_status()
    want_out = golden.adam_update(p, m, v, grad, scalars, optimizer=spec["optimizer"],
                                  grad_dtype=spec["grad_dtype"], out_dtype=spec["out_dtype"])
    want = {"p": p, "m": m, "v": v, "out": want_out}
    if spec["grad_source"] == "stream":
        assert not tb.stream.count(), "the kernel left stream beats unread"
    return status, before, read_results(tb, lay, spec), want


@cocotb.test()
async def test_suppress(dut: Any) -> None:
    cfg = load_config()
    spec = cfg["spec"]
    seed = cfg["seed"]
    pick = random.Random(seed + 41)
    rng = np.random.default_rng(seed + 41)
    stripes = stripe_counts(cfg)["state"]
    # a short shard with any beat failing, then a long one failing late in a stripe: a read runs at
    # most its 256-beat FIFO (plus the 128-beat write FIFO) ahead of the write-back, so from stripe
    # beat 450 on the beats before the failing one have partly been written back already
    late = 450
    sizes = [40 * spec["lanes"] + 7, (late + 40) * stripes * 16 + 5]
    lays = [Layout(spec, stripe_counts(cfg), n, skew=0, skews=pick) for n in sizes]
    tb = make_tb(dut, cfg, max(lay.size for lay in lays), cfg["stalls"], seed)
    await tb.reset()
    bit = {name: 1 << status_bit(cfg, name) for name in cfg["manifest"]["register_map"]["status"]["bits"]}
    for attempt, lay in enumerate(lays):
        nb = layout.beats(lay.n, 4)
        array = pick.choice(["p", "m", "v"])
        k = pick.randrange(min(stripes, nb))
        count = layout.stripe_beats(nb, stripes, k)
        beat = pick.randrange(count) if attempt == 0 else pick.randrange(late, count)
        port = f"{array}{k}_rd"
        first_bad = (beat * stripes + k) * 16  # beat b of stripe k is array beat b * S + k: 16 fp32 each
        dut._log.info("test_suppress: seed %d, n=%d, SLVERR on beat %d of %s (elements %d on)", seed, lay.n, beat,
                      port, first_bad)
        tb.ports[port].read_if.fail_beats({beat})
        status, before, got, want = await suppress_run(tb, cfg, lay, rng)
        tb.ports[port].read_if.fail_beats(set())
        assert status == bit["read_response"], f"SLVERR on {port} beat {beat}: STATUS {status:#x}"
        assert await tb.read_port_errors() == [port], f"PORT_ERR {await tb.read_port_errors()}, want [{port}]"
        errors = kept_or_golden(before, got, want, first_bad)
        assert not errors, f"SLVERR on {port} beat {beat}: " + "; ".join(errors)
        written = int(np.count_nonzero(golden.bits_equal(got["p"], want["p"]) & ~golden.bits_equal(got["p"],
                                                                                                   before["p"])))
        dut._log.info("test_suppress: %d of %d p elements written back (first bad element %d)", written, lay.n,
                      first_bad)
        if attempt == 1:
            assert written > 0, "nothing was written back before a late read error: suppress came too early"
    if spec["grad_source"] == "stream":
        lay = lays[0]
        nbytes = lay.n * (4 if spec["grad_dtype"] == "fp32" else 2)
        cut = nbytes % 64 or 64
        first_bad = (nbytes - cut) // lay.elem["grad"]  # the first element of the missing beat
        status, before, got, want = await suppress_run(tb, cfg, lay, rng, grad_cut=cut)
        assert status == bit["stream_short"], f"shard one beat short: STATUS {status:#x}"
        errors = kept_or_golden(before, got, want, first_bad)
        assert not errors, "shard one beat short: " + "; ".join(errors)
    status, _ = await status_run(tb, cfg, lays[0], rng, check=True)
    assert status == 0 and await tb.read_port_errors() == [], f"clean run after: STATUS {status:#x}"


def shard_beats(data: bytes) -> list[tuple[bytes, int]]:
    """A shard as a right sender cuts it: 64-byte beats, TKEEP all ones but on the last beat, which
    keeps exactly its bytes."""
    beats = [data[i:i + 64] for i in range(0, len(data), 64)]
    return [(b, (1 << len(b)) - 1) for b in beats]


@cocotb.test()
async def test_stream_keep(dut: Any) -> None:
    """TKEEP on the stream (seed printed): an exact shard beat by beat and one with null beats (TKEEP
    0, junk data) mid-shard and a null beat carrying TLAST after the last data beat are bit-exact
    with STATUS 0; a shard one byte short and one with a byte of a mid beat not kept give
    stream_keep, every element its old or golden value and none from the failing beat on written."""
    cfg = load_config()
    spec = cfg["spec"]
    if spec["grad_source"] != "stream":
        return
    seed = cfg["seed"]
    pick = random.Random(seed + 47)
    rng = np.random.default_rng(seed + 47)
    n = 20 * spec["lanes"] + 3
    lay = Layout(spec, stripe_counts(cfg), n, skew=0, skews=pick)
    tb = make_tb(dut, cfg, lay.size, cfg["stalls"], seed)
    await tb.reset()
    bit = 1 << status_bit(cfg, "stream_keep")
    per_beat = 64 // lay.elem["grad"]
    nb = -(-n // per_beat)

    def exact_with_nulls(data: bytes) -> list[tuple[bytes, int]]:
        beats = shard_beats(data)
        for at in sorted(pick.sample(range(len(beats)), min(3, len(beats))), reverse=True):
            beats.insert(at, (rng.integers(0, 256, 64, dtype=np.uint8).tobytes(), 0))
        return [*beats, (bytes(64), 0)]  # the last data beat without TLAST, a null beat with it

    for name, make in (("exact shard", shard_beats), ("null beats", exact_with_nulls)):
        status, _before, got, want = await suppress_run(tb, cfg, lay, rng, beats=make)
        assert status == 0, f"{name}: STATUS {status:#x}"
        errors = [describe_mismatch(k, got[k], want[k]) for k in ("p", "m", "v", "out")]
        assert not any(errors), f"{name}: " + "; ".join(e for e in errors if e)

    mid = pick.randrange(nb - 1)
    lane = pick.randrange(64)
    dut._log.info("test_stream_keep: seed %d, n=%d, TKEEP byte %d of beat %d cleared", seed, n, lane, mid)

    def hole(data: bytes) -> list[tuple[bytes, int]]:
        beats = shard_beats(data)
        beats[mid] = (beats[mid][0], beats[mid][1] & ~(1 << lane))
        return beats

    for name, kwargs, first_bad in (("one byte short", {"grad_cut": 1}, (nb - 1) * per_beat),
                                    (f"byte {lane} of beat {mid} not kept", {"beats": hole}, mid * per_beat)):
        status, before, got, want = await suppress_run(tb, cfg, lay, rng, **kwargs)
        assert status == bit, f"{name}: STATUS {status:#x}, want stream_keep {bit:#x}"
        errors = kept_or_golden(before, got, want, first_bad)
        assert not errors, f"{name}: " + "; ".join(errors)
    status, _ = await status_run(tb, cfg, lay, rng, check=True)
    assert status == 0, f"clean run after TKEEP errors: STATUS {status:#x}"


@cocotb.test()
async def test_random(dut: Any) -> None:
    cfg = load_config()
    spec = cfg["spec"]
    seed = cfg["seed"]
    pick = random.Random(seed + 53)
    rng = np.random.default_rng(seed + 53)
    lanes = spec["lanes"]
    runs = []
    for _ in range(int(_env("ONIC_RANDOM_RUNS", "5"))):
        n = pick.choice([pick.randrange(1, 8 * lanes), pick.randrange(8 * lanes, 400 * lanes // 4 + 600)])
        lay = Layout(spec, stripe_counts(cfg), n, skew=0, skews=pick)
        read_lo = pick.randrange(1, 120)
        write_lo = pick.randrange(0, 120)
        runs.append({"n": n, "lay": lay, "read": (read_lo, read_lo + pick.randrange(0, 200)),
                     "write": (write_lo, write_lo + pick.randrange(0, 200)), "stalls": pick.choice([0.0, 0.1, 0.3])})
    # the biggest n last but one: the multi-burst check below needs a long stripe at 4 KiB - 64
    big = max(range(len(runs)), key=lambda i: runs[i]["n"])
    runs.append(runs.pop(big))
    tb = make_tb(dut, cfg, max(r["lay"].size for r in runs), 0.0, seed)
    await tb.reset()
    stream = spec["grad_source"] == "stream"
    plans = []
    for r in runs:
        n, lay = r["n"], r["lay"]
        p, m, v = make_state(rng, n)
        hyper = golden.Hyper(lr=float(rng.choice([1e-3, 1e-2])), weight_decay=0.01, step=int(rng.integers(1, 50)),
                             grad_scale=float(rng.choice([1.0, 0.5])))
        plans.append({"p": p, "m": m, "v": v, "grad": make_grad(rng, n, spec["grad_dtype"], len(plans)),
                      "scalars": golden.prepare_scalars(hyper, spec["optimizer"])})
    if stream:
        tb.send_stream(plans[0]["grad"].tobytes())
    multi = set()
    for i, (r, plan) in enumerate(zip(runs, plans, strict=True)):
        n, lay = r["n"], r["lay"]
        dut._log.info("test_random: seed %d run %d: n=%d, bases %s, read latency %s, write latency %s, stalls %.1f",
                      seed, i, n, sorted({b % PAGE for b in lay.base.values()}), r["read"], r["write"], r["stalls"])
        tb.card.set_latency(r["read"], r["write"])
        tb.set_stalls(random.Random(pick.random()), r["stalls"])
        for key in lay.base:
            start = lay.base[key] - (lay.base[key] % PAGE)
            tb.mem.write(start, rng.integers(0, 256, lay.end[key] - start, dtype=np.uint8).tobytes())
        write_state(tb, lay, plan["p"], plan["m"], plan["v"])
        if stream:
            # back to back: the next shard waits right behind this one, no gap between the two
            if i + 1 < len(plans):
                tb.send_stream(plans[i + 1]["grad"].tobytes())
        else:
            lay.write(tb.mem, "grad", plan["grad"])
        guard = lay.guards(tb.mem)
        bursts = tb.monitor.burst_counts()
        await run_kernel(tb, kernel_regs(tb, lay, n, plan["scalars"], spec["optimizer"]),
                         timeout_cycles=400 * n + 40_000)
        after = tb.monitor.burst_counts()
        multi |= {k for k, c in after.items() if c - bursts.get(k, 0) > 1}
        status = await tb.read_status()
        assert status == 0, f"run {i} (n={n}): STATUS {status:#x}"
        want_out = golden.adam_update(plan["p"], plan["m"], plan["v"], plan["grad"], plan["scalars"],
                                      optimizer=spec["optimizer"], grad_dtype=spec["grad_dtype"],
                                      out_dtype=spec["out_dtype"])
        got = read_results(tb, lay, spec)
        errors = [describe_mismatch(k, got[k], w) for k, w in (("p", plan["p"]), ("m", plan["m"]),
                                                              ("v", plan["v"]), ("out", want_out))]
        errors = [e for e in errors if e]
        for key, before in guard.items():
            if tb.mem.read(lay.base[key] + lay.used[key], len(before)) != before:
                errors.append(f"{key[0]} stripe {key[1]}: memory past its {lay.used[key]} bytes was written")
        assert not errors, f"test_random seed {seed} run {i} (n={n}): " + "; ".join(errors)
    if stream:
        assert not tb.stream.count(), "the kernel left stream beats unread"
    assert multi, "no run made a multi-burst transfer on any port"
    dut._log.info("test_random: %d runs bit-exact; multi-burst transfers on %s", len(runs), sorted(multi))


async def watch_axis(dut: Any, prefix: str, errors: list[str]) -> None:
    """AXI4-Stream rules on a master port, passively: once TVALID is up it stays up with TDATA,
    TKEEP and TLAST unchanged until TREADY; nothing valid while ap_rst_n is low."""
    sig = {s: getattr(dut, f"{prefix}_{s}") for s in ("tdata", "tkeep", "tlast", "tvalid", "tready")}
    def value(handle: Any) -> int:
        try:
            return int(handle.value)
        except ValueError:  # X or Z
            return -1

    held: tuple[int, int, int] | None = None
    while True:
        await RisingEdge(dut.ap_clk)
        valid, ready = value(sig["tvalid"]), value(sig["tready"])
        if value(dut.ap_rst_n) != 1:
            if valid == 1:
                errors.append(f"{prefix}: TVALID high while ap_rst_n is low")
            held = None
            continue
        if valid == -1:
            errors.append(f"{prefix}: TVALID is X or Z out of reset")
        payload = (value(sig["tdata"]), value(sig["tkeep"]), value(sig["tlast"]))
        if held is not None and (not valid or payload != held):
            errors.append(f"{prefix}: TVALID dropped or the beat changed before TREADY")
        held = payload if valid == 1 and ready != 1 else None


@cocotb.test()
async def test_param_stream(dut: Any) -> None:
    """out_sink memory+stream: every run's updated parameters leave on m_axis_param as one packet
    (TLAST on the last beat) in element order, byte for byte the out array as it lies in memory:
    bit-exact against hls/golden.py and equal to what the kernel wrote to its out stripes, TKEEP all
    ones but the last beat's tail (whose other bytes are zero); ap_done only after the packet's last
    beat is taken; n = 0 sends nothing. Random TREADY pauses (ONIC_STALLS) and, in the second run
    of each count, TREADY held low for 1000 clocks: the kernel waits and loses nothing, and the
    memory write path keeps to AXI (the protocol monitor on every m_axi port). Seed printed."""
    cfg = load_config()
    spec = cfg["spec"]
    seed = cfg["seed"]
    assert spec.get("out_sink") == "memory+stream", "test_param_stream needs a kernel with out_sink memory+stream"
    rng = np.random.default_rng(seed + 31)
    pick = random.Random(seed + 31)
    ob = 4 if spec["out_dtype"] == "fp32" else 2
    lays = {n: Layout(spec, stripe_counts(cfg), n, skew=pick.randrange(64) * 64) for n in cfg["elements"]}
    tb = make_tb(dut, cfg, max(lay.size for lay in lays.values()), cfg["stalls"], seed)
    assert tb.param is not None, "the kernel has no m_axis_param"
    errors: list[str] = []
    cocotb.start_soon(watch_axis(dut, "m_axis_param", errors))
    dut._log.info("test_param_stream: seed %d", seed)
    await tb.reset()
    for n, lay in lays.items():
        p, m, v = make_state(rng, n)
        write_state(tb, lay, p, m, v)
        for run in range(cfg["runs"]):
            grad = make_grad(rng, n, spec["grad_dtype"], run)
            hyper = golden.Hyper(lr=float(rng.choice([1e-3, 3e-4, 1e-2])), weight_decay=0.01, step=run + 1)
            scalars = golden.prepare_scalars(hyper, spec["optimizer"])
            feed_grad(tb, lay, spec, grad)
            want = golden.adam_update(p, m, v, grad, scalars, optimizer=spec["optimizer"],
                                      grad_dtype=spec["grad_dtype"], out_dtype=spec["out_dtype"])
            where = f"n={n} run {run + 1}"
            regs = kernel_regs(tb, lay, n, scalars, spec["optimizer"])
            if run == 1:
                # TREADY low for far longer than every FIFO on the way holds: the kernel must wait
                tb.param.clear_pause_generator()
                tb.param.pause = True
                job = cocotb.start_soon(run_kernel(tb, regs, timeout_cycles=200 * n + 40_000))
                await ClockCycles(dut.ap_clk, 1000)
                assert n == 0 or not job.done(), f"{where}: ap_done while m_axis_param was held off"
                tb.param.pause = False
                if cfg["stalls"] > 0:
                    tb.param.set_pause_generator(stall_generator(random.Random(pick.random()), cfg["stalls"]))
                await job
            else:
                await run_kernel(tb, regs, timeout_cycles=200 * n + 20_000)
            assert await tb.read_status() == 0, f"{where}: STATUS {await tb.read_status():#x}"
            got = read_results(tb, lay, spec)
            bad = [describe_mismatch(k, got[k], w) for k, w in (("p", p), ("m", m), ("v", v), ("out", want))]
            assert not any(bad), f"{where}: " + "; ".join(b for b in bad if b)
            if n == 0:
                await ClockCycles(dut.ap_clk, 50)
                assert tb.param.empty() and not tb.param.active, f"{where}: a zero-element run sent beats"
                continue
            # the packet is whole by ap_done: the kernel does not finish before its last beat is taken
            assert tb.param.count() == 1, f"{where}: {tb.param.count()} packets at ap_done, want 1"
            frame = tb.param.recv_nowait(compact=False)
            data, keep = bytes(frame.tdata), list(frame.tkeep)
            nbytes = n * ob
            beats = -(-nbytes // 64)
            assert len(data) == 64 * beats, f"{where}: {len(data) // 64} beats to TLAST, want {beats}"
            want_keep = [1] * nbytes + [0] * (64 * beats - nbytes)
            assert keep == want_keep, f"{where}: TKEEP is not all ones to byte {nbytes}"
            assert data[nbytes:] == bytes(64 * beats - nbytes), f"{where}: bytes past TKEEP are not zero"
            streamed = np.frombuffer(data[:nbytes], want.dtype)
            mismatch = describe_mismatch("stream", streamed, want) or describe_mismatch("stream vs memory", streamed,
                                                                                        got["out"])
            assert not mismatch, f"{where}: {mismatch}"
        assert not errors, "; ".join(errors[:5])
    record("param_stream", {"elements": cfg["elements"], "runs": cfg["runs"]})
