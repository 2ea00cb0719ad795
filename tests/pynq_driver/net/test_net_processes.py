"""Software cards on the wire across processes: each rank a spawned process with its own card and
UDP socket, the ring peers' addresses learnt through a torch.distributed.TCPStore created here
(the store torchrun's rendezvous would provide; the driver only duck-types it). Bit-exact with
`hls.net.ring.ring_step`; a rank that is killed makes every other rank raise within the timeout.
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import time

import numpy as np
import pytest
import torch.distributed as dist
from ringcheck import check_step, grads, hyper, rank_main

from hls.net import ring

LENGTH = 3001


def _spawn(world: int, tmp_path, deadline_s: float = 90.0, **kw) -> list[dict]:
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=60))
    ctx = multiprocessing.get_context("spawn")
    outs = [str(tmp_path / f"rank{r}.npz") for r in range(world)]
    procs = [ctx.Process(target=rank_main, args=(r, world, store.port, outs[r]), kwargs=dict(length=LENGTH, **kw),
                         daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    end = time.monotonic() + deadline_s
    try:
        for p in procs:
            p.join(max(0.1, end - time.monotonic()))
        assert not any(p.is_alive() for p in procs), "a rank did not stop by itself"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    results = []
    for r, path in enumerate(outs):
        try:
            with np.load(path) as z:
                results.append({"info": json.loads(str(z["info"])), **{k: z[k] for k in z.files if k != "info"}})
        except FileNotFoundError:
            results.append({"info": {"rank": r, "missing": True, "exitcode": procs[r].exitcode}})
    return results


@pytest.mark.parametrize("world,wire_dtype", [(2, "bf16"), (3, "fp32")])
def test_processes_equal_ring_step(world, wire_dtype, tmp_path):
    steps = 3
    res = _spawn(world, tmp_path, steps=steps, wire_dtype=wire_dtype)
    for r in res:
        assert "error" not in r["info"] and "missing" not in r["info"], r["info"]
    params = np.random.default_rng(1).standard_normal(LENGTH).astype(np.float32)
    rng = np.random.default_rng(11)
    shards = [ring.Shard.from_params(params, r, world) for r in range(world)]
    for step in range(1, steps + 1):
        local = grads(rng, world, LENGTH, wire_dtype)
        ref = ring.ring_step(shards, local, hyper(step), wire_dtype=wire_dtype)
        sds = [{k: r[f"{k}{step}"] for k in ("params", "exp_avg", "exp_avg_sq")} for r in res]
        check_step([r[f"out{step}"] for r in res], sds, ref)
        shards = ref.shards


def test_a_killed_rank_makes_the_others_raise_within_the_timeout(tmp_path):
    world, timeout = 3, 2.0
    res = _spawn(world, tmp_path, steps=3, die_before=2, peer_timeout_s=timeout, deadline_s=60)
    assert res[world - 1]["info"].get("missing"), "the killed rank left no results"
    for r in res[: world - 1]:
        info = r["info"]
        assert "out1" in r and "out2" not in r, info
        assert info.get("error") == "PeerTimeout", info
        assert info["seconds"] < timeout + 3.0, info
        assert info["message"].startswith(f"rank {info['rank']}: ring peer rank "), info
        assert "\n" not in info["message"]
    # The killed rank's neighbours name it (its successor awaited its data, its predecessor its ACKs).
    assert res[0]["info"]["peer"] == world - 1 and res[world - 2]["info"]["peer"] == world - 1
