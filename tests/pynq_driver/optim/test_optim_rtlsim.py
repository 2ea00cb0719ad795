"""NicAdamW on the `rtlsim` backend: the generated RTL kernel in Verilator, driven like a card.

A shorter run than the csim parity tests (the simulated kernel moves every beat through the
cocotb AXI models): the parameters must equal the golden backend's bit for bit after every
step, and track torch.optim.AdamW as closely as csim does.
"""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch

from optimusnic.demo.run import max_param_diff, regression_task
from pynq_driver.optim.adam import NicAdamW

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pynq_driver.backends.rtlsim") is None,
                                reason="the rtlsim backend (pynq_driver/backends/rtlsim.py) is not in this checkout")

STEPS = 8


def test_rtlsim_matches_golden_bit_for_bit_and_torch_closely():
    torch.set_num_threads(1)
    task = regression_task(seed=12, hidden=16)
    golden_model = copy.deepcopy(task.model)
    ref_model = copy.deepcopy(task.model)
    rtl = NicAdamW(task.model.parameters(), lr=1e-2, backend="rtlsim", timeout_s=120.0,
                   lanes=4)  # the build test_driver_rtlsim shares
    gold = NicAdamW(golden_model.parameters(), lr=1e-2, backend="golden")
    ref = torch.optim.AdamW(ref_model.parameters(), lr=1e-2)
    try:
        assert rtl.shards()[0].backend == "rtlsim"
        losses = []
        for s in range(STEPS):
            x, y = task.batch(s)
            for model, opt in ((task.model, rtl), (golden_model, gold), (ref_model, ref)):
                opt.zero_grad()
                loss = task.loss(model, x, y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            for a, b in zip(task.model.parameters(), golden_model.parameters(), strict=True):
                assert torch.equal(a, b), f"step {s + 1}: rtlsim differs from the golden model"
        assert max_param_diff(task.model, ref_model) < 2e-6
        sd = rtl.state_dict()
        torch.optim.AdamW(ref_model.parameters()).load_state_dict(sd)
        assert sd["state"][0]["step"].item() == STEPS
    finally:
        rtl.close()
