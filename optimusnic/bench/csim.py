"""Benchmark of the csim backend against torch's CPU AdamW and the machine's memory, in one run.

For each size (1M, 16M and 50M parameters by default), on the same machine, in the same process,
with the same thread count, interleaved repeat by repeat so that load from other processes hits
every figure alike (medians reported, ratios taken from medians of the same run). Each timed call
follows an untimed call of the same implementation, as steps follow each other in training: on a
busy machine a thread pool that has gone to sleep can take milliseconds to wake, which would
otherwise charge one implementation for the one timed before it.

- csim kernel: the generated HLS kernel (U55C default spec: AdamW, 16 lanes, fp32 gradients and
  output, its memory plan) run by `CsimKernel.run_ports` on 64-byte aligned stripe buffers as the
  card holds them (what the driver's csim device calls), with AMD's HLS headers (the default) and
  with our stand-ins;
- NicAdamW(csim): `pynq_driver.NicAdamW(backend="csim").step()` on one fp32 parameter of that
  size, the whole optimizer step as a user runs it (gradient finiteness check, host-card copies,
  kernel, parameters written back);
- torch: `torch.optim.AdamW(fused=True)` and `AdamW(foreach=True)` on the same size;
- memory: one `Tensor.copy_` of 4N fp32 into 4N fp32 on the same threads (one parallel region),
  the 32 bytes per parameter the csim kernel moves. Its fastest repeat gives the machine's memory
  bandwidth, counted as DRAM traffic: a cache line written without being read first is read
  anyway (write-allocate), so the copy's traffic is 48 bytes per parameter (16 read, 16 read
  for ownership, 16 written). Each implementation's floor is that bandwidth over its own traffic:
  csim 36 bytes per parameter (grad, p, m, v read; p, m, v written in place; the output written
  and read for ownership), torch's AdamW 28 (grad, p, exp_avg, exp_avg_sq read, the last three
  written in place, no separate output).

Also, per size, the CPU time one step costs per 16 parameters (one 512-bit beat of the kernel) on
one thread: the thread's own CPU time (`time.thread_time`), the least of the repeats, for the
csim kernel with either header set and torch's two AdamW. Waiting on memory counts, time spent
running other processes does not, so on a loaded machine, where the timed ratios above become
ratios of CPU cost, this table says why; on an idle one the bytes floors bound the ratios.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from hls.paths import BUILD_DIR
from hls.ports import port_names
from optimusnic.text import emit_json

SIZES = (1 << 20, 16 << 20, 50_000_000)
# DRAM traffic per parameter (bytes), write-allocate reads included.
CSIM_BYTES_PER_PARAM = 32  # what the kernel moves: grad 4 + p, m, v 12 read + p, m, v 12 written + out 4
CSIM_TRAFFIC = 36  # ... + out 4 read for ownership before it is written
TORCH_TRAFFIC = 28  # grad 4 + p, exp_avg, exp_avg_sq 12 read + 12 written in place
COPY_TRAFFIC = 48  # 4 fp32 read + 4 read for ownership + 4 written
IMPLEMENTATIONS = ("csim", "csim_own_headers", "nic_adamw_csim", "torch_fused", "torch_foreach", "memory_copy")
CPU_COSTED = ("csim", "csim_own_headers", "torch_fused", "torch_foreach")  # single-thread CPU time per beat
LABELS = {
    "csim": "csim kernel (AMD headers)",
    "csim_own_headers": "csim kernel (our headers)",
    "nic_adamw_csim": "NicAdamW(csim).step()",
    "torch_fused": "torch AdamW fused=True",
    "torch_foreach": "torch AdamW foreach=True",
    "memory_copy": "copy of the same bytes",
}


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _cpu_ns_per_beat(fn: Any, params: int, repeats: int) -> float:
    """Least CPU time of this thread over `repeats` calls of fn, per 16 parameters, in ns."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t)
    return best / (params / 16) * 1e9


def _kernel_buffers(kernel: Any, params: int, p: np.ndarray, grad: np.ndarray) -> dict[str, np.ndarray]:
    """Stripe buffers for every port, 64-byte aligned (as the card's), holding p and grad; m, v zero."""
    from hls import layout
    from hls.csim.kernel import aligned_zeros

    plan = kernel.stripes
    buffers: dict[str, np.ndarray] = {}
    for name, arr, stripes in (("grad", grad, plan.grad), ("p", p, plan.state), ("m", None, plan.state),
                               ("v", None, plan.state), ("out", None, plan.out)):
        parts = layout.split(arr, stripes) if arr is not None else None
        for k in range(stripes):
            ports = port_names(name, k)  # a state stripe's read and write ports share one buffer
            buf = aligned_zeros(kernel.port_info[ports[0]].nbytes(params))
            if parts is not None:
                buf[:] = parts[k].view(np.uint8)
            buffers.update(dict.fromkeys(ports, buf))
    return buffers


def measure(params: int, repeats: int = 5, threads: int | None = None, project: Path | None = None,
            log: Any = None) -> dict[str, Any]:
    """Every implementation at one size, interleaved; medians, ratios and the bytes-moved floors."""
    import torch

    from hls.csim.kernel import CsimKernel, default_threads
    from hls.generate import write_project
    from hls.golden import Hyper, prepare_scalars
    from hls.spec import KernelSpec
    from pynq_driver.optim.adam import NicAdamW

    threads = threads or default_threads()
    torch.set_num_threads(threads)
    project = project or BUILD_DIR / "bench_csim"
    spec = KernelSpec(target="u55c", optimizer="adamw", lanes=16, name="optimusnic_adamw")
    write_project(spec, project)
    rng = np.random.default_rng(0)
    p = rng.standard_normal(params, dtype=np.float32)
    grad = (rng.standard_normal(params, dtype=np.float32) * np.float32(1e-3)).astype(np.float32)
    regs = prepare_scalars(Hyper(), "adamw").registers("adamw")

    kernels, runs = [], {}
    for label, headers in (("csim", "amd"), ("csim_own_headers", "own")):
        kernel = CsimKernel(project, threads=threads, headers=headers)
        buffers = _kernel_buffers(kernel, params, p, grad)
        kernels.append(kernel)
        runs[label] = (lambda k=kernel, b=buffers: k.run_ports(b, params, regs))

    nic_w = torch.nn.Parameter(torch.from_numpy(p.copy()))
    nic_w.grad = torch.from_numpy(grad.copy())
    nic = NicAdamW([nic_w], lr=1e-3, weight_decay=1e-2, backend="csim", threads=threads)
    runs["nic_adamw_csim"] = nic.step
    for label, kw in (("torch_fused", {"fused": True}), ("torch_foreach", {"foreach": True})):
        w = torch.nn.Parameter(torch.from_numpy(p.copy()))
        w.grad = torch.from_numpy(grad.copy())
        runs[label] = torch.optim.AdamW([w], lr=1e-3, weight_decay=1e-2, **kw).step
    # 4N fp32 read and 4N written: the csim kernel's 32 bytes per parameter, in one parallel region
    # (several small copies would each wait for torch's threads to wake on a busy machine).
    pairs = [(torch.ones(4 * params), torch.zeros(4 * params))]
    runs["memory_copy"] = lambda: pairs[0][1].copy_(pairs[0][0])
    for fn in runs.values():
        fn()  # warm-up: page faults, worker threads, optimizer state
    times: dict[str, list[float]] = {k: [] for k in IMPLEMENTATIONS}
    for _ in range(repeats):
        for label in IMPLEMENTATIONS:
            runs[label]()  # untimed: its threads awake, as in a training loop's back-to-back steps
            times[label].append(_timed(runs[label]))
    load = os.getloadavg()
    # One thread each (the kernel's calls run on the calling thread alone, torch's intra-op work too).
    torch.set_num_threads(1)
    for kernel in kernels:
        kernel.threads = 1
    cpu = {label: _cpu_ns_per_beat(runs[label], params, max(3, repeats)) for label in CPU_COSTED}
    torch.set_num_threads(threads)
    nic.close()
    for kernel in kernels:
        kernel.close()
    pairs.clear()
    del runs, nic, nic_w
    gc.collect()

    rate = {k: params / statistics.median(t) for k, t in times.items()}
    copy_gbps = params / min(times["memory_copy"]) * COPY_TRAFFIC / 1e9  # the fastest repeat: the limit
    floor = {"csim": copy_gbps * 1e9 / CSIM_TRAFFIC, "torch": copy_gbps * 1e9 / TORCH_TRAFFIC}
    result = {
        "params": params,
        "threads": threads,
        "repeats": repeats,
        "cpu_count": os.cpu_count(),
        "load_average_after": load,
        "params_per_s": rate,
        "ratio_vs_torch_fused": {k: rate[k] / rate["torch_fused"] for k in IMPLEMENTATIONS},
        "ratio_vs_torch_foreach": {k: rate[k] / rate["torch_foreach"] for k in IMPLEMENTATIONS},
        "memory_copy_gb_per_s": copy_gbps,
        "floor_params_per_s": floor,
        "fraction_of_floor": {
            "csim": rate["csim"] / floor["csim"],
            "csim_own_headers": rate["csim_own_headers"] / floor["csim"],
            "torch_fused": rate["torch_fused"] / floor["torch"],
            "torch_foreach": rate["torch_foreach"] / floor["torch"],
        },
        "cpu_ns_per_16_params": cpu,
        "csim_gb_per_s": rate["csim"] * CSIM_TRAFFIC / 1e9,
        "torch_fused_gb_per_s": rate["torch_fused"] * TORCH_TRAFFIC / 1e9,
        "seconds": times,
    }
    if log:
        log(f"[bench] csim {params:,}: csim/fused {result['ratio_vs_torch_fused']['csim']:.2f}")
    return result


def measure_sizes(sizes: tuple[int, ...] = SIZES, repeats: int = 5, threads: int | None = None,
                  log: Any = None) -> dict[str, Any]:
    """`measure` at every size, one after another (each frees its arrays before the next)."""
    rows = [measure(n, repeats, threads, log=log) for n in sizes]
    return {"sizes": list(sizes), "threads": rows[0]["threads"], "repeats": repeats, "rows": rows,
            "goal": "csim kernel >= 1.0x torch fused at 16M and 50M",
            "meets_goal": _meets_goal(rows)}


def _meets_goal(rows: list[dict[str, Any]]) -> bool:
    """The issue's goal: the csim kernel (default headers) at or above torch fused at 16M and at 50M."""
    big = [r for r in rows if r["params"] >= 16_000_000]
    return bool(big) and all(r["ratio_vs_torch_fused"]["csim"] >= 1.0 for r in big)


def table(result: dict[str, Any]) -> list[str]:
    """Markdown rows: one line per implementation and size (G params/s, ratios, share of the floor)."""
    lines = ["| params | implementation | G params/s | vs torch fused | vs torch foreach | of its bytes floor |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        for k in IMPLEMENTATIONS:
            share = r["fraction_of_floor"].get(k)
            what = "(bandwidth)" if k == "memory_copy" else ("" if share is None else f"{share:.0%}")
            lines.append(f"| {r['params']:,} | {LABELS[k]} | {r['params_per_s'][k] / 1e9:.3f} | "
                         f"{r['ratio_vs_torch_fused'][k]:.2f} | {r['ratio_vs_torch_foreach'][k]:.2f} | {what} |")
    return lines


def floors(result: dict[str, Any]) -> list[str]:
    lines = ["| params | memory bandwidth (copy, fastest) | csim floor (36 B/param) | torch floor (28 B/param) |",
             "|---|---|---|---|"]
    for r in result["rows"]:
        f = r["floor_params_per_s"]
        lines.append(f"| {r['params']:,} | {r['memory_copy_gb_per_s']:.1f} GB/s | {f['csim'] / 1e9:.3f} G params/s | "
                     f"{f['torch'] / 1e9:.3f} G params/s |")
    return lines


def cpu_costs(result: dict[str, Any]) -> list[str]:
    """Markdown rows: single-thread CPU time per 16 parameters of every CPU-costed implementation."""
    lines = ["| params | " + " | ".join(LABELS[k] for k in CPU_COSTED) + " | csim / torch fused |",
             "|---|" + "---|" * (len(CPU_COSTED) + 1)]
    for r in result["rows"]:
        c = r["cpu_ns_per_16_params"]
        lines.append(f"| {r['params']:,} | " + " | ".join(f"{c[k]:.1f} ns" for k in CPU_COSTED) +
                     f" | {c['csim'] / c['torch_fused']:.2f}x |")
    return lines


def run(args: argparse.Namespace) -> int:
    sizes = tuple(getattr(args, "sizes", None) or SIZES)
    result = measure_sizes(sizes, max(1, args.repeats), args.threads)
    if getattr(args, "json", False):
        emit_json(result)
        return 0
    print(f"csim benchmark: {result['threads']} thread(s), median of {result['repeats']} interleaved repeats, "
          f"load average {result['rows'][-1]['load_average_after'][0]:.1f}")
    print("\n".join(table(result)))
    print()
    print("\n".join(floors(result)))
    print()
    print("CPU time per 16 parameters on one thread (least of the repeats):")
    print("\n".join(cpu_costs(result)))
    print(f"goal ({result['goal']}): {'met' if result['meets_goal'] else 'NOT met'}")
    return 0
