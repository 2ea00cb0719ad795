"""NicAdamW behaves as torch.optim.AdamW in the patterns of real training scripts.

Each test runs the same script with torch.optim.AdamW and with NicAdamW (golden backend) and
compares: parameters within the fp32 tolerance of tests/pynq_driver/optim/test_optim.py, and what torch leaves
untouched (moments and step counts of parameters without a gradient) bit for bit.
"""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from optimusnic.demo.run import max_param_diff, regression_task
from pynq_driver.errors import DeviceClosed
from pynq_driver.optim.adam import MASTER_KEY, NicAdam, NicAdamW

PARAM_TOL = 2e-6


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def twins(seed=20, adam=False, **kw):
    task = regression_task(seed=seed)
    ref = copy.deepcopy(task.model)
    if adam:  # torch.optim.Adam with L2 weight decay
        nic = NicAdam(task.model.parameters(), lr=3e-3, weight_decay=1e-2, backend="golden", **kw)
        tor = torch.optim.Adam(ref.parameters(), lr=3e-3, weight_decay=1e-2)
    else:
        nic = NicAdamW(task.model.parameters(), lr=3e-3, backend="golden", **kw)
        tor = torch.optim.AdamW(ref.parameters(), lr=3e-3)
    return task, task.model, ref, nic, tor


def both(task, model, ref, nic, tor, s, between=None):
    for m, opt in ((model, nic), (ref, tor)):
        x, y = task.batch(s)
        opt.zero_grad()
        task.loss(m, x, y).backward()
        if between is not None:
            between(m)
        opt.step()


def test_frozen_at_construction_trains_once_unfrozen():
    task, model, ref, nic, tor = twins()
    for m in (model, ref):
        m[0].weight.requires_grad_(False)
    for s in range(5):
        both(task, model, ref, nic, tor, s)
    assert model[0].weight not in nic.state
    for m in (model, ref):
        m[0].weight.requires_grad_(True)
    for s in range(5, 15):
        both(task, model, ref, nic, tor, s)
    assert nic.state[model[0].weight]["step"].item() == 10.0 == tor.state[ref[0].weight]["step"].item()
    assert nic.state[model[0].bias]["step"].item() == 15.0
    assert max_param_diff(model, ref) < PARAM_TOL


@pytest.mark.parametrize("adam", [False, True], ids=["adamw", "adam"])
def test_parameters_without_gradient_are_skipped_as_torch_skips_them(adam):
    task, model, ref, nic, tor = twins(adam=adam)
    for s in range(4):
        both(task, model, ref, nic, tor, s)
    names = [n for n, _ in model.named_parameters()]

    def drop(m, which):  # mid-run freezing, an unused branch: these parameters get no gradient
        for n, p in m.named_parameters():
            if n in which:
                p.grad = None

    for s in range(4, 16):
        which = {names[s % len(names)], names[(s * 3) % len(names)]}
        keep = {n: {k: v.clone() for k, v in nic.state[p].items()} for n, p in model.named_parameters() if n in which}
        both(task, model, ref, nic, tor, s, between=lambda m, w=which: drop(m, w))
        for n, p in model.named_parameters():
            if n in which:  # untouched, bit for bit: moments, step count
                for k, v in keep[n].items():
                    assert torch.equal(nic.state[p][k], v), (n, k)
    for (n, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert nic.state[p]["step"].item() == tor.state[q]["step"].item(), n
    assert max_param_diff(model, ref) < PARAM_TOL


def test_edits_through_data_are_picked_up():
    """WGAN-style clamping through p.data (no version bump) and a manual re-init between steps."""
    task, model, ref, nic, tor = twins()
    for s in range(12):
        both(task, model, ref, nic, tor, s)
        for m in (model, ref):
            for p in m.parameters():
                p.data.clamp_(-0.05, 0.05)
        if s == 6:
            for m in (model, ref):
                m[2].weight.data.mul_(0.5)
                m[0].bias.data[:3] = 0.25
    assert max_param_diff(model, ref) < PARAM_TOL
    # and the card's masters are the clamped values, bit for bit
    both(task, model, ref, nic, tor, 12)
    assert max_param_diff(model, ref) < PARAM_TOL


def test_bf16_edits_replace_the_masters_element_by_element():
    """bf16 parameters: the card keeps fp32 masters; an edit replaces exactly the edited elements."""
    task = regression_task(seed=21)
    model = task.model.to(torch.bfloat16)
    nic = NicAdamW(model.parameters(), lr=3e-3, backend="golden")
    for s in range(3):
        x, y = task.batch(s)
        nic.zero_grad()
        task.loss(model, x.bfloat16(), y.bfloat16()).backward()
        nic.step()
    w = model[0].weight
    before = nic.state[w][MASTER_KEY].clone()
    assert torch.equal(before.bfloat16(), w.detach())  # the model holds the masters' bf16 rounding
    w.data[0, :5] = 0.5  # no version bump
    x, y = task.batch(3)
    nic.zero_grad()
    task.loss(model, x.bfloat16(), y.bfloat16()).backward()
    w.grad = None  # only the other parameters step: the check still runs at w's next step
    nic.step()
    for s in range(4, 5):
        x, y = task.batch(s)
        nic.zero_grad()
        task.loss(model, x.bfloat16(), y.bfloat16()).backward()
        g = w.grad.float().clone()
        m_before = nic.state[w]["exp_avg"].clone()
        v_before = nic.state[w]["exp_avg_sq"].clone()
        nic.step()
    # Reference: the golden update on masters = before, with the edited elements replaced by 0.5.
    from hls.golden import Hyper, adam_update, prepare_scalars

    masters = before.clone()
    masters[0, :5] = 0.5
    p, m, v = (t.reshape(-1).numpy().copy() for t in (masters, m_before, v_before))
    sc = prepare_scalars(Hyper(lr=3e-3, step=4, weight_decay=1e-2), "adamw")
    adam_update(p, m, v, g.reshape(-1).numpy(), sc)
    assert torch.equal(nic.state[w][MASTER_KEY].reshape(-1), torch.from_numpy(p))  # bit for bit


def test_optimizer_state_reads_and_writes_the_card():
    task, model, ref, nic, tor = twins()
    for s in range(3):
        both(task, model, ref, nic, tor, s)
    p, q = model[0].weight, ref[0].weight
    assert len(nic.state) == len(tor.state) == len(list(model.parameters()))
    assert set(nic.state[p]) == set(tor.state[q]) == {"step", "exp_avg", "exp_avg_sq"}
    assert nic.state[p]["exp_avg"].shape == p.shape and nic.state[p]["step"].dtype == tor.state[q]["step"].dtype
    torch.testing.assert_close(nic.state[p]["exp_avg_sq"], tor.state[q]["exp_avg_sq"], rtol=1e-5, atol=1e-12)
    # Assignment writes to the card (and torch's optimizer, given the same, steps the same).
    for opt, par in ((nic, p), (tor, q)):
        opt.state[par]["exp_avg"] = torch.full_like(par, 1e-3)
        opt.state[par]["step"] = torch.tensor(100.0)
    assert torch.equal(nic.state[p]["exp_avg"], torch.full_like(p, 1e-3))
    for s in range(3, 8):
        both(task, model, ref, nic, tor, s)
    assert nic.state[p]["step"].item() == 105.0
    assert max_param_diff(model, ref) < PARAM_TOL
    # Deleting a parameter's state: it starts over, as in torch.
    del nic.state[p]
    del tor.state[q]
    assert p not in nic.state
    both(task, model, ref, nic, tor, 8)
    assert nic.state[p]["step"].item() == 1.0
    assert max_param_diff(model, ref) < PARAM_TOL


def test_dcp_state_dict_helpers_take_no_phantom_step():
    """get/set_optimizer_state_dict (torch.distributed.checkpoint.state_dict) on a trained optimizer."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    task, model, ref, nic, tor = twins()
    twin_task, twin, _, twin_nic, _ = twins()
    for s in range(10):
        both(task, model, ref, nic, tor, s)
        x, y = task.batch(s)
        twin_nic.zero_grad()
        task.loss(twin, x, y).backward()
        twin_nic.step()
    osd = get_optimizer_state_dict(model, nic)
    assert osd["state"]["0.weight"]["step"].item() == 10.0
    # A fresh optimizer (on another model copy) gets the state through set_optimizer_state_dict.
    fresh_model = copy.deepcopy(model)
    fresh = NicAdamW(fresh_model.parameters(), lr=3e-3, backend="golden")
    set_optimizer_state_dict(fresh_model, fresh, osd)
    for s in range(10, 20):
        for m, opt in ((model, nic), (twin, twin_nic), (fresh_model, fresh)):
            x, y = task.batch(s)
            opt.zero_grad()
            task.loss(m, x, y).backward()
            opt.step()
    for a, b, c in zip(model.parameters(), twin.parameters(), fresh_model.parameters(), strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)  # no phantom step, no decay: bit for bit
    assert nic.state[model[0].weight]["step"].item() == 20.0


def test_pickle_and_deepcopy_fail_clearly():
    _, model, _, nic, _ = twins()
    with pytest.raises(TypeError, match="state lives on a card"):
        pickle.dumps(nic)
    with pytest.raises(TypeError, match="state lives on a card"):
        copy.deepcopy(nic)
    # A model deep copy is unaffected (what people usually mean), and the state_dict pickles.
    copy.deepcopy(model)
    pickle.dumps(nic.state_dict())


def test_every_call_after_close_says_closed():
    task, model, ref, nic, tor = twins()
    both(task, model, ref, nic, tor, 0)
    sd = nic.state_dict()
    nic.close()
    p = model[0].weight
    for call in (nic.step, nic.state_dict, lambda: nic.load_state_dict(sd), nic.zero_grad,
                 lambda: nic.state[p], lambda: len(nic.state), lambda: nic.add_param_group({"params": []})):
        with pytest.raises(DeviceClosed, match="NicAdamW is closed"):
            call()
    nic.close()  # closing twice is fine


def test_detect_changes_off_is_the_documented_opt_out():
    """detect_changes=False skips the masters' readback: a .data edit is then overwritten."""
    task, model, ref, nic, tor = twins(detect_changes=False)
    both(task, model, ref, nic, tor, 0)
    w = model[0].weight
    w.data.zero_()
    x, y = task.batch(1)
    nic.zero_grad()
    task.loss(model, x, y).backward()
    nic.step()
    assert w.abs().max().item() > 1e-3  # the card's copy won, as documented


# ---- exact change detection: bit patterns, every stripe, chunk and tail --------
def _card_without_host_memory(dev):
    """A test double of a real card's memory: not host memory, so the masters are read back (and
    nothing of the host's is lent to the kernel)."""
    dev.host_view = lambda buf, offset, nbytes: None
    dev.import_host = lambda array, bank, stripes=1, index=0: None
    return dev


@pytest.fixture(params=["compiled", "numpy"])
def comparison(request):
    """The compiled comparison loops (pynq_driver.native), or numpy's gather-and-memcmp, what runs
    where no C compiler is found."""
    import pynq_driver.native as native

    if request.param == "numpy":
        with native.numpy_only():
            yield request.param
        return
    assert native.stripe_equal() is not None, "the C comparison did not build here (a C compiler is installed)"
    yield request.param


def test_compiled_comparison_agrees_with_numpy_on_every_bit():
    """The C loops against a numpy reference: 1-4 stripes, whole and partial last beats, one bit
    flipped anywhere (in the tensor, or in a stripe's bytes, the padding of a partial beat excepted)."""
    import numpy as np

    from hls import layout
    from pynq_driver.native import stripe_equal, striped_equal

    one = stripe_equal()
    assert one is not None
    rng = np.random.default_rng(7)
    for _ in range(300):
        stripes = int(rng.integers(1, 5))
        nbytes = int(rng.integers(1, 40)) * 64 - int(rng.choice([0, 0, 4, 60]))
        want = rng.integers(0, 256, nbytes, dtype=np.uint8)
        cards = layout.split(want, stripes)  # what the card holds: partial last beat zero-padded
        flip = int(rng.integers(-1, nbytes))  # -1: no change
        bit = np.uint8(1 << int(rng.integers(0, 8)))
        if flip >= 0 and rng.random() < 0.5:
            want = want.copy()
            want[flip] ^= bit
        elif flip >= 0:  # the same byte on the card's side
            beat = flip // 64
            cards[beat % stripes][64 * (beat // stripes) + flip % 64] ^= bit
        equal = flip < 0
        assert striped_equal(want, cards) is equal
        assert all(one(want.ctypes.data, want.size, c.ctypes.data, stripes, k) for k, c in enumerate(cards)) is equal


@pytest.mark.parametrize("stripes", [1, 2, 3])
@pytest.mark.parametrize("readback", [False, True], ids=["host-view", "readback"])
def test_state_equals_sees_every_bit_of_every_stripe(stripes, readback, comparison):
    import numpy as np

    from hls.spec import KernelSpec
    from pynq_driver.backends import open_device
    from pynq_driver.shard import ShardState

    dev = open_device("golden", spec=KernelSpec(stripes=stripes))
    if readback:
        _card_without_host_memory(dev)
    align = dev.stripes.beat_align()
    chunk = 4 * align
    n = 3 * chunk + align + 7  # several chunks, and a last beat that is partly used
    rng = np.random.default_rng(stripes)
    p = rng.standard_normal(n, dtype=np.float32)
    bits = p.view(np.int32)
    zeros_at = [0, 16, n - 1]
    p[zeros_at] = 0.0
    bits[chunk + 3] = 0x7FC00001  # a quiet NaN with a payload
    with ShardState(dev, p, chunk) as sh:
        tmp, blk = np.empty(4 * chunk, np.uint8), np.empty(4 * chunk, np.uint8)
        assert sh.state_equals("p", 0, bits, tmp, blk)
        assert sh.state_equals("p", chunk, bits[chunk:], tmp, blk)
        # one element in each stripe's beats, at chunk starts and ends, in the partial last beat
        where = sorted({0, 16, 16 * stripes + 5, chunk - 1, chunk, chunk + 3, 2 * chunk + 16 * (stripes - 1) + 1,
                        n - 8, n - 1})
        for i in where:
            for flip in (np.int32(-2**31), np.int32(1), np.int32(3)):  # sign (-0.0 for 0.0), lowest bits, payload
                q = bits.copy()
                q[i] ^= flip
                assert not sh.state_equals("p", 0, q, tmp, blk), (i, flip)
                lo = i // chunk * chunk
                assert not sh.state_equals("p", lo, q[lo:], tmp, blk), (i, flip)
        assert sh.state_equals("p", 0, bits, tmp, blk)


@pytest.mark.parametrize("readback", [False, True], ids=["host-view", "readback"])
def test_edits_of_single_bits_reach_the_card(readback, comparison):
    """-0.0 for 0.0, another NaN payload, one ulp: the card takes each edit (lr=0 keeps the values,
    so the parameter after the step shows the master the card used, bit for bit)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(100, 37), torch.nn.Linear(37, 5))
    nic = NicAdamW(model.parameters(), lr=0.0, weight_decay=0.0, backend="golden", chunk_elems=1024)
    if readback:
        for s in nic.shards():
            _card_without_host_memory(s.dev)

    def step():
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        nic.step()

    step()
    w, b = model[0].weight.data.view(-1).view(torch.int32), model[0].bias.data.view(torch.int32)
    edits = [(w, 5, 0x7FC00001), (w, 6, 0), (w, 1024 + 16, 0), (w, w.numel() - 1, 0), (b, 3, 0)]
    for t, i, v in edits:
        t[i] = v
    step()
    for t, i, v in edits:
        assert t[i].item() == v
    second = [(w, 5, 0x7FC00002), (w, 6, -2**31), (w, 1024 + 16, -2**31), (w, w.numel() - 1, -2**31),
              (b, 3, -2**31), (w, 2000, w[2000].item() ^ 1)]
    for t, i, v in second:
        t[i] = v
    step()
    for t, i, v in second:
        assert t[i].item() == v, (i, hex(v))
    nic.close()


@pytest.fixture(params=["in-stream", "before-launch"])
def small_comparisons(request, monkeypatch):
    """Where a step compares a few small tensors with their masters: in the stream as it stages
    their piece (the default below 2 MiB), or all before the first launch on two threads (what
    larger comparisons and the inf/NaN scan do), forced here by a threshold of 0."""
    import pynq_driver.optim.base as optim_base

    if request.param == "before-launch":
        monkeypatch.setattr(optim_base, "SCAN_INLINE_BYTES", 0)
    return request.param


@pytest.mark.parametrize("backend", ["golden", "csim"])
def test_masters_read_in_place_take_every_edit(backend, monkeypatch, small_comparisons):
    """On the software cards a tensor whose pieces are whole, 64-byte aligned beats is lent to the
    kernel as its masters (every stripe a view of it, ShardState.stream's masters_in_direct): no
    comparison runs for it, and every edit (clamping, another NaN payload, -0.0, one ulp) reaches
    the card bit for bit as through the comparison and readback of a real card (test double)."""
    from pynq_driver.shard import ShardState

    torch.manual_seed(3)

    def params():
        w1, w2 = torch.randn(40, 128) * 0.1, torch.randn(16, 40) * 0.1  # pieces of a chunk each; one of 640
        odd = torch.randn(2049)[1:]  # 4 bytes past an aligned start: not lent, compared
        return [torch.nn.Parameter(t) for t in (w1, torch.zeros(40), w2, torch.zeros(16), odd)]

    mine = params()
    ref = [torch.nn.Parameter(p.detach().clone()) for p in mine]
    assert mine[-1].data_ptr() % 64 == 4 and all(p.data_ptr() % 64 == 0 for p in mine[:-1])
    nic = NicAdamW(mine, lr=1e-2, backend=backend, chunk_elems=1024)
    readback = NicAdamW(ref, lr=1e-2, backend=backend, chunk_elems=1024)
    for sh in readback.shards():
        _card_without_host_memory(sh.dev)
    lent_stripes = []
    dev = nic.shards()[0].dev
    real_import = dev.import_host

    def counting(array, bank, stripes=1, index=0):
        buf = real_import(array, bank, stripes, index)
        if stripes > 1 and buf is not None:
            lent_stripes.append(array.size)
        return buf

    dev.import_host = counting
    compared = []
    real_equals = ShardState.state_equals

    def equals(self, array, lo, expect, *rest):
        if self.dev is dev:
            compared.append((lo, expect.size))
        return real_equals(self, array, lo, expect, *rest)

    monkeypatch.setattr(ShardState, "state_equals", equals)
    stripes = nic.shards()[0].stripes.state
    chunk = nic.shards()[0].chunk_elems  # 1024 rounded down to whole beats of every stripe (960 at 3 stripes)

    def pieces(n: int) -> list[int]:
        return [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])

    for step in range(6):
        g = [torch.randn_like(p) for p in mine]
        for p, q, gg in zip(mine, ref, g, strict=True):
            p.grad, q.grad = gg.clone(), gg.clone()
        lent_stripes.clear()
        compared.clear()
        nic.step()
        readback.step()
        for p, q in zip(mine, ref, strict=True):
            assert torch.equal(p.detach().view(torch.int32), q.detach().view(torch.int32)), step
        # the weights' pieces lent, every stripe; only the biases and the misaligned tensor compared
        assert sorted(lent_stripes) == sorted((pieces(40 * 128) + pieces(16 * 40)) * stripes), step
        assert sum(n for _, n in compared) == 40 + 16 + 2048, (step, compared)
        for ps in (mine, ref):  # edits between steps, through .data (no version bump)
            ps[0].data.clamp_(-0.15, 0.15)
            w1, w2 = ps[0].data.view(-1).view(torch.int32), ps[2].data.view(-1).view(torch.int32)
            w1[7] = 0x7FC00001 + step  # another NaN payload each step
            w1[1024 + 16] = -2**31  # -0.0
            w2[600] = w2[600] ^ 1  # one ulp
    for p, q in zip(mine, ref, strict=True):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(nic.state[p][key].view(-1).view(torch.int32) if key != "step" else nic.state[p][key],
                               readback.state[q][key].view(-1).view(torch.int32) if key != "step"
                               else readback.state[q][key]), key
    nic.close()
    readback.close()


@pytest.mark.parametrize("where", ["first", "middle", "last", "second-group"])
def test_a_nonfinite_gradient_anywhere_leaves_everything_as_it_was(where, small_comparisons):
    """skip_nonfinite=True: the inf/NaN scan runs on two threads beside the first piece's staging;
    wherever the bad value is, nothing on the card changes (state, step counts) and the parameters
    keep their values."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 40))
    groups = [{"params": list(model[0].parameters())}, {"params": list(model[1].parameters()), "lr": 1e-2}]
    nic = NicAdamW(groups, lr=3e-3, backend="golden", chunk_elems=512, skip_nonfinite=True)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    nic.step()
    before = {k: v.clone() for k, v in nic.state_dict()["state"][0].items()}
    params = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    w0, w1 = model[0].weight.grad.view(-1), model[1].weight.grad.view(-1)
    {"first": w0, "middle": w0, "last": w0, "second-group": w1}[where][
        {"first": 0, "middle": w0.numel() // 2, "last": w0.numel() - 1, "second-group": 700}[where]] = float("nan")
    model[0].weight.data[0, 0] = 0.5  # an edit: the comparison may take it, the step must not happen
    nic.step()
    assert nic.skipped_steps == 1
    after = nic.state_dict()["state"][0]
    for k in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(after[k], before[k]), k
    assert all(int(nic.state[p]["step"]) == 1 for p in model.parameters())
    for p, q in zip(list(model.parameters())[1:], params[1:], strict=True):
        assert torch.equal(p.detach(), q)
    assert model[0].weight.data[0, 0].item() == 0.5
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    nic.step()  # and the next step runs from the edited value
    assert nic.skipped_steps == 1 and int(nic.state[model[0].weight]["step"]) == 2
    nic.close()
