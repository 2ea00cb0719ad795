"""`optimusnic bench gpu`: NicAdamW's staged data path on a GPU (pynq_driver.optim.devpath).

On one device (the accelerator torch finds, or `--device`): the median step time of NicAdamW
through the staged path (pinned ring, side streams, events), of NicAdamW through the direct path
(blocking copies through pageable memory), and of `torch.optim.AdamW(fused=True)` on the same
device; and, from one profiled staged step, the overlap achieved: the fraction of the card's busy
time during which a gradient or result copy was running (copy times from the device's events,
anchored to the host clock; the card's from the host, launch to done), and the converse: the
fraction of the copies' time hidden under the card's work. Every step is timed up to
an accelerator synchronisation, so the copies still running when `step()` returns are counted.

Without a GPU it stops with one line; `--device cpu` runs the staged path forced on CPU tensors
(the same code, CPU stand-ins for streams and events: copies run when issued) and prints the same
table, labelled as CPU. The soft card (csim) is the card in both cases: on a GPU machine without an
Alveo card this measures the data path around a simulated card, not a card's speed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from hls.errors import ToolMissing, UserError
from optimusnic.text import emit_json, human_count, table

_BIG_TENSORS = 8  # the parameters: eight equal matrices and a bias of 1024 per matrix


def pick_device(name: str | None) -> Any:
    """The torch device to measure on: `name`, or the accelerator (ToolMissing when there is none)."""
    import torch

    if name is None or name == "auto":
        from pynq_driver.optim.devpath import stages

        acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        # An accelerator without streams or pinned memory (a custom backend) cannot run the staged path.
        if acc is None or not stages(acc):
            raise ToolMissing("bench gpu: no GPU here (torch.accelerator finds no accelerator with streams in this "
                              f"torch {torch.__version__}); `--device cpu` runs the staged pipeline on CPU tensors "
                              "instead")
        return torch.device(acc.type, torch.accelerator.current_device_index())
    try:
        dev = torch.device(name)
    except RuntimeError as exc:
        raise UserError(f"bench gpu: --device {name!r} is not a torch device (cpu, cuda, cuda:1, xpu, ...)") from exc
    if dev.type != "cpu":
        acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        if acc is None or acc.type != dev.type:
            raise ToolMissing(f"bench gpu: --device {name}: torch finds no such accelerator here "
                              f"(found: {acc.type if acc is not None else 'none'})")
    return dev


def _params(n: int, device: Any) -> list[Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    each = max(1, (n - 1024 * _BIG_TENSORS) // _BIG_TENSORS)
    shapes = [(each,), (1024,)] * _BIG_TENSORS
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in shapes]


def _sync(device: Any) -> None:
    import torch

    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def _time_steps(opt: Any, params: list[Any], grads: list[Any], device: Any, repeats: int) -> float:
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    opt.step()  # warm-up: the ring, the kernel's first launch, hashes
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        opt.step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(params: int = 10_000_000, repeats: int = 5, device: str | None = None, backend: str = "csim",
            chunk_elems: int | None = None) -> dict[str, Any]:
    """The figures of the module's docstring, as a dict."""
    import torch

    from pynq_driver.optim import NicAdamW
    from pynq_driver.optim.devpath import copies_hidden, overlap

    dev = pick_device(device)
    g = torch.Generator().manual_seed(1)
    out: dict[str, Any] = {"device": str(dev), "cpu_forced": dev.type == "cpu", "params": params,
                           "backend": backend, "repeats": repeats}
    runs: dict[str, float] = {}
    for name in ("staged", "direct", "torch_fused"):
        ps = _params(params, dev)
        grads = [(torch.randn(p.shape, generator=g) * 1e-3).to(dev) for p in ps]
        if name == "torch_fused":
            opt: Any = torch.optim.AdamW(ps, lr=1e-4, fused=True)
        else:
            opt = NicAdamW(ps, lr=1e-4, backend=backend, chunk_elems=chunk_elems,
                           data_path="pipeline" if name == "staged" else "direct")
        try:
            runs[name] = _time_steps(opt, ps, grads, dev, repeats)
            if name == "staged":
                path = opt.device_paths()[str(ps[0].device)]
                path.profile = True
                opt.step()
                _sync(dev)
                path.profile = False
                tl = path.timeline
                out["overlap"] = overlap(tl)
                out["copies_hidden"] = copies_hidden(tl)
                out["card_s"] = sum(b - a for a, b in tl["card"])
                out["d2h_s"] = sum(b - a for a, b in tl["d2h"])
                out["h2d_s"] = sum(b - a for a, b in tl["h2d"])
                out["chunks"] = len(tl["card"])
                out["ring_bytes"] = path.host_bytes()
                out["chunk_elems"] = opt.shards()[0].chunk_elems
        finally:
            if hasattr(opt, "close"):
                opt.close()
        del opt, ps, grads
    out.update({f"{k}_step_s": v for k, v in runs.items()})
    out["staged_over_direct"] = runs["staged"] / runs["direct"]
    out["staged_over_torch_fused"] = runs["staged"] / runs["torch_fused"]
    return out


def report(r: dict[str, Any]) -> str:
    label = (f"device {r['device']}: CPU tensors, the staged pipeline forced (no GPU; copies run when issued)"
             if r["cpu_forced"] else f"device {r['device']}")
    ms = 1e3
    rows = [
        ["NicAdamW, staged (ring, streams, events)", f"{r['staged_step_s'] * ms:.1f}",
         f"{r['staged_over_torch_fused']:.2f}"],
        ["NicAdamW, direct path (CPU: in place; GPU: blocking copies)", f"{r['direct_step_s'] * ms:.1f}",
         f"{r['direct_step_s'] / r['torch_fused_step_s']:.2f}"],
        ["torch.optim.AdamW(fused=True)", f"{r['torch_fused_step_s'] * ms:.1f}", "1.00"],
    ]
    frac, hidden = r.get("overlap"), r.get("copies_hidden")
    lines = [f"bench gpu: {human_count(r['params'])} parameters, {r['backend']} card, median of {r['repeats']} steps; "
             + label,
             table(rows, ["step", "ms", "x torch fused"]),
             f"staged / direct: {r['staged_over_direct']:.2f}x",
             f"overlap: {'n/a' if frac is None else f'{100 * frac:.0f}%'} of the card's {r['card_s'] * ms:.1f} ms "
             f"under copies ({r['chunks']} chunks of {human_count(r['chunk_elems'])}; "
             f"device->host {r['d2h_s'] * ms:.1f} ms, host->device {r['h2d_s'] * ms:.1f} ms); "
             f"{'n/a' if hidden is None else f'{100 * hidden:.0f}%'} of the copies' time under the card's work"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    params = int(getattr(args, "params", 10_000_000))
    r = measure(params, max(1, int(getattr(args, "repeats", 5))), getattr(args, "device", None))
    if getattr(args, "json", False):
        emit_json(r)
    else:
        print(report(r))
    return 0


__all__ = ["measure", "pick_device", "report", "run"]
