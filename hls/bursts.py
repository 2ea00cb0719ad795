"""Outstanding bursts per m_axi port, sized from memory latency x bandwidth: the one place that decides.

A port streams one 512-bit beat per kernel clock at most. To keep it streaming, the bursts in
flight must cover the memory's latency (Little's law: beats in flight = latency x rate), and one
more burst is being drained while the next are requested:

    outstanding = next power of two >= ceil(latency_clocks / burst_beats) + 1

The HLS kernel writes it into `num_read_outstanding` / `num_write_outstanding` (UG1399: the m_axi
adapter buffers `num_outstanding x max_burst_length x word_size`), the RTL read engine gets a FIFO
of `outstanding x burst_beats` beats (`onic_axi_rd` FIFO_LOG2: a burst is requested only when the
FIFO has room for it and for everything in flight, so the FIFO depth is the outstanding limit),
and the manifest records it (`sizing.bursts`). The power of two is the RTL FIFO's depth.

Latency: the loaded read latency of one burst, kernel port to HBM pseudo-channel and back,
taken as 100-250 ns. ASSUMED until measured on a card: it is the range the cocotb HBM model
(sim/tb/models/hbm_memory.py) draws from, and agrees with the sign-off estimate of 100-150
beats in flight at one beat per 3.3 ns; at the catalog's 300 MHz the upper end is 75 clocks, so
3 bursts of 64 beats cover it and 4 are outstanding (16 before: 8x what latency needs, and
16 x 64 x 512 bits = 14.5 BRAM36 per port).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Longest burst: 64 beats of 512 bits = one 4 KiB page (AXI4 bursts never cross one).
BURST_BEATS = 64
# Per-burst read latency range in ns (see the module docstring; the HBM model imports it).
HBM_LATENCY_NS = (100.0, 250.0)
LATENCY_SOURCE = ("assumed until measured on a card: 100-250 ns per burst, the cocotb HBM model's range "
                  "(sim/tb/models/hbm_memory.py); a sign-off estimate of 100-150 beats in flight at 3.3 ns/beat agrees")
MIN_OUTSTANDING = 2
MAX_OUTSTANDING = 16


@dataclass(frozen=True)
class BurstPlan:
    burst_beats: int  # max_read/write_burst_length; the RTL engines' MAX_BURST
    outstanding: int  # num_read/write_outstanding; RTL read FIFO = outstanding x burst_beats beats
    latency_ns: float  # the latency it covers
    latency_clocks: int
    fifo_beats: int  # outstanding x burst_beats: the adapter's (and the RTL read engine's) buffer
    fifo_log2: int  # the RTL read engine's FIFO_LOG2
    source: str


def outstanding_bursts(clock_mhz: float, latency_ns: float = HBM_LATENCY_NS[1],
                       burst_beats: int = BURST_BEATS) -> int:
    """Bursts one port keeps in flight to stream a beat per clock through `latency_ns` of memory latency."""
    if not (math.isfinite(clock_mhz) and clock_mhz > 0 and math.isfinite(latency_ns) and latency_ns >= 0
            and 1 <= burst_beats <= BURST_BEATS):
        raise ValueError(f"outstanding_bursts: clock {clock_mhz!r} MHz, latency {latency_ns!r} ns, "
                         f"burst {burst_beats!r} beats")
    clocks = math.ceil(latency_ns * clock_mhz / 1000.0 - 1e-9)
    need = math.ceil(clocks / burst_beats) + 1
    return min(MAX_OUTSTANDING, max(MIN_OUTSTANDING, 1 << (need - 1).bit_length()))


def burst_plan(clock_mhz: float) -> BurstPlan:
    """What every port of a kernel at `clock_mhz` uses: HLS pragmas, RTL read engines, manifest."""
    n = outstanding_bursts(clock_mhz)
    latency = HBM_LATENCY_NS[1]
    return BurstPlan(
        burst_beats=BURST_BEATS, outstanding=n, latency_ns=latency,
        latency_clocks=math.ceil(latency * clock_mhz / 1000.0 - 1e-9),
        fifo_beats=n * BURST_BEATS, fifo_log2=(n * BURST_BEATS).bit_length() - 1,
        source=f"latency x bandwidth: ceil(latency clocks / {BURST_BEATS}) + 1 bursts, to a power of two; "
               f"latency {LATENCY_SOURCE}",
    )
