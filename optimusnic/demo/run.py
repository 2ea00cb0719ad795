"""`optimusnic demo`: train a small real model with NicAdamW next to torch.optim.AdamW.

Everything the demo needs is here: a character-level transformer language model and the text it
learns (written for this package, a few KB, nothing downloaded), a small MLP with a generated
regression task (used by the tests and the rtlsim run), the side-by-side training loop, the
table, the plot, and the sharded run over `torch.distributed` (gloo, one process per rank).
"""

from __future__ import annotations

import copy
import json
import math
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hls import safe_io
from optimusnic.text import human_bytes, table

# ---- the data ---------------------------------------------------------------------------------
# Written for this demo. The model learns to continue it, character by character.
TEXT = """\
An optimizer keeps three numbers for every weight of a model: the weight itself in full
precision, a running mean of its gradient, and a running mean of the square of its gradient.
For a model of seven billion weights that is eighty four gigabytes, more than the memory of
most accelerators, so the state is split into shards, one per rank, and each rank updates
only its own shard after the gradients are reduced and scattered.
The update is simple arithmetic, one pass over memory per step. It does not need the
accelerator at all. It needs bandwidth, and a network card with its own high bandwidth memory
has plenty of it. The gradients stream in over the wire, the card updates the shard as they
arrive, and the new weights stream back out to be gathered by every rank.
The accelerator keeps only the weights and gradients in half precision. The card keeps the
masters and the moments. Nothing waits for the optimizer, because the optimizer runs while
the bytes are still moving.
To check that nothing changed, train the same model twice from the same start on the same
batches: once with the optimizer on the card and once with the optimizer in torch. The two
loss curves lie on top of each other. The weights differ only in the last bits, because the
card rounds the bias corrections once, in a fixed order, where torch divides a square root.
A small model learns this text in a few hundred steps. It first learns which letters are
common, then which letters follow which, then short words, then the shape of a sentence.
The loss falls fast at first and slowly later, as it always does.
If the card is missing, the same code runs against a simulation of it: the generated high
level synthesis kernel compiled for the host, or the register transfer level kernel running
in a hardware simulator with the same registers and the same memory map as the real card.
The driver never knows the difference, and neither does the training script.
"""


def char_vocab(text: str = TEXT) -> list[str]:
    return sorted(set(text))


def encode(text: str = TEXT) -> torch.Tensor:
    index = {c: i for i, c in enumerate(char_vocab(text))}
    return torch.tensor([index[c] for c in text], dtype=torch.long)


class Block(nn.Module):
    """Pre-norm transformer block: causal multi-head self-attention, then a GELU MLP.

    The key projection has no bias: softmax is invariant to it, so its gradient would be pure
    rounding noise, which Adam scales up to full-size steps in a random direction (any two
    implementations then disagree there by lr per step, whatever their rounding).
    """

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width, bias=False)
        self.value = nn.Linear(width, width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        h = self.norm1(x)
        q, k, v = (lin(h).view(b, t, self.heads, w // self.heads).transpose(1, 2)
                   for lin in (self.query, self.key, self.value))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, w))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm2(x))))


class CharTransformer(nn.Module):
    """A tiny causal transformer language model over characters."""

    def __init__(self, vocab: int, context: int = 32, width: int = 48, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.context = context
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(context, width) * 0.02)
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        return self.head(self.norm(self.blocks(x)))


def make_mlp(inputs: int = 16, hidden: int = 64, outputs: int = 4) -> nn.Module:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, outputs))


@dataclass
class Task:
    """A model, a loss, and a deterministic batch for every step (same batches for both runs)."""

    name: str
    model: nn.Module
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
    description: str = ""


def lm_task(seed: int = 0, batch_size: int = 16, context: int = 32, width: int = 48, layers: int = 2) -> Task:
    data = encode()
    vocab = len(char_vocab())
    torch.manual_seed(seed)
    model = CharTransformer(vocab, context=context, width=width, layers=layers)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed * 100_003 + step)
        start = torch.randint(0, len(data) - context - 1, (batch_size,), generator=g)
        x = torch.stack([data[s : s + context] for s in start.tolist()])
        y = torch.stack([data[s + 1 : s + context + 1] for s in start.tolist()])
        return x, y

    def loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = m(x)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    n = sum(p.numel() for p in model.parameters())
    return Task("char-transformer", model, batch, loss,
                f"character-level transformer LM ({layers} blocks, width {width}, context {context}, "
                f"{n:,} parameters) on {len(TEXT):,} characters of text shipped with the package")


def regression_task(seed: int = 0, batch_size: int = 32, inputs: int = 16, hidden: int = 64, outputs: int = 4
                    ) -> Task:
    torch.manual_seed(seed)
    model = make_mlp(inputs, hidden, outputs)
    g = torch.Generator().manual_seed(seed + 1)
    w_true = torch.randn(inputs, outputs, generator=g) / math.sqrt(inputs)  # sin of an O(1) argument

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        gb = torch.Generator().manual_seed(seed * 100_003 + step)
        x = torch.randn(batch_size, inputs, generator=gb)
        y = torch.sin(x @ w_true) + 0.05 * torch.randn(batch_size, outputs, generator=gb)
        return x, y

    def loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(m(x), y)

    n = sum(p.numel() for p in model.parameters())
    return Task("mlp-regression", model, batch, loss,
                f"MLP {inputs}-{hidden}-{hidden}-{outputs} ({n:,} parameters) on a generated regression task")


def max_param_diff(a: nn.Module, b: nn.Module) -> float:
    return max((pa.detach().float() - pb.detach().float()).abs().max().item()
               for pa, pb in zip(a.parameters(), b.parameters(), strict=True))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- the side-by-side run ---------------------------------------------------------------------
TASKS: dict[str, Callable[[], Task]] = {
    "transformer": lm_task,
    "mlp": regression_task,
    "mlp-small": lambda: regression_task(hidden=16),  # 612 parameters: the RTL simulation moves every beat
}
DEFAULT_STEPS = {"golden": 300, "csim": 300, "rtlsim": 40}
DEFAULT_TASK = {"golden": "transformer", "csim": "transformer", "rtlsim": "mlp-small"}
LR = 3e-3


@dataclass
class DemoResult:
    """Everything the demo prints, plots and writes as JSON."""

    backend: str
    world_size: int
    steps: int
    task: str
    losses_nic: list[float]
    losses_torch: list[float]
    max_param_diff: float
    placement: list[dict[str, Any]]
    host_state_tensors: int  # tensors the NicAdamW object keeps in `optimizer.state` on the host
    train_s: float = 0.0
    wall_s: float = 0.0
    plot: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def state_bytes(self) -> int:
        return sum(int(r["state_bytes"]) for r in self.placement)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state_bytes"] = self.state_bytes
        d["final_loss_nic"] = self.losses_nic[-1]
        d["final_loss_torch"] = self.losses_torch[-1]
        d["max_rel_loss_diff"] = max_rel_diff(self.losses_nic, self.losses_torch)
        return d


def max_rel_diff(a: list[float], b: list[float]) -> float:
    return max((abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b, strict=True)), default=0.0)


def _progress(steps: int, enabled: bool, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=steps, desc=desc, unit="step", disable=not enabled, dynamic_ncols=True, leave=True)


def _schedulers(*opts: torch.optim.Optimizer, steps: int) -> list[Any]:
    # The same cosine schedule drives both optimizers: it only writes param_groups[i]["lr"].
    return [torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=steps, eta_min=LR / 10) for o in opts]


def run_single(backend: str, steps: int, task_name: str = "transformer", progress: bool = True,
               **nic_options: Any) -> DemoResult:
    """NicAdamW on `backend` next to torch.optim.AdamW: same model start, same batches, same schedule."""
    from pynq_driver.optim.adam import NicAdamW

    task = TASKS[task_name]()
    model_nic = task.model
    model_ref = copy.deepcopy(model_nic)
    nic = NicAdamW(model_nic.parameters(), lr=LR, backend=backend, **nic_options)
    try:
        ref = torch.optim.AdamW(model_ref.parameters(), lr=LR)
        scheds = _schedulers(nic, ref, steps=steps)
        losses: tuple[list[float], list[float]] = ([], [])
        t0 = time.monotonic()
        with _progress(steps, progress, f"NicAdamW ({backend}) | torch AdamW") as bar:
            for s in range(steps):
                x, y = task.batch(s)
                for model, opt, out in ((model_nic, nic, losses[0]), (model_ref, ref, losses[1])):
                    opt.zero_grad()
                    loss = task.loss(model, x, y)
                    loss.backward()
                    opt.step()
                    out.append(loss.item())
                for sch in scheds:
                    sch.step()
                bar.set_postfix(nic=f"{losses[0][-1]:.4f}", torch=f"{losses[1][-1]:.4f}", refresh=False)
                bar.update()
        train_s = time.monotonic() - t0
        return DemoResult(backend=backend, world_size=1, steps=steps, task=task.description,
                          losses_nic=losses[0], losses_torch=losses[1],
                          max_param_diff=max_param_diff(model_nic, model_ref), placement=nic.placement(),
                          host_state_tensors=_host_tensors(nic), train_s=train_s)
    finally:
        nic.close()


def _sharded_worker(rank: int, world_size: int, port: int, backend: str, steps: int, task_name: str,
                    progress: bool, result_path: str, timeout_s: float) -> None:
    """One rank: its slice of every batch, ShardedNicOptimizer; rank 0 also runs torch AdamW on the whole batch."""
    import torch.distributed as dist

    from pynq_driver.optim.sharded import ShardedNicOptimizer, init_gloo

    torch.set_num_threads(1)
    init_gloo(rank, world_size, port, timeout_s)
    try:
        task = TASKS[task_name]()
        model = task.model
        ref_model = copy.deepcopy(model) if rank == 0 else None
        opt = ShardedNicOptimizer(model.parameters(), lr=LR, backend=backend)
        ref = torch.optim.AdamW(ref_model.parameters(), lr=LR) if ref_model is not None else None
        scheds = _schedulers(*(o for o in (opt, ref) if o is not None), steps=steps)
        losses_nic: list[float] = []
        losses_ref: list[float] = []
        t0 = time.monotonic()
        with _progress(steps, progress and rank == 0, f"ShardedNicOptimizer x{world_size} ({backend}) | AdamW") as bar:
            for s in range(steps):
                x, y = task.batch(s)
                opt.zero_grad()
                loss = task.loss(model, x.chunk(world_size)[rank], y.chunk(world_size)[rank])
                loss.backward()
                opt.step()
                mean_loss = loss.detach().clone()
                dist.all_reduce(mean_loss)
                losses_nic.append(mean_loss.item() / world_size)
                if ref is not None:
                    ref.zero_grad()
                    ref_loss = task.loss(ref_model, x, y)
                    ref_loss.backward()
                    ref.step()
                    losses_ref.append(ref_loss.item())
                for sch in scheds:
                    sch.step()
                if ref is not None:
                    bar.set_postfix(nic=f"{losses_nic[-1]:.4f}", torch=f"{losses_ref[-1]:.4f}", refresh=False)
                bar.update()
        train_s = time.monotonic() - t0
        # Every rank must hold the same parameters after the all-gather: compare checksums.
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        sums: list[Any] = [None] * world_size
        dist.all_gather_object(sums, flat.double().sum().item())
        placement: list[Any] = [None] * world_size
        dist.all_gather_object(placement, opt.placement())
        sd = opt.full_state_dict()  # collective: the full state in torch.optim.AdamW's format on every rank
        if rank == 0:
            ref_sd = ref.state_dict()
            sd_diff = max((sd["state"][k][key] - ref_sd["state"][k][key]).abs().max().item()
                          for k in ref_sd["state"] for key in ("exp_avg", "exp_avg_sq"))
            result = DemoResult(backend=backend, world_size=world_size, steps=steps, task=task.description,
                                losses_nic=losses_nic, losses_torch=losses_ref,
                                max_param_diff=max_param_diff(model, ref_model),
                                placement=[row for rows in placement for row in rows],
                                host_state_tensors=_host_tensors(opt), train_s=train_s)
            out = result.to_dict()
            out["rank_param_checksums"] = sums
            out["max_moment_diff"] = sd_diff
            out["state_dict_format_equal"] = _same_format(sd, ref_sd)
            safe_io.atomic_write(result_path, json.dumps(out))
        opt.close()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _host_tensors(opt: Any) -> int:
    """State tensors an optimizer keeps in host memory (NicAdamW's optimizer.state reads the card)."""
    return sum(len(v) for v in opt.state.values() if isinstance(v, dict))


def _same_format(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a["param_groups"] != b["param_groups"] or a["state"].keys() != b["state"].keys():
        return False
    return all(set(a["state"][k]) == set(st) and all(a["state"][k][n].dtype == v.dtype and
                                                     a["state"][k][n].shape == v.shape for n, v in st.items())
               for k, st in b["state"].items())


def run_sharded(backend: str, steps: int, world_size: int, task_name: str = "transformer", progress: bool = True,
                timeout_s: float = 300.0, scratch: Path | None = None) -> dict[str, Any]:
    """The sharded run over `world_size` local gloo ranks; returns rank 0's summary (a dict)."""
    import tempfile

    from pynq_driver.optim.sharded import run_ranks

    _prebuild(backend)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        result_path = Path(tmp) / "result.json"
        run_ranks(_sharded_worker, world_size,
                  (free_port(), backend, steps, task_name, progress, str(result_path), 60.0), timeout_s=timeout_s)
        return json.loads(result_path.read_text())


def _prebuild(backend: str) -> None:
    """Generate and compile the kernel once here, so the ranks do not all build it at the same time."""
    if backend not in ("csim", "rtlsim"):
        return
    from hls.spec import KernelSpec, default_name
    from pynq_driver.backends import project_for

    spec = KernelSpec(optimizer="adamw", name=default_name("adamw"))
    pdir, _ = project_for(spec, None)
    if backend == "csim":
        from pynq_driver.backends.soft import csim_executor

        csim_executor(pdir)
    else:  # opening an rtlsim device builds (or finds) the Verilator model of the kernel
        from pynq_driver.backends import open_device

        open_device("rtlsim", spec=spec, project_dir=pdir).close()


# ---- report -----------------------------------------------------------------------------------
def loss_table(losses_nic: list[float], losses_torch: list[float], rows: int = 8) -> list[list[str]]:
    n = len(losses_nic)
    picks = sorted({0, n - 1, *(round(i * (n - 1) / (rows - 1)) for i in range(rows))})
    return [[str(i + 1), f"{losses_nic[i]:.6f}", f"{losses_torch[i]:.6f}",
             f"{abs(losses_nic[i] - losses_torch[i]):.2e}"] for i in picks]


def plot_losses(result: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nic, ref = result["losses_nic"], result["losses_torch"]
    steps = range(1, len(nic) + 1)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    where = f"ShardedNicOptimizer x{result['world_size']}" if result["world_size"] > 1 else "NicAdamW"
    ax.plot(steps, ref, label="torch.optim.AdamW", color="tab:blue", linewidth=2.5, alpha=0.6)
    ax.plot(steps, nic, label=f"{where} (state on the {result['backend']} card)", color="tab:orange",
            linewidth=1.0, linestyle="--")
    ax.set_ylabel("training loss")
    ax.set_title(f"{result['task'].split(' (')[0]}: optimizer on the card vs in torch", fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    nonzero = [(s, abs(a - b)) for s, a, b in zip(steps, nic, ref, strict=True) if a != b]
    if nonzero:
        ax2.semilogy(*zip(*nonzero, strict=True), ".", color="tab:gray", markersize=3)
    ax2.set_title(f"|loss difference|: zero at {len(nic) - len(nonzero)} of {len(nic)} steps, "
                  f"at most {max((d for _, d in nonzero), default=0.0):.1e} elsewhere", fontsize=9)
    ax2.set_ylabel("|loss diff|")
    ax2.set_xlabel("step")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with safe_io.atomic_open(path) as f:
        fig.savefig(f, format=Path(path).suffix[1:] or "png", dpi=110)
    plt.close(fig)
    return path


def format_report(result: dict[str, Any]) -> str:
    ws = result["world_size"]
    lines = [f"model: {result['task']}",
             f"{result['steps']} steps, lr {LR:g} with a cosine schedule, same start and same batches for both runs",
             ""]
    head = ["step", "loss NicAdamW" if ws == 1 else f"loss sharded x{ws}", "loss torch AdamW", "|diff|"]
    lines.append(table(loss_table(result["losses_nic"], result["losses_torch"]), head))
    lines += ["", f"final max |parameter difference| vs torch.optim.AdamW: {result['max_param_diff']:.3g}"
                  f"  (max relative loss difference {result['max_rel_loss_diff']:.2g})"]
    rows = result["placement"]
    total = result["state_bytes"]
    if ws == 1:
        r = rows[0]
        banks = ", ".join(f"{k}={'+'.join(v)}" for k, v in r["banks"].items())
        lines.append(f"optimizer state: on the {r['backend']} device (kernel {r['kernel']}, target {r['target']}, "
                     f"banks {banks}): {sum(x['params'] for x in rows):,} parameters x 12 bytes "
                     f"(fp32 master + exp_avg + exp_avg_sq) = {total:,} bytes ({human_bytes(total)}); "
                     f"the host optimizer keeps {result['host_state_tensors']} state tensors")
    else:
        lines.append(f"optimizer state: sharded over {ws} ranks, each on its own {rows[0]['backend']} device:")
        for r in rows:
            lines.append(f"  rank {r['rank']}: elements [{r['shard_lo']:,}, {r['shard_hi']:,}) of "
                         f"{r['padded']:,} ({r['shard_params'] / r['padded']:.0%}), {r['state_bytes']:,} bytes")
        lines.append(f"  total {total:,} bytes ({human_bytes(total)}) for {rows[0]['bucket_params']:,} parameters "
                     "(padding to whole 64-byte beats per rank)")
    lines.append(f"time: {result['train_s']:.1f} s training both, {result['wall_s']:.1f} s in all")
    if result.get("plot"):
        lines.append(f"plot: {result['plot']}")
    return "\n".join(lines)


def run_demo(backend: str = "csim", steps: int | None = None, world_size: int = 1,
             out_dir: Path | str = "build/demo", task_name: str = "transformer", progress: bool = True
             ) -> dict[str, Any]:
    """The whole demo: train side by side, write the plot and summary.json; returns the summary."""
    t0 = time.monotonic()
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and it leaves a core to the kernel
    steps = steps if steps is not None else DEFAULT_STEPS[backend]
    if world_size > 1:
        result = run_sharded(backend, steps, world_size, task_name, progress)
    else:
        result = run_single(backend, steps, task_name, progress).to_dict()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result["plot"] = str(plot_losses(result, out / "loss_curves.png"))
    result["wall_s"] = time.monotonic() - t0
    safe_io.atomic_write(out / "summary.json", json.dumps(result, indent=2))
    return result


__all__ = ["DemoResult", "TEXT", "Task", "format_report", "lm_task", "regression_task", "run_demo"]
