"""NetCluster: N software cards, each with its own UDP socket on 127.0.0.1 and its own event-loop
thread, equal `hls.net.ring.ring_step` bit for bit over several steps (every rank's gathered
parameters, every owner's p, m, v), with and without a fault layer on the wire.

Default runs cover every world size x backend x wire dtype x payload; the long runs (a large
vector, heavy faults over many seeds) are `@pytest.mark.slow` (pytest --full).
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from ringcheck import grads, hyper, run_steps

from hls.errors import ToolMissing, UserError
from hls.net import ring
from hls.spec import KernelSpec
from pynq_driver.net.cluster import NetCluster
from pynq_driver.net.faults import Faults
from pynq_driver.net.node import RingNode, check_backend
from pynq_driver.net.transport import UdpTransport

# (world, backend, wire dtype, payload bytes): every combination (about 0.3 s each).
CASES = list(itertools.product([2, 3, 4], ["golden", "csim"], ["fp32", "bf16"], [1408, 8192]))
# Lengths that leave padding in the last chunk and need several packets per chunk.
LENGTH = {1408: 7001, 8192: 20011}


def _params(length: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(length).astype(np.float32)


def _run(world: int, backend: str, wire_dtype: str, payload: int, *, steps: int = 3, out_dtype: str = "fp32",
         faults: Faults | None = None, **kw) -> dict[str, int]:
    length = LENGTH[payload]
    params = _params(length)
    spec = KernelSpec(out_dtype=out_dtype)
    with NetCluster(backend, spec, world, params, wire_dtype=wire_dtype, payload_bytes=payload, faults=faults,
                    peer_timeout_s=20.0) as cluster:
        assert cluster.wire_dtype == wire_dtype and cluster.nodes[0].spec.grad_dtype == wire_dtype
        run_steps(cluster, params, steps, seed=world * 100 + payload, **kw)
        return cluster.totals()


@pytest.mark.parametrize("world,backend,wire_dtype,payload", CASES)
def test_cluster_equals_ring_step(world, backend, wire_dtype, payload):
    totals = _run(world, backend, wire_dtype, payload)
    assert totals["dropped_fcs"] == 0 and totals["frames_in"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("backend,wire_dtype", [("golden", "bf16"), ("csim", "fp32")])
def test_cluster_long_run_large_vector(backend, wire_dtype):
    """A 600k-element vector over 8 steps on 4 cards, with faults."""
    params = _params(600_000)
    with NetCluster(backend, KernelSpec(), 4, params, wire_dtype=wire_dtype, payload_bytes=8192, faults=FAULTS,
                    peer_timeout_s=30.0) as cluster:
        run_steps(cluster, params, 8, seed=9, timeout_s=120)


def test_bf16_parameters_and_two_phase_clip():
    """bf16 parameters out of the kernel on the wire, and the two-phase step with clipping."""
    _run(3, "golden", "bf16", 1408, out_dtype="bf16", two_phase=True, max_norm=0.5)


def test_two_phase_skips_a_nonfinite_step_on_every_card():
    params = _params(3001)
    world = 3
    with NetCluster("golden", KernelSpec(), world, params, peer_timeout_s=20.0) as cluster:
        rng = np.random.default_rng(5)
        shards = [ring.Shard.from_params(params, r, world) for r in range(world)]
        local = grads(rng, world, params.size, "fp32")
        local[1][1234] = np.inf
        outs = cluster.step(local, hyper(1), two_phase=True, timeout_s=30)
        ref = ring.ring_step(shards, local, hyper(1), two_phase=True)
        assert ref.grad_scale is None
        for out in outs:
            assert np.array_equal(out, params)
        assert [n.kernel.skipped for n in cluster.nodes] == [1, 1, 1]
        assert all(n.last_step_skipped for n in cluster.nodes)
        local[1][1234] = 0.0
        cluster.step(local, hyper(1), two_phase=True, timeout_s=30)
        assert not any(n.last_step_skipped for n in cluster.nodes)
        assert {n.kernel.last_grad_scale for n in cluster.nodes} == {1.0 / world}


FAULTS = Faults(drop=1e-2, duplicate=2e-2, reorder=2e-2, bitflip=1e-2, delay=2e-2, delay_s=0.003, seed=7)


@pytest.mark.parametrize("world,backend,wire_dtype,payload", [(3, "golden", "fp32", 1408), (4, "csim", "bf16", 8192)])
def test_cluster_under_faults(world, backend, wire_dtype, payload):
    """Seeded drop, duplicate, reorder, bit flips and delay: still bit-exact; the counters show the
    retransmissions and the frames failing their FCS."""
    totals = _run(world, backend, wire_dtype, payload, steps=6, faults=FAULTS)
    print({k: v for k, v in totals.items() if v})
    assert totals["fault_dropped"] > 0 and totals["fault_bitflipped"] > 0
    assert totals["fault_duplicated"] > 0 and totals["fault_reordered"] > 0 and totals["fault_delayed"] > 0
    assert totals["retransmitted_frames"] > 0
    # CRC-32 catches every single-bit error (a corrupted frame still in flight at the end is not counted)
    assert 0 < totals["dropped_fcs"] <= totals["fault_bitflipped"]
    assert totals["dropped_duplicate"] > 0


@pytest.mark.parametrize("seed", [pytest.param(s, marks=[pytest.mark.slow] if s > 1 else []) for s in range(8)])
def test_cluster_under_heavy_faults(seed):
    heavy = Faults(drop=5e-2, duplicate=5e-2, reorder=5e-2, bitflip=3e-2, delay=5e-2, seed=seed)
    _run(4, "golden", "bf16", 1408, steps=5, faults=heavy)


def test_state_dict_round_trip_continues_bit_exact():
    """The owner's shard state (p, m, v, step) saved after two steps and loaded into a new ring
    continues exactly as the ring that never stopped."""
    params = _params(4001)
    world = 2
    with NetCluster("golden", KernelSpec(), world, params) as a:
        rng = np.random.default_rng(3)
        for step in (1, 2):
            a.step(grads(rng, world, params.size, "fp32"), hyper(step), timeout_s=30)
        saved = a.state_dicts()
        assert [sd["step"] for sd in saved] == [2, 2] and saved[1]["lo"] == saved[1]["chunk_elems"]
        local = grads(rng, world, params.size, "fp32")
        want = a.step(local, hyper(3), timeout_s=30)
    with NetCluster("csim", KernelSpec(), world, params) as b:
        for node, sd in zip(b.nodes, saved, strict=True):
            node.load_state_dict(sd)
        got = b.step(local, hyper(3), timeout_s=30)
        with pytest.raises(UserError, match="rank"):
            b.nodes[0].load_state_dict(saved[1])
    assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))


def test_alveo_needs_the_network_bitstream():
    with pytest.raises(ToolMissing, match="network bitstream.*the card's network RTL"):
        NetCluster("alveo", KernelSpec(), 2, 100)
    with pytest.raises(UserError, match=r"NetCluster\('rtlsim'"):  # one RTL card cannot join a UDP ring
        check_backend("rtlsim")


def test_bad_input_is_refused_before_the_wire():
    with NetCluster("golden", KernelSpec(), 2, 100, wire_dtype="bf16") as cluster:
        with pytest.raises(UserError, match="wire dtype bf16"):
            cluster.step([np.zeros(100, np.float32)] * 2, hyper(1))
        with pytest.raises(UserError, match="2 ranks"):
            cluster.step([np.zeros(100, np.uint16)], hyper(1))
        with pytest.raises(UserError, match="two-phase"):
            cluster.nodes[0].start(np.zeros(100, np.uint16), hyper(1), max_norm=1.0)
    with pytest.raises(UserError, match="wire_dtype"):
        NetCluster("golden", KernelSpec(), 2, 100, wire_dtype="fp16")
    with pytest.raises(UserError, match="world"):
        NetCluster("golden", KernelSpec(), 1, 100)


def test_a_silent_peer_fails_the_step_within_the_timeout():
    """Rank 1's socket exists but no card answers on it: rank 0 raises PeerTimeout naming rank 1."""
    from pynq_driver.net.errors import PeerTimeout

    params = _params(500)
    with UdpTransport() as mine, UdpTransport() as silent:
        peers = [mine.address, silent.address]
        with RingNode("golden", KernelSpec(), rank=0, world=2, params=params, transport=mine, peers=peers,
                      peer_timeout_s=1.0) as node:
            t0 = time.monotonic()
            with pytest.raises(PeerTimeout, match=r"rank 0: ring peer rank 1 sent nothing for 1\.\d s") as err:
                node.step(np.zeros(500, np.float32), hyper(1), timeout_s=10)
            assert time.monotonic() - t0 < 3.0
            assert err.value.peer == 1 and "reduce-scatter" in err.value.awaited
            with pytest.raises(Exception, match="earlier step failed"):
                node.start(np.zeros(500, np.float32), hyper(2))


def test_torch_tensors_in_and_out_and_the_owned_range():
    """The per-rank API a torch optimizer drives: a bf16 gradient tensor in, a bf16 parameter tensor
    filled (`out=`), the same bits as numpy in and out."""
    import torch

    params = _params(1000)
    world = 3
    with NetCluster("golden", KernelSpec(out_dtype="bf16"), world, params, wire_dtype="bf16") as cluster:
        assert [n.owned for n in cluster.nodes] == [(0, 336), (336, 672), (672, 1000)]
        rng = np.random.default_rng(2)
        local = grads(rng, world, params.size, "bf16")
        tensors = [torch.from_numpy(g.view(np.int16)).view(torch.bfloat16) for g in local]
        outs = [torch.empty(params.size, dtype=torch.bfloat16) for _ in range(world)]
        for node, t in zip(cluster.nodes, tensors, strict=True):
            node.start(t, hyper(1))
        got = [node.wait(30, out=o) for node, o in zip(cluster.nodes, outs, strict=True)]
        shards = [ring.Shard.from_params(params, r, world) for r in range(world)]
        ref = ring.ring_step(shards, local, hyper(1), wire_dtype="bf16", out_dtype="bf16")
        for g, o in zip(got, outs, strict=True):
            assert np.array_equal(g, ref.gathered)
            assert np.array_equal(o.view(torch.int16).numpy().view(np.uint16), ref.gathered)
