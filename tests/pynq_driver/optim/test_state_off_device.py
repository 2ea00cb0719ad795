"""Checkpoints of NicAdamW never bring the offloaded state back to the parameters' device.

There is no GPU here, so the parameters live on a stand-in (tests/doubles/fake_gpu.py: a
PrivateUse1 device whose every aten op the test intercepts, each of its allocations counted by
bytes while alive). The driver's code runs unchanged and takes its non-host paths (a fakegpu
tensor is not a numpy-readable host tensor); what it allocates on the device is measured, not
inferred: state_dict(), optimizer.state reads, DCP's get/set_optimizer_state_dict and
load_state_dict must stay within one chunk of device memory beyond the model (they allocate none:
the state tensors are host tensors, read from and written to the card a chunk at a time). A
control shows the meter sees a state tensor copied to the device.
"""

from __future__ import annotations

import copy

import torch
from fake_gpu import DEVICE, MEMORY, FakeGpu

from pynq_driver.optim.adam import NicAdamW

CHUNK = 1 << 10  # elements: the two weights' state tensors are 8 and 16 chunks each


def _model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))


def _train(model, opt, steps, device):
    for s in range(steps):
        g = torch.Generator().manual_seed(s)
        x = torch.randn(16, 32, generator=g).to(device)
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()


def test_checkpoints_stay_within_a_chunk_of_device_memory():
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    host_model = _model()
    host_opt = NicAdamW(host_model.parameters(), lr=1e-2, backend="golden", chunk_elems=CHUNK)
    _train(host_model, host_opt, 3, "cpu")
    chunk_bytes = 4 * CHUNK
    state_bytes = 8 * sum(p.numel() for p in host_model.parameters())
    with FakeGpu():
        model = copy.deepcopy(_model()).to(DEVICE)
        opt = NicAdamW(model.parameters(), lr=1e-2, backend="golden", chunk_elems=CHUNK)
        _train(model, opt, 3, DEVICE)
        w = model[0].weight
        assert w.device == DEVICE
        base = MEMORY.live
        peaks = {}
        for what, run in (
            ("state_dict", lambda: opt.state_dict()),
            ("optimizer.state", lambda: [dict(opt.state[p]) for p in model.parameters()]),
            ("get_optimizer_state_dict", lambda: get_optimizer_state_dict(model, opt)),
        ):
            MEMORY.reset_peak()
            out = run()
            peaks[what] = MEMORY.peak - base
            del out
        sd = opt.state_dict()
        MEMORY.reset_peak()
        opt.load_state_dict(sd)
        peaks["load_state_dict"] = MEMORY.peak - base
        osd = get_optimizer_state_dict(model, opt)
        MEMORY.reset_peak()
        set_optimizer_state_dict(model, opt, osd)
        peaks["set_optimizer_state_dict"] = MEMORY.peak - base
        print(f"device bytes beyond the model, state {state_bytes} B, one chunk {chunk_bytes} B: "
              + ", ".join(f"{k} {v}" for k, v in peaks.items()))
        # Where the state is: host tensors, shaped as the parameter.
        m = opt.state[w]["exp_avg"]
        assert m.device.type == "cpu" and m.shape == w.shape and m.dtype == torch.float32
        assert sd["state"][0]["exp_avg_sq"].device.type == "cpu"
        # The control: a state tensor a user copies to the device is counted, every byte of it.
        MEMORY.reset_peak()
        on_device = m.to(DEVICE)
        control = MEMORY.peak - base
        del on_device
        # The state read through the device run is the host run's, bit for bit (same steps).
        for p, q in zip(model.parameters(), host_model.parameters(), strict=True):
            for key in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(opt.state[p][key], host_opt.state[q][key])
            assert torch.equal(p.cpu(), q.detach())
    print(f"control: .to(device) of one state tensor: {control} B")
    assert control == m.numel() * 4
    for what, peak in peaks.items():
        assert peak <= chunk_bytes, what
