"""The driver on the `golden` backend: shard streaming bit-exact against the golden model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hls.golden import Hyper, adam_update, first_mismatch, prepare_scalars, to_bf16_bits
from hls.spec import KernelSpec
from pynq_driver import ShardState, open_device
from pynq_driver.shard import read_state_file

N = 10_007  # not a multiple of the lanes, several chunks
CHUNK = 1024

SPECS = [
    KernelSpec(),
    KernelSpec(grad_dtype="bf16", out_dtype="bf16"),
    KernelSpec(optimizer="adam", grad_dtype="fp16", name="optimusnic_adam"),
]


def make_grad(rng: np.random.Generator, n: int, grad_dtype: str) -> np.ndarray:
    g = (rng.standard_normal(n) * 1e-2).astype(np.float32)
    if grad_dtype == "bf16":
        return to_bf16_bits(g)
    if grad_dtype == "fp16":
        return g.astype(np.float16)
    return g


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.optimizer}-{s.grad_dtype}-{s.out_dtype}")
def test_golden_backend_matches_model(spec: KernelSpec) -> None:
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(N).astype(np.float32)
    p, m, v = p0.copy(), np.zeros(N, np.float32), np.zeros(N, np.float32)
    with open_device("golden", spec) as dev, ShardState(dev, p0, chunk_elems=CHUNK) as shard:
        align = dev.stripes.beat_align()  # chunks restart every stripe at its beat 0
        assert shard.chunk_elems == CHUNK // align * align and N // CHUNK >= 9
        for t in range(1, 5):
            g = make_grad(rng, N, spec.grad_dtype)
            h = Hyper(step=t, lr=1e-2, weight_decay=0.1)
            ref = adam_update(p, m, v, g, prepare_scalars(h, spec.optimizer), optimizer=spec.optimizer,
                              grad_dtype=spec.grad_dtype, out_dtype=spec.out_dtype)
            out = shard.step(g, h)
            assert first_mismatch(out, ref) is None
        sd = shard.state_dict()
        assert sd["step"] == 4
        for got, want in ((sd["params"], p), (sd["exp_avg"], m), (sd["exp_avg_sq"], v)):
            assert first_mismatch(got, want) is None


# Memory plans the driver must follow: several stripes per array, several CUs, DDR (shared banks).
PLANS = [
    KernelSpec(stripes=3),
    KernelSpec(compute_units=2, stripes=1),
    KernelSpec(compute_units=2, grad_dtype="bf16", out_dtype="bf16"),
    KernelSpec(target="u200", optimizer="adam", name="optimusnic_adam"),
    KernelSpec(target="v80", compute_units=3, grad_dtype="fp16"),
]


@pytest.mark.parametrize("spec", PLANS, ids=lambda s: f"{s.target}-cu{s.compute_units}-s{s.stripes}-{s.grad_dtype}")
@pytest.mark.parametrize("n, chunk", [(1, None), (5000, 384), (20_011, 4096)])
def test_stripes_and_compute_units_match_model(spec: KernelSpec, n: int, chunk: int | None) -> None:
    rng = np.random.default_rng(n)
    p0 = rng.standard_normal(n).astype(np.float32)
    p, m, v = p0.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
    with open_device("golden", spec) as dev, ShardState(dev, p0, chunk_elems=chunk) as shard:
        # Every stripe sits in the bank the manifest's plan names for its ports.
        for part in shard.parts:
            banks = dev.banks(part.cu)
            for a in ("p", "m", "v"):
                assert [b.bank for b in part.state[a]] == [banks[f"{a}{k}_rd"] for k in range(dev.stripes.state)]
            assert [b.bank for b in part.grad_stage[1]] == [banks[f"grad{k}"] for k in range(dev.stripes.grad)]
        assert len(shard.parts) == min(spec.compute_units, -(-n // dev.stripes.beat_align()))
        for t in range(1, 4):
            g = make_grad(rng, n, spec.grad_dtype)
            h = Hyper(step=t, lr=1e-2, weight_decay=0.1)
            ref = adam_update(p, m, v, g, prepare_scalars(h, spec.optimizer), optimizer=spec.optimizer,
                              grad_dtype=spec.grad_dtype, out_dtype=spec.out_dtype)
            assert first_mismatch(shard.step(g, h), ref) is None
        sd = shard.state_dict()
        for got, want in ((sd["params"], p), (sd["exp_avg"], m), (sd["exp_avg_sq"], v)):
            assert first_mismatch(got, want) is None


def test_checkpoint_saved_before_stripes_still_loads() -> None:
    """A shard saved by the driver before memory plans had stripes (tests/fixtures) loads on any plan."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "shard_v1_before_stripes.npz"
    for spec in (KernelSpec(), KernelSpec(stripes=3), KernelSpec(compute_units=2)):
        with open_device("golden", spec) as dev, ShardState.load(fixture, dev) as shard:
            assert shard.step_count == 3 and shard.n == 1000
            header, arrays = read_state_file(fixture, spec)
            sd = shard.state_dict()
            for key in ("params", "exp_avg", "exp_avg_sq"):
                assert first_mismatch(sd[key], arrays[key]) is None


def test_status_error_names_the_cause_and_marks_the_shard_inconsistent() -> None:
    """The driver reads STATUS (manifest register_map.status) after every run; the soft devices
    read 0 there. A set bit raises KernelStatusError naming the cause, and the shard refuses to
    step again until a checkpoint is loaded."""
    from hls.regmap import STATUS_BITS
    from pynq_driver.errors import KernelStatusError, StateError

    spec = KernelSpec()
    rng = np.random.default_rng(2)
    p0 = rng.standard_normal(N).astype(np.float32)
    with open_device("golden", spec) as dev, ShardState(dev, p0, chunk_elems=CHUNK) as shard:
        status = dev.manifest["register_map"]["status"]
        assert status["bits"] == STATUS_BITS
        shard.step(make_grad(rng, N, spec.grad_dtype), Hyper(step=1, lr=1e-2))
        assert dev.read_reg(status["offset"]) == 0
        plain = dev.read_reg

        def read_reg(offset: int, cu: int = 0) -> int:
            value = plain(offset, cu)
            return value | 1 << STATUS_BITS["read_response"] if offset == status["offset"] else value

        dev.read_reg = read_reg  # type: ignore[method-assign]
        with pytest.raises(KernelStatusError, match="read_response") as err:
            shard.step(make_grad(rng, N, spec.grad_dtype), Hyper(step=2, lr=1e-2))
        assert err.value.causes == ("read_response",)
        dev.read_reg = plain  # type: ignore[method-assign]
        with pytest.raises(StateError, match="checkpoint"):
            shard.step(make_grad(rng, N, spec.grad_dtype), Hyper(step=2, lr=1e-2))


def test_every_status_bit_is_named_and_marks_the_shard_inconsistent() -> None:
    """Each STATUS bit of the register map (stream_keep included) raises KernelStatusError with its name and
    cause; whatever the bit, the shard then refuses to step: memory may hold p, m, v of two steps."""
    from hls.regmap import STATUS_BITS, STATUS_CAUSES
    from pynq_driver.errors import KernelStatusError, StateError

    spec = KernelSpec()
    rng = np.random.default_rng(4)
    p0 = rng.standard_normal(N).astype(np.float32)
    assert set(STATUS_CAUSES) == set(STATUS_BITS)
    for name, bit in STATUS_BITS.items():
        with open_device("golden", spec) as dev, ShardState(dev, p0, chunk_elems=CHUNK) as shard:
            offset = dev.manifest["register_map"]["status"]["offset"]
            plain = dev.read_reg
            dev.read_reg = lambda o, cu=0, plain=plain, bit=bit, at=offset: plain(o, cu) | (1 << bit if o == at else 0)
            with pytest.raises(KernelStatusError, match=name) as err:
                shard.step(make_grad(rng, N, spec.grad_dtype), Hyper(step=1, lr=1e-2))
            assert err.value.causes == (name,) and STATUS_CAUSES[name] in str(err.value)
            dev.read_reg = plain
            with pytest.raises(StateError, match="checkpoint"):
                shard.step(make_grad(rng, N, spec.grad_dtype), Hyper(step=1, lr=1e-2))


def test_status_error_names_the_port() -> None:
    """A response error names the m_axi port(s) from the PORT_ERR words after STATUS (bit k of
    word k // 32 is the k-th pointer argument): "RRESP error on port p1_rd"."""
    from hls.regmap import STATUS_BITS
    from pynq_driver.errors import KernelStatusError

    spec = KernelSpec(stripes=3)
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(N).astype(np.float32)
    with open_device("golden", spec) as dev, ShardState(dev, p0, chunk_elems=CHUNK) as shard:
        status = dev.manifest["register_map"]["status"]
        per_port = status["port_errors"]
        pointers = [a["name"] for a in dev.manifest["register_map"]["args"] if a["kind"] == "pointer"]
        assert per_port["ports"] == pointers and len(per_port["offsets"]) == -(-len(pointers) // 32)
        assert per_port["offsets"][0] == status["offset"] + 8
        plain = dev.read_reg
        bad = {"p1_rd": "RRESP", "v2_wr": "BRESP"}
        bits = sum(1 << pointers.index(p) for p in bad)
        fake = {status["offset"]: 1 << STATUS_BITS["read_response"] | 1 << STATUS_BITS["write_response"],
                **{o: bits >> (32 * k) & 0xFFFFFFFF for k, o in enumerate(per_port["offsets"])}}

        def read_reg(offset: int, cu: int = 0) -> int:
            return fake.get(offset, plain(offset, cu))

        dev.read_reg = read_reg  # type: ignore[method-assign]
        with pytest.raises(KernelStatusError, match="RRESP error on port p1_rd") as err:
            shard.step(make_grad(rng, N, spec.grad_dtype), Hyper(step=1, lr=1e-2))
        assert err.value.ports == (("p1_rd", "RRESP"), ("v2_wr", "BRESP"))
        assert "BRESP error on port v2_wr" in str(err.value)
        dev.read_reg = plain  # type: ignore[method-assign]


def _aligned(n: int, dtype: type, misalign: int = 0) -> np.ndarray:
    """An array of n elements whose data starts `misalign` bytes past a 64-byte boundary."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + misalign
    return raw[start:start + n * itemsize].view(dtype)


@pytest.mark.parametrize("backend", ["golden", "csim"])
def test_lent_host_memory_gives_the_same_bits_as_staging_copies(backend: str) -> None:
    """On the software cards the kernel reads a 64-byte aligned gradient and writes into a 64-byte
    aligned output in place (Device.import_host, counted here); misaligned arrays and the partial
    last chunk go through the staging copies. Every path gives the golden model's bits."""
    spec = KernelSpec()
    rng = np.random.default_rng(3)
    n = 4 * CHUNK + 40  # whole chunks lent, the last 40 elements (not whole beats) copied
    p0 = rng.standard_normal(n).astype(np.float32)
    grads = [make_grad(rng, n, "fp32") for _ in range(3)]
    p, m, v = p0.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
    with open_device(backend, spec) as dev, ShardState(dev, p0, chunk_elems=CHUNK) as shard:
        lent = []
        real = dev.import_host

        def counting(array, bank, stripes=1, index=0):
            buf = real(array, bank, stripes, index)
            lent.append(buf is not None)
            return buf

        dev.import_host = counting
        for step, misalign in zip((1, 2, 3), (0, 4, 16), strict=True):
            g, out = _aligned(n, np.float32, misalign), _aligned(n, np.float32, misalign)
            g[...] = grads[step - 1]
            lent.clear()
            hyper = Hyper(step=step, lr=1e-3)
            shard.step(g, hyper, out=out)
            adam_update(p, m, v, grads[step - 1], prepare_scalars(hyper, "adamw"))
            assert first_mismatch(out, p) is None, (step, misalign)
            # 4 whole chunks lent twice each (gradient and output) when aligned; nothing when not
            assert sum(lent) == (8 if misalign == 0 else 0), (misalign, lent)
        for name, want in (("p", p), ("m", m), ("v", v)):
            got = shard.read_range(name, 0, np.empty(n, np.float32))
            assert first_mismatch(got, want) is None, name
