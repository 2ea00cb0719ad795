"""hls.layout.run_stripes (the arithmetic of sim/rtl/net/onic_net_stripe_run.v, which the network kernel's
grad reader and gather writer use for every run) against the layout rule itself (layout.split): for every
power-of-two stripe count and run shape, stripe k's part of a run is its beats at consecutive indices from
the first one given, and the run's beats taken round robin from stripe first_beat mod K are the run."""

from __future__ import annotations

import numpy as np
import pytest

from hls import layout
from hls.spec import BEAT_BYTES


@pytest.mark.parametrize("stripes", [1, 2, 4, 8])
def test_run_stripes_match_the_layout(stripes: int) -> None:
    total = 61  # beats of a whole buffer (N chunks): odd, not a multiple of any K
    beats_ids = np.arange(total, dtype=np.uint32)
    data = np.repeat(beats_ids, BEAT_BYTES // 4)  # beat b holds the number b in every word
    parts = [p.view(np.uint32)[:: BEAT_BYTES // 4] for p in layout.split(data, stripes)]
    for first in range(total):
        for length in range(1, total - first + 1):
            runs = layout.run_stripes(first, length, stripes)
            want = list(range(first, first + length))
            for k, (index, count) in enumerate(runs):
                assert list(parts[k][index:index + count]) == [b for b in want if b % stripes == k]
            # round robin from stripe first mod K, one beat of each stripe in turn
            got, taken = [], [0] * stripes
            turn = first % stripes
            for _ in range(length):
                index, count = runs[turn]
                assert taken[turn] < count
                got.append(int(parts[turn][index + taken[turn]]))
                taken[turn] += 1
                turn = (turn + 1) % stripes
            assert got == want and taken == [c for _, c in runs]
            assert (first + length - 1) % stripes == want[-1] % stripes


def test_ring_stripes_are_powers_of_two() -> None:
    assert [k for k in range(0, 17) if layout.ring_stripes_ok(k)] == [1, 2, 4, 8]
    with pytest.raises(ValueError, match="power of two"):
        layout.run_stripes(0, 4, 3)


def test_sizing_rounds_ring_stripes_up() -> None:
    from hls.ring_plan import ring_stream_stripes
    from hls.targets import get_target

    u55c = get_target("u55c")
    # fp32 demands from 0.1 to 20 G elements/s: 1 to 8 channels' worth and beyond (clamped to 8)
    got = [ring_stream_stripes(u55c, 4, d) for d in np.linspace(1e8, 2e10, 200)]
    assert set(got) == {1, 2, 4, 8} and got == sorted(got)
