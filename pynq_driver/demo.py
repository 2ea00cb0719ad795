"""`optimusnic demo`: train a small real model with NicAdamW next to torch.optim.AdamW.

Everything the demo needs is here: a character-level transformer language model and the text it
learns (written for this package, a few KB, nothing downloaded), a small MLP with a generated
regression task (used by the tests and the rtlsim run), the side-by-side training loop, the
table, the plot, and the sharded run over `torch.distributed` (gloo, one process per rank).
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

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
