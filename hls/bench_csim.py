"""Benchmark of the csim backend: parameters per second against torch's CPU AdamW, in one run.

The csim library runs the generated HLS kernel (16 lanes, fp32 gradients and output, the default
memory plan) on every core, on stripe buffers as the card holds them (`CsimKernel.run_ports`,
what the driver's csim device calls; striping is done once, outside the timing).
Torch's `AdamW(fused=True)` and `AdamW(foreach=True)` run on the same machine in the same
process, interleaved with the csim runs so that load from other processes hits all of them
alike; the median of the repeats is reported, and ratios are csim / torch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from hls.paths import BUILD_DIR

BYTES_PER_PARAM = 32  # grad 4 + p, m, v 12 read + p, m, v 12 written + out 4


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(params: int, repeats: int = 5, threads: int | None = None, project: Path | None = None) -> dict[str, Any]:
    import torch

    from hls import layout
    from hls.csim import CsimKernel
    from hls.generate import write_project
    from hls.golden import Hyper, prepare_scalars
    from hls.spec import KernelSpec

    project = project or BUILD_DIR / "bench_csim"
    write_project(KernelSpec(target="u55c", optimizer="adamw", lanes=16, name="optimusnic_adamw"), project)
    kernel = CsimKernel(project, threads=threads)
    threads = kernel.threads
    rng = np.random.default_rng(0)
    p = rng.standard_normal(params, dtype=np.float32)
    grad = rng.standard_normal(params, dtype=np.float32)
    m = np.zeros(params, np.float32)
    v = np.zeros(params, np.float32)
    out = np.empty(params, np.float32)
    regs = prepare_scalars(Hyper(), "adamw").registers("adamw")

    torch.set_num_threads(threads)
    optims = {}
    for label, kw in (("torch_fused", {"fused": True}), ("torch_foreach", {"foreach": True})):
        w = torch.nn.Parameter(torch.from_numpy(p.copy()))
        w.grad = torch.from_numpy(grad.copy())
        opt = torch.optim.AdamW([w], lr=1e-3, weight_decay=1e-2, **kw)
        opt.step()  # allocate state outside the timing
        optims[label] = opt
    copy_src = [np.ones(params, np.float32) for _ in range(4)]
    copy_dst = [np.empty(params, np.float32) for _ in range(4)]

    plan = kernel.stripes
    buffers = {f"grad{k}": b for k, b in enumerate(layout.split(grad, plan.grad))}
    for name, arr in (("p", p), ("m", m), ("v", v)):
        for k, b in enumerate(layout.split(arr, plan.state)):
            buffers[f"{name}{k}_rd"] = buffers[f"{name}{k}_wr"] = b
    buffers.update({f"out{k}": np.empty(kernel.port_info[f"out{k}"].nbytes(params), np.uint8) for k in range(plan.out)})
    del p, m, v, out  # the state lives in the stripe buffers now

    def run_csim() -> None:
        kernel.run_ports(buffers, params, regs)

    def run_copy() -> None:  # 4 reads + 4 writes of 4 bytes: the same DRAM traffic as one update
        for s, d in zip(copy_src, copy_dst, strict=True):
            np.copyto(d, s)

    run_csim()
    times: dict[str, list[float]] = {"csim": [], "torch_fused": [], "torch_foreach": [], "numpy_copy": []}
    for _ in range(repeats):
        times["csim"].append(_timed(run_csim))
        for label, opt in optims.items():
            times[label].append(_timed(opt.step))
        times["numpy_copy"].append(_timed(run_copy))
    kernel.close()
    rate = {k: params / statistics.median(t) for k, t in times.items()}
    return {
        "params": params,
        "threads": threads,
        "repeats": repeats,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "params_per_s": rate,
        "ratio_vs_torch_fused": rate["csim"] / rate["torch_fused"],
        "ratio_vs_torch_foreach": rate["csim"] / rate["torch_foreach"],
        "csim_memory_gb_per_s": rate["csim"] * BYTES_PER_PARAM / 1e9,
        "copy_memory_gb_per_s": rate["numpy_copy"] * BYTES_PER_PARAM / 1e9,
        "seconds": times,
    }


def run(args: argparse.Namespace) -> int:
    from hls.commands.common import emit_json

    result = measure(args.params, max(1, args.repeats), args.threads)
    if getattr(args, "json", False):
        emit_json(result)
        return 0
    r = result["params_per_s"]
    print(f"csim benchmark: {result['params']:,} parameters, {result['threads']} thread(s), "
          f"median of {result['repeats']}, load average {result['load_average'][0]:.1f}")
    print(f"  csim (generated HLS kernel, 16 lanes) {r['csim'] / 1e9:6.3f} G params/s "
          f"({result['csim_memory_gb_per_s']:.1f} GB/s of state traffic)")
    print(f"  torch AdamW fused=True                {r['torch_fused'] / 1e9:6.3f} G params/s")
    print(f"  torch AdamW foreach=True              {r['torch_foreach'] / 1e9:6.3f} G params/s")
    print(f"  numpy copy of the same bytes          {r['numpy_copy'] / 1e9:6.3f} G params/s "
          f"({result['copy_memory_gb_per_s']:.1f} GB/s)")
    print(f"  ratio csim / torch fused   {result['ratio_vs_torch_fused']:.2f}")
    print(f"  ratio csim / torch foreach {result['ratio_vs_torch_foreach']:.2f}")
    return 0
