"""The staged data path (pynq_driver.optim.devpath) forced on CPU tensors: bit for bit the direct
path's results, the order it issues copies, card work and events in (the CPU stand-ins record it),
change detection by hashes on the device, and the GPU-only properties (skipped without one)."""

from __future__ import annotations

import copy

import pytest
import torch

from hls.errors import UserError
from optimusnic.demo.run import regression_task
from pynq_driver.optim import NicAdam, NicAdamW
from pynq_driver.optim import devpath as dp
from pynq_driver.optim.devpath import (
    RING,
    DevicePath,
    HostHash,
    copies_hidden,
    data_path_option,
    host_hash,
    overlap,
    stages,
    tensor_hash,
)

# Small chunks, whole stripe rounds of the default fp32 and bf16 kernels (96 and 128 elements):
# every bucket streams more pieces than the ring holds.
CHUNK = 384


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def groups(model):
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if not n.endswith("weight")]
    return [{"params": weights, "lr": 5e-3, "weight_decay": 0.1}, {"params": biases, "lr": 1e-2, "weight_decay": 0.0}]


def edit(model, s):
    """Changes between steps that the optimizer must pick up, one kind per step."""
    w = model[0].weight
    with torch.no_grad():
        if s == 2:
            w.data[0, 0] += 1  # through .data: p._version does not move
        elif s == 3:
            model.load_state_dict({k: v * 0.5 for k, v in model.state_dict().items()})
        elif s == 4:
            w.data[1, 1] = -0.0 if w[1, 1] == 0 else -w[1, 1]
        elif s == 5:
            w.data = w.data.clone() * 2  # new storage


def run(path, backend, dtype, make=NicAdamW, steps=7, maximize=False):
    task = regression_task(seed=5)
    model = task.model.to(dtype)
    opt = make(groups(model), backend=backend, chunk_elems=CHUNK, data_path=path, maximize=maximize)
    for s in range(steps):
        x, y = task.batch(s)
        opt.zero_grad()
        task.loss(model, x.to(dtype), y.to(dtype)).backward()
        opt.step()
        edit(model, s)
    out = [p.detach().clone() for p in model.parameters()], opt.state_dict()
    paths = opt.device_paths()
    opt.close()
    return out, paths


@pytest.mark.parametrize("backend", ["golden", "csim"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_pipeline_on_cpu_is_bit_exact_with_the_direct_path(backend, dtype):
    (direct, sd_direct), none = run("direct", backend, dtype)
    (piped, sd_piped), paths = run("pipeline", backend, dtype)
    assert none == {} and list(paths) == ["cpu"] and paths["cpu"].trace  # it did take the staged path
    for a, b in zip(direct, piped, strict=True):
        assert torch.equal(a.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                           b.view(torch.int16 if dtype == torch.bfloat16 else torch.int32))
    for k, st in sd_direct["state"].items():
        for key, v in st.items():
            assert torch.equal(v, sd_piped["state"][k][key]), (k, key)


def test_pipeline_nic_adam_and_maximize_bit_exact():
    for make, maximize in ((NicAdam, False), (NicAdamW, True)):
        (direct, _), _ = run("direct", "golden", torch.float32, make=make, steps=4, maximize=maximize)
        (piped, _), _ = run("pipeline", "golden", torch.float32, make=make, steps=4, maximize=maximize)
        assert all(torch.equal(a, b) for a, b in zip(direct, piped, strict=True))


def card_trace(opt):
    """The staged path's trace, with every kernel wait of the card logged in it as well."""
    path = DevicePath(torch.device("cpu"))
    opt._devpaths["cpu"] = path
    for shard in opt.shards():
        for part in shard.parts:
            def wait(*a, _w=part.runner.wait, **k):
                _w(*a, **k)
                path.trace.append(("card.wait",))
            part.runner.wait = wait
    return path.trace


def test_the_order_of_copies_card_work_and_events():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(8 * CHUNK))  # one tensor: eight pieces through a ring of three
    opt = NicAdamW([w], backend="csim", chunk_elems=CHUNK, data_path="pipeline")
    trace = card_trace(opt)
    w.grad = torch.randn_like(w)
    opt.step()
    at = {e: i for i, e in enumerate(trace)}
    waits = [i for i, e in enumerate(trace) if e == ("card.wait",)]
    n = len(waits)
    assert n == 8 and RING == 3
    # The side streams start after an event on the compute stream; so does the first hash.
    assert trace[:3] == [("record", "compute", "ready"), ("wait", "d2h", "ready"), ("wait", "h2d", "ready")]
    # The tensor is hashed on the gradient stream just before its first gradient copy (its flag
    # comes over with that chunk); compared (first step: nothing known) before the card runs it.
    assert at[("hash", "d2h", 0)] < at[("issue", "d2h", 0)] < at[("compare", 0)] < at[("card.stage", 0)]
    for k in range(n):
        assert at[("sync", f"d2h-{k}")] < at[("card.stage", k)]  # the card takes a chunk once it arrived
        if k + 1 < n:  # the next chunk's device-to-host copy is issued before the card's work on k ends
            assert at[("issue", "d2h", k + 1)] < waits[k]
        if k >= 1:  # and the copy back of chunk k-1 before it too (issued once k was launched)
            assert at[("issue", "h2d", k - 1)] < waits[k]
            assert at[("card.stage", k)] < waits[k - 1]  # chunk k is staged while k-1 runs
        if k + RING < n:  # a ring buffer is refilled only once the card finished with it
            assert waits[k] < at[("issue", "d2h", k + RING)]
        if k >= RING:  # and its output half once its copy back is done
            assert at[("sync", f"h2d-{k - RING}")] < at[("card.stage", k)]
    # The end: the compute stream waits on the side streams' last events; the host never waits for them.
    assert trace[-4:] == [("record", "h2d", "end"), ("wait", "compute", "end"),
                          ("record", "d2h", "end"), ("wait", "compute", "end")]
    assert not any(e[0] == "sync" and e[1] in ("end", f"h2d-{n - 1}") for e in trace)
    opt.close()


def compares_per_step(trace):
    steps, cur = [], None
    for e in trace:
        if e == ("record", "compute", "ready"):
            cur = []
            steps.append(cur)
        elif e[0] == "compare":
            cur.append(e[1])
    return steps


def test_change_detection_reads_back_only_what_changed():
    task = regression_task(seed=6)
    model = task.model
    opt = NicAdamW(model.parameters(), backend="golden", chunk_elems=CHUNK, data_path="pipeline")
    trace = card_trace(opt)
    keys = [id(s.key) for s in opt._buckets[0][0].slots]  # the bucket's slots, in card order
    slot_of = {n: keys.index(id(p)) for n, p in model.named_parameters()}

    def step(s):
        x, y = task.batch(s)
        opt.zero_grad()
        task.loss(model, x, y).backward()
        opt.step()

    step(0)  # nothing known yet: every tensor is compared once
    step(1)  # nothing changed: nothing read back
    with torch.no_grad():
        model[0].bias.data[3] = -model[0].bias.data[3]  # .data: not seen by p._version
    step(2)
    saved = opt.state_dict()
    opt.load_state_dict(saved)  # the card's masters were written from the host: every hash stale
    step(3)
    step(4)
    got = compares_per_step(trace)
    assert sorted(got[0]) == sorted(slot_of.values()) and got[1] == []
    assert got[2] == [slot_of["0.bias"]]
    assert sorted(got[3]) == sorted(slot_of.values()) and got[4] == []
    opt.close()


def test_tensor_hash_sees_every_single_element_change(monkeypatch):
    monkeypatch.setattr(dp, "_HASH_BLOCK", 64)  # several blocks
    torch.manual_seed(1)
    base = torch.randn(300)
    base[7] = 0.0
    h0 = tensor_hash(base)
    assert torch.equal(h0, tensor_hash(base.clone()))
    bits = base.view(torch.int32)
    for i in range(base.numel()):
        for flip in (1, 1 << 22, 1 << 31):  # lowest mantissa bit, a NaN payload's bit, the sign (-0.0)
            other = bits.clone()
            other[i] ^= flip
            assert not torch.equal(h0, tensor_hash(other.view(torch.float32))), (i, flip)
    swapped = base.clone()
    swapped[[0, 1]] = swapped[[1, 0]]
    assert not torch.equal(h0, tensor_hash(swapped))
    assert host_hash(base) == host_hash(base.clone()) != host_hash(swapped)
    # Both are taken part by part as the results are written: the parts' hashes make the whole's.
    assert torch.equal(tensor_hash(base[:100]) + tensor_hash(base[100:], start=100), h0)
    inc = HostHash()
    inc.update(base[:100])
    inc.update(base[100:])
    assert inc.value() == host_hash(base)
    b16 = base.to(torch.bfloat16)
    other = b16.clone()
    other.view(torch.int16)[5] ^= 1
    assert not torch.equal(tensor_hash(b16), tensor_hash(other))


def test_skipped_step_leaves_everything_as_it_was():
    torch.manual_seed(2)
    w = torch.nn.Parameter(torch.randn(5 * CHUNK))
    opt = NicAdamW([w], backend="golden", chunk_elems=CHUNK, data_path="pipeline", skip_nonfinite=True)
    w.grad = torch.randn_like(w)
    opt.step()
    before, state = w.detach().clone(), opt.state_dict()
    w.grad[3 * CHUNK + 1] = float("inf")
    opt.step()
    assert opt.skipped_steps == 1 and torch.equal(w, before)
    assert all(torch.equal(v, opt.state_dict()["state"][0][k]) for k, v in state["state"][0].items())
    opt.close()


def test_data_path_option_is_validated(monkeypatch):
    p = [torch.nn.Parameter(torch.zeros(8))]
    with pytest.raises(UserError, match="data_path='gpu'"):
        NicAdamW(p, backend="golden", data_path="gpu")
    monkeypatch.setenv("OPTIMUSNIC_DATA_PATH", "staged")
    with pytest.raises(UserError, match="OPTIMUSNIC_DATA_PATH='staged'"):
        data_path_option(None)
    monkeypatch.setenv("OPTIMUSNIC_DATA_PATH", "pipeline")
    opt = NicAdamW(p, backend="golden")
    assert opt.data_path == "pipeline"
    opt.close()
    monkeypatch.delenv("OPTIMUSNIC_DATA_PATH")
    opt = NicAdamW(p, backend="golden")
    assert opt.data_path == "auto"
    p[0].grad = torch.ones(8)
    opt.step()
    assert opt.device_paths() == {}  # CPU tensors: the direct path unless forced
    opt.close()


def test_overlap_of_intervals():
    tl = {"card": [(0.0, 1.0), (2.0, 3.0)], "d2h": [(0.5, 1.5)], "h2d": [(0.8, 2.5)]}
    assert overlap(tl) == pytest.approx(0.5)  # [0.5, 1.0] and [2.0, 2.5]: 1 s of the card's 2 s
    assert copies_hidden(tl) == pytest.approx(0.5)  # the same 1 s of the copies' [0.5, 2.5]
    assert overlap({"card": []}) is None and copies_hidden({"card": [(0.0, 1.0)]}) is None


# ---- on a GPU (any torch accelerator): skipped here, with the reason ----------------------------------
# (`stages` also rules out the fake GPU of tests/doubles, which has no streams or pinned memory.)
ACCEL = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
needs_accel = pytest.mark.skipif(ACCEL is None or not stages(ACCEL),
                                 reason="no torch accelerator (GPU) with streams on this machine")


@needs_accel
def test_gpu_ring_is_pinned_and_step_does_not_synchronize(monkeypatch):
    torch.manual_seed(3)
    model = torch.nn.Linear(512, 512).to(ACCEL)
    ref = copy.deepcopy(model)
    opt = NicAdamW(model.parameters(), backend="csim", chunk_elems=4096)
    direct = NicAdamW(ref.parameters(), backend="csim", chunk_elems=4096, data_path="direct")
    calls = []
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda *a: calls.append(a))
    if hasattr(torch, "cuda"):
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append(a))
    for _ in range(3):
        x = torch.randn(64, 512, device=ACCEL)
        for m, o in ((model, opt), (ref, direct)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
    assert calls == []
    path = opt.device_paths()[str(model.weight.device)]
    assert all(g.is_pinned() and o.is_pinned() for g, o in path.ring)
    # A kernel queued on the compute stream right after step() sees the new parameters.
    assert torch.equal(model.weight.sum(), ref.weight.sum())
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters(), strict=True))
    opt.close()
    direct.close()


@needs_accel
def test_gpu_copies_overlap_the_card():
    torch.manual_seed(4)
    w = torch.nn.Parameter(torch.randn(1 << 22, device=ACCEL))
    opt = NicAdamW([w], backend="csim", chunk_elems=1 << 18)
    path = None
    for _ in range(3):
        w.grad = torch.randn_like(w)
        opt.step()
        path = opt.device_paths()[str(w.device)]
        path.profile = True
    w.grad = torch.randn_like(w)
    opt.step()
    torch.accelerator.synchronize()
    frac, hidden = overlap(path.timeline), copies_hidden(path.timeline)
    print(f"the card's time under copies: {frac:.2f}; the copies' time under the card's work: {hidden:.2f}")
    # 16 chunks: all but the first gradient copies and the last result copy can run beside the card.
    assert frac is not None and frac > 0 and hidden > 0.5
    opt.close()
