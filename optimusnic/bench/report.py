"""`optimusnic bench all` / `make bench`: every benchmark in one run, written to bench/results.md.

Each benchmark measures its ratio inside one run (the machine is shared and noisy, so only
figures measured side by side are compared) and reports medians. The report records the
machine, the date, the exact commands and every figure, plus a bar chart; the RTL efficiency
also goes to build/bench/rtl.json, where `optimusnic plan` reads it, and the ring's protocol
efficiency on software cards (goodput fraction, retransmission overhead) to build/bench/net.json
(beside results.json's `net.protocol_efficiency`). The last step is the yosys
timing evidence (`hls.rtl.timing_report.report`: LUT levels, carry, DSP depth and fan-out per RTL module, and
of the 16-lane kernel per default target and dtype, synthesized with stubbed lanes and composed with the
lane alone), reused from build/synth/ when the RTL has not changed.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hls import safe_io
from hls.paths import BUILD_DIR, REPO_ROOT

RESULTS_DIR = REPO_ROOT / "bench"
RTL_JSON = BUILD_DIR / "bench" / "rtl.json"
NET_JSON = BUILD_DIR / "bench" / "net.json"  # the ring's protocol efficiency on software cards, for the planner


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    import numpy
    import torch

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
        "load_average_at_start": os.getloadavg(),
        "commit": _git("rev-parse", "--short", "HEAD"),
    }


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def collect(params: int, repeats: int, threads: int | None, log=print,  # noqa: ANN001
            sizes: tuple[int, ...] | None = None) -> dict[str, Any]:
    from optimusnic.bench import csim as bench_csim
    from optimusnic.bench import driver as bench_driver
    from optimusnic.bench import net as bench_net
    from optimusnic.bench import rtl as bench_rtl
    from optimusnic.bench import rtlnet as bench_rtlnet

    results: dict[str, Any] = {"date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                               "machine": machine()}
    sizes = tuple(sizes or bench_csim.SIZES)
    steps = (
        ("csim", f"optimusnic bench csim --sizes {','.join(map(str, sizes))} --repeats {repeats}"
         + (f" --threads {threads}" if threads else ""),
         lambda: bench_csim.measure_sizes(sizes, repeats, threads, log=log)),
        ("driver", f"optimusnic bench driver --params {params} --repeats {repeats}",
         lambda: bench_driver.measure(params, repeats, None, threads)),
        ("rtl", "optimusnic bench rtl", lambda: bench_rtl.collect(log=log)),
        ("net", f"optimusnic bench net --repeats {repeats}", lambda: bench_net.measure(repeats=repeats, log=log)),
    )
    steps += (("rtlnet", "optimusnic bench rtlnet", lambda: bench_rtlnet.collect(log=log)),)
    steps += (("synth", "optimusnic synth --target u55c --timing --matrix", lambda: synth_timing(log=log)),)
    for key, command, fn in steps:
        log(f"[bench] {key}: {command} ...")
        t = time.perf_counter()
        results[key] = fn()
        results[key]["command"] = command
        results[key]["wall_s"] = time.perf_counter() - t
        log(f"[bench] {key}: done in {results[key]['wall_s']:.0f} s")
    RTL_JSON.parent.mkdir(parents=True, exist_ok=True)
    safe_io.atomic_write(RTL_JSON, json.dumps({"efficiency": results["rtl"]["efficiency"],
                                    "source": "optimusnic bench all (RTL kernel, ideal memory, elements/clock / lanes)",
                                    "date": results["date"]}, indent=2) + "\n")
    if results["net"].get("protocol_efficiency"):
        NET_JSON.write_text(json.dumps({**results["net"]["protocol_efficiency"], "status": "measured on software "
                                        "cards (localhost UDP): a protocol-efficiency figure, not a line rate",
                                        "date": results["date"]}, indent=2) + "\n")
    return results


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    _plot_csim(a, results["csim"])
    rows = results["rtl"]["rows"]
    x = range(len(rows))
    width = 0.27
    b.bar([i - width for i in x], [r["predicted"] for r in rows], width, label="predicted (sizing)", color="tab:gray")
    b.bar(list(x), [r["hbm"] for r in rows], width, label="RTL, HBM model", color="tab:green")
    b.bar([i + width for i in x], [r["ideal"] for r in rows], width, label="RTL, ideal memory", color="tab:olive")
    b.set_xticks(list(x), [f"{r['target']}\n{r['grad_dtype']}" for r in rows])
    b.set_ylabel("elements per clock (1 CU)")
    b.set_title("RTL kernel, 16 lanes, per compute unit")
    b.set_ylim(0, 1.25 * max(max(r["predicted"], r["ideal"]) for r in rows))
    b.legend(fontsize=7, loc="upper center", ncol=3)
    fig.tight_layout()
    with safe_io.atomic_open(path) as f:
        fig.savefig(f, format=Path(path).suffix[1:] or "png", dpi=100)
    plt.close(fig)


def _plot_csim(ax: Any, c: dict[str, Any]) -> None:
    """Left panel: every csim-bench implementation at every size, and the csim bytes floor."""
    from optimusnic.bench.csim import LABELS

    shown = ("csim", "csim_own_headers", "nic_adamw_csim", "torch_fused", "torch_foreach")
    colors = ("tab:orange", "navajowhite", "tab:red", "tab:blue", "lightsteelblue")
    rows = c["rows"]
    width = 0.8 / len(shown)
    for j, (k, color) in enumerate(zip(shown, colors, strict=True)):
        ax.bar([i + (j - 2) * width for i in range(len(rows))], [r["params_per_s"][k] / 1e9 for r in rows], width,
               label=LABELS[k], color=color)
    for i, r in enumerate(rows):
        ax.hlines(r["floor_params_per_s"]["csim"] / 1e9, i - 0.45, i + 0.45, colors="black", linestyles="dashed",
                  label="csim bytes floor (memory bandwidth / 36 B)" if i == 0 else None)
    ax.set_xticks(range(len(rows)), [f"{r['params'] / 1e6:.3g}M" for r in rows])
    ax.set_ylabel("G parameters / s")
    ax.set_title(f"Adam step on this CPU, {c['threads']} threads")
    ax.legend(fontsize=6, loc="upper left")


def markdown(r: dict[str, Any]) -> str:
    m, c, d, rt = r["machine"], r["csim"], r["driver"], r["rtl"]
    from optimusnic.bench import csim as bench_csim

    lines = [
        "# OptimusNIC benchmark results",
        "",
        f"Written by `make bench` (`optimusnic bench all`) on {r['date']}, commit {m['commit']}.",
        "Every ratio below was measured inside one run, side by side; times are medians.",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB",
        f"- {m['os']}; Python {m['python']}, numpy {m['numpy']}, torch {m['torch']}",
        f"- load average at start: {', '.join(f'{x:.1f}' for x in m['load_average_at_start'])} "
        "(a shared machine: absolute figures move with load, ratios much less)",
        "",
        "## C simulation of the HLS kernel against torch's CPU AdamW",
        "",
        f"`{c['command']}`: {c['threads']} threads for every implementation, median of {c['repeats']} "
        "interleaved repeats, each timed call right after an untimed one of the same implementation. "
        "csim kernel: the generated HLS kernel (U55C AdamW, 16 lanes, fp32) on 64-byte aligned stripe buffers "
        "(`CsimKernel.run_ports`, what the driver's csim device calls); NicAdamW(csim): the whole optimizer "
        "step on one fp32 parameter; copy: one `Tensor.copy_` of the csim kernel's 32 bytes per parameter on the "
        "same threads, whose fastest repeat gives the memory bandwidth (48 B/param of DRAM traffic with the "
        "write-allocate reads) and so each implementation's bytes floor (csim 36 B/param of traffic, torch 28).",
        "",
        *bench_csim.table(c),
        "",
        *bench_csim.floors(c),
        "",
        "CPU time one step costs per 16 parameters (one 512-bit beat) on one thread: the thread's own CPU "
        "time, least of the repeats. On a loaded machine the timed ratios above tend to these ratios; C "
        "simulation runs the kernel's DATAFLOW processes one after another, every beat through one FIFO "
        "per m_axi port (hls/csim/kernel.py says where the time goes).",
        "",
        *bench_csim.cpu_costs(c),
        "",
        f"Goal ({c['goal']}): {'met' if c['meets_goal'] else 'NOT met'}.",
        "",
        "## Driver overhead (csim backend)",
        "",
        f"`{d['command']}`: `ShardState.step()` against the bare kernel call on the same data, "
        f"chunk {d['chunk_elems']:,} elements.",
        "",
        "| figure | value | goal |",
        "|---|---|---|",
        f"| bare kernel call | {d['bare_kernel_s'] * 1e3:.1f} ms | |",
        f"| `ShardState.step()` | {d['driver_step_s'] * 1e3:.1f} ms | |",
        f"| overhead | {d['overhead_ratio']:.2f}x | <= {d['overhead_goal']}x |",
        f"| step without the inf/NaN scan | {d['step_without_finite_check_s'] * 1e3:.1f} ms | |",
        f"| host-card copies alone | {d['copies_alone_s'] * 1e3:.1f} ms | |",
        f"| peak extra host memory | {d['peak_extra_host_bytes'] / 2**20:.2f} MiB = "
        f"{d['peak_extra_chunks']:.3f} chunks | <= {d['peak_goal_chunks']:.0f} chunks |",
        "",
        *_optimizer_rows(d.get("optimizer") or []),
        *rtl_section(rt),
        *_net_section(r.get("net")),
        *_rtlnet_section(r.get("rtlnet")),
        *synth_section(r.get("synth")),
        "![benchmark chart](results.png)",
        "",
        "The RTL kernel's ideal-memory efficiency (elements per clock / lanes) is also written to "
        "`build/bench/rtl.json`, which `optimusnic plan` reads.",
        "",
    ]
    return "\n".join(lines)


RTL_HEADING = "## RTL kernel in simulation"


def rtl_section(rt: dict[str, Any]) -> list[str]:
    """The RTL kernel's section of results.md (`optimusnic bench rtl`)."""
    from optimusnic.bench.rtl import table

    ic = rt.get("icarus")
    icarus = (f"{ic['sim_clocks_per_s']:,.0f} simulated clocks/s ({ic['elements']:,} elements, ideal memory)" if ic
              else "not installed (make deps-icarus)" if not rt.get("icarus_skipped") else "not measured in this run")
    speeds = [row["sim_clocks_per_s"] for row in rt["rows"]]
    default = rt.get("default")
    return [
        RTL_HEADING,
        "",
        f"`{rt['command']}`: one compute unit, 16 lanes, AdamW, gradients from memory, fp32 out, "
        f"{rt['elements']:,} elements per run, no stalls, Verilator; clocks from the ap_start write to ap_done. "
        "CUs are independent instances on their own memory channels, so a card with more CUs moves CUs x this.",
        "",
        "- predicted: sizing's `elements_per_clock_predicted` for the memory plan it chose (stripes grad/state/out);",
        "- HBM model: every m_axi port on the channel of the manifest's memory plan, each channel limited to "
        "its usable bandwidth in sizing (reads and writes together; a channel both read and written at the mixed "
        "figure), 100-250 ns per burst; every read engine keeps the outstanding bursts `hls.bursts` sizes "
        "(4 x 64 beats at 300 MHz) in flight;",
        "- ideal memory: no bandwidth limit, 64-clock read latency (the kernel's own efficiency).",
        "",
        *([rt["measured_note"], ""] if rt.get("measured_note") else []),
        *table(rt),
        "",
        f"Goal: HBM model within {1 - rt['goal_ratio']:.0%} of predicted, and the default U55C fp32 kernel at "
        f"{rt['goal_default_elements_per_clock']} elements/clock or more"
        + (f" (measured {default['hbm']:.2f})" if default else "")
        + f": {'met' if rt['meets_goal'] else 'NOT met'}.",
        "",
        "Start, fill and drain of one run (ideal memory: clocks beyond one beat per 16 / lanes clocks), and their "
        f"share of a run of the driver's default chunk ({rt['rows'][0]['chunk_elements']:,} elements): the most "
        "ap_ctrl_chain could overlap between back-to-back runs (design.md section 4): "
        + "; ".join(f"{r['target']} {r['grad_dtype']} {r['fill_drain_cycles']:,} clocks = "
                    f"{r['fill_drain_share_of_chunk']:.2%}" for r in rt["rows"]) + ".",
        "",
        "| simulator speed | value |",
        "|---|---|",
        f"| Verilator (HBM model) | {min(speeds):,.0f} to {max(speeds):,.0f} simulated clocks/s |",
        f"| Icarus | {icarus} |",
        "",
    ]


def write_rtl_section(rt: dict[str, Any], out_dir: Path = RESULTS_DIR) -> Path:
    """Replace the RTL section of an existing bench/results.md (and results.json's `rtl`) only."""
    path = out_dir / "results.md"
    lines = path.read_text().splitlines() if path.is_file() else ["# OptimusNIC benchmark results", ""]
    return _put_section(out_dir, lines, RTL_HEADING, rtl_section(rt), "rtl", rt)


def _put_section(out_dir: Path, lines: list[str], heading: str, section: list[str], key: str,
                 figures: dict[str, Any]) -> Path:
    """Put `section` in place of the one under `heading` in results.md (before the chart when it is
    new) and `figures` under `key` in results.json: one section rewritten, the others kept."""
    path = out_dir / "results.md"
    if heading in lines:
        start = lines.index(heading)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("## ", "![benchmark"))),
                   len(lines))
        lines[start:end] = section
    else:
        at = next((i for i, ln in enumerate(lines) if ln.startswith("![benchmark")), len(lines))
        lines[at:at] = section
    safe_io.atomic_write(path, "\n".join(lines) + "\n")
    js = out_dir / "results.json"
    if js.is_file():
        data = json.loads(js.read_text())
        data[key] = figures
        safe_io.atomic_write(js, json.dumps(data, indent=2, default=str) + "\n")
    return path


def _net_section(rep: dict[str, Any] | None) -> list[str]:
    """The ring on software cards against DDP (nothing when the bench ran without it)."""
    if not rep:
        return []
    from optimusnic.bench import net as bench_net

    return bench_net.markdown(rep)


def _rtlnet_section(rep: dict[str, Any] | None) -> list[str]:
    """The card's network RTL at line rate (nothing when the bench ran without it)."""
    if not rep:
        return []
    from optimusnic.bench import rtlnet as bench_rtlnet

    return bench_rtlnet.markdown(rep)


def write_rtlnet_section(rep: dict[str, Any], out_dir: Path = RESULTS_DIR) -> Path:
    """Replace (or add) the network RTL section of bench/results.md and results.json's `rtlnet` only."""
    from optimusnic.bench import rtlnet as bench_rtlnet

    path = out_dir / "results.md"
    lines = path.read_text().splitlines() if path.is_file() else ["# OptimusNIC benchmark results", ""]
    return _put_section(out_dir, lines, bench_rtlnet.HEADING, bench_rtlnet.markdown(rep), "rtlnet", rep)


def rtlnet_run(args: Any) -> int:
    """`optimusnic bench rtlnet`: the network RTL's figures printed, and its section of bench/results.md
    (and results.json's `rtlnet`) replaced; exit 1 when a step was not bit-exact."""
    from optimusnic.bench import rtlnet as bench_rtlnet

    js = RESULTS_DIR / "results.json"
    previous = json.loads(js.read_text()).get("rtlnet") if js.is_file() else None
    rep = bench_rtlnet.run(args, previous)
    print(f"written: {write_rtlnet_section(rep)}", file=sys.stderr)
    return 0 if rep["exact"] else 1


SYNTH_HEADING = "## Timing evidence from yosys (LUT levels, carry, DSP, fan-out)"
# Headings earlier versions wrote: replaced, never kept beside the new section.
_OLD_SYNTH_HEADINGS = ("## Timing evidence from yosys (LUT levels, fan-out)",)


def synth_timing(log=print) -> dict[str, Any]:  # noqa: ANN001
    """`optimusnic synth --timing --matrix`: every module alone, then the 16-lane AdamW kernel on every default
    target and dtype, synthesized for real (lanes stubbed, the lane alone; cached yosys runs are reused), and
    the network kernel top whole."""
    from hls.errors import ToolMissing
    from hls.rtl import synth
    from hls.rtl import timing_report as timing
    from hls.spec import KernelSpec
    from hls.targets import get_target

    try:
        synth.yosys_bin()
    except ToolMissing as exc:
        return {"skipped": str(exc)}
    spec = KernelSpec(target="u55c")
    return timing.report(spec, get_target("u55c"), matrix=True, targets=get_target, log=log, net=True)


def synth_section(rep: dict[str, Any] | None) -> list[str]:
    """The timing tables of bench/results.md (nothing when the bench ran without them)."""
    from hls.rtl import timing_report as timing

    if not rep:
        return []
    if "skipped" in rep:
        return [SYNTH_HEADING, "", f"Not measured: {rep['skipped']}.", ""]
    s = rep["spec"]
    wall = f", {rep['wall_s']:.0f} s with the yosys cache as it was" if "wall_s" in rep else ""
    load = f" Load average: {rep['load_average']}." if rep.get("load_average") else ""
    notes = [f"- {r['unit']}, nets above {timing.GOAL_MAX_FANOUT:,} loads: "
             + ", ".join(f"`{n}` {k:,}" for n, k in r["nets_over_goal"].items())
             for r in rep["kernel"] if r.get("nets_over_goal")]
    verdict = {True: "met", False: "NOT met", None: "not run"}
    return [
        SYNTH_HEADING,
        "",
        f"`{rep.get('command', 'optimusnic synth --timing --json')}`{wall}: {rep['yosys']}, "
        f"`synth_xilinx -family xcup -flatten -noiopad`, then `hls.rtl.netlist` over the netlist JSON.{load} "
        f"Every RTL module synthesized alone (default parameters; the lane as {s['optimizer']} "
        f"{s['grad_dtype']}->{s['out_dtype']}, the core at 1 lane). Then the {s['optimizer']} kernel at "
        f"{rep.get('lanes', s['lanes'])} lanes per target and dtype, synthesized for real, nothing scaled: the "
        "generated top with every lane replaced by a stub (one register per input bit, `sim/rtl/synth`), and the "
        "lane alone at full detail, composed (docs/design.md, timing evidence): levels across a lane's ports add "
        "the kernel's side and the lane's side, and a net at a lane port carries the real lane's loads on that "
        "port once per lane. LUT levels: LUTs on the longest path between two sequential cells (FD*, SRL/LUT-RAM "
        "read, BRAM, registered DSP). Carry bits: the longest carry chain on any such path (CARRY4 = 4 bits, "
        "CARRY8 = 8). DSP cascade: the longest chain of DSP48E2 joined by cascade ports, and in brackets the most "
        "DSP48E2 crossed combinationally on one path (yosys 0.23 leaves the multipliers' pipeline registers in "
        "fabric). I/O levels (in->reg / reg->out / in->out) are paths through a module's ports, not judged. "
        "Loads: pins on the highest fan-out net other than the clock. Yosys seconds per row: the two runs, "
        "`(cached)` when reused.",
        "",
        *timing.markdown(rep),
        "",
        *notes,
        *([f"- Not synthesized yet (no row): {', '.join(rep['not_run'])}."] if rep.get("not_run") else []),
        f"- Goal ({rep['goal']}): every row {verdict[rep['met']]}; kernel rows {verdict[rep['kernel_met']]}"
        + (f" (of the rows above; {len(rep['not_run'])} not synthesized, no verdict)." if rep.get("not_run") else "."),
        f"- {rep['caveat']}.",
        "",
    ]


def write_synth_section(rep: dict[str, Any], out_dir: Path = RESULTS_DIR) -> Path:
    """Replace (or append) the timing section of an existing bench/results.md and results.json only."""
    path = out_dir / "results.md"
    text = path.read_text() if path.is_file() else "# OptimusNIC benchmark results\n\n"
    lines = text.splitlines()
    section = synth_section(rep)
    for heading in _OLD_SYNTH_HEADINGS:
        if heading in lines:
            start = lines.index(heading)
            end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("## ", "![benchmark"))),
                       len(lines))
            del lines[start:end]
    return _put_section(out_dir, lines, SYNTH_HEADING, section, "synth", rep)


def write(results: dict[str, Any], out_dir: Path = RESULTS_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    plot(results, out_dir / "results.png")
    safe_io.atomic_write(out_dir / "results.json", json.dumps(results, indent=2, default=str) + "\n")
    path = out_dir / "results.md"
    safe_io.atomic_write(path, markdown(results))
    return path


def run_all(params: int, repeats: int, threads: int | None, out_dir: Path = RESULTS_DIR,
            sizes: tuple[int, ...] | None = None) -> Path:
    results = collect(params, repeats, threads, log=lambda s: print(s, file=sys.stderr, flush=True), sizes=sizes)
    return write(results, out_dir)


def _optimizer_rows(rows: list[dict[str, Any]]) -> list[str]:
    """NicAdamW and ShardedNicOptimizer end to end (issue 15): host memory beyond the model and its
    gradients (and the sharded optimizer's one bucket), and the step over the bare card step on
    the same backend and shard, wall clock and process CPU time."""
    if not rows:
        return []
    mib = 1 << 20
    out = [
        "### NicAdamW end to end",
        "",
        f"NicAdamW and ShardedNicOptimizer (a gloo world of one) on the {rows[0]['backend']} backend (Linear "
        "layers, random gradients) against torch AdamW fused=True: host memory held beyond the model and its "
        "gradients (and the sharded optimizer's gradient shards) between steps plus the step's own peak, and the "
        "optimizer step (default options: exact change detection on, no inf/NaN scan) over the bare card step "
        "on the same shard: the kernel back to back on every chunk, reading a full-size gradient and writing a "
        "full-size output of its own (lent to the software card as the step lends the model's tensors), no "
        "host work. Wall clock, and process CPU time (every thread), which other processes on a shared machine "
        "stretch less; each timed call right after an untimed one of the same. Every configuration is timed "
        "once per round, in turn, and each ratio is the median over the rounds of that round's ratio (a "
        "shared machine drifts less within a round than across the run). Also: the step without change "
        "detection, with the inf/NaN scan (`skip_nonfinite=True`), and over the bare step on one reused "
        "staging chunk (its gradient and output stay in cache: a bound no real step reaches).",
        "",
        "| optimizer | params | extra host memory | torch fused extra | step | bare card step | step / bare "
        "| CPU step / bare | without change detection | with inf/NaN scan | over the staging-chunk bare | goals |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rounds = {r.get("timing_rounds") for r in rows} - {None}
    if rounds:
        out.insert(-3, f"Rounds per ratio: {', '.join(map(str, sorted(rounds)))}.")
        out.insert(-4, "")
    for r in rows:
        nodet = r.get("no_detection_over_bare", r["nic_step_no_detection_s"] / r["bare_card_step_s"])
        cpu = f"{r['step_over_bare_cpu']:.2f}x" if "step_over_bare_cpu" in r else "-"
        scan = f"{r['skip_nonfinite_over_bare']:.2f}x" if "skip_nonfinite_over_bare" in r else "-"
        staging = (f"{r['step_over_bare_staging']:.2f}x ({r['bare_staging_step_s'] * 1e3:.1f} ms)"
                   if "step_over_bare_staging" in r else "-")
        out.append(
            f"| {r.get('optimizer', 'NicAdamW')} | {r['params']:,} | {r['nic_extra_bytes'] / mib:.2f} MiB "
            f"({r['nic_extra_per_param']:.2f} B/param, {r['nic_extra_chunks']:.2f} chunks) "
            f"| {r['torch_fused_extra_bytes'] / mib:.1f} MiB ({r['torch_fused_extra_per_param']:.2f} B/param) "
            f"| {r['nic_step_s'] * 1e3:.1f} ms | {r['bare_card_step_s'] * 1e3:.1f} ms | {r['step_over_bare']:.2f}x "
            f"| {cpu} | {nodet:.2f}x | {scan} | {staging} "
            f"| <= {r['goal_extra_chunks']:.0f} chunks"
            + (f", <= {r['goal_step_over_bare']}x" if r.get("goal_step_over_bare") else "") + " |")
    return [*out, ""]


def rtl_main(argv: list[str] | None = None) -> int:
    """`python -m optimusnic.bench.report rtl [bench rtl options]`: run the RTL benchmark and replace only
    its section of bench/results.md (the other sections stay as the full run wrote them)."""
    import argparse

    from optimusnic.bench import rtl as bench_rtl

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m optimusnic.bench.report rtl", description=rtl_main.__doc__)
    parser.add_argument("which", choices=["rtl"])
    parser.add_argument("--elements", type=int, default=bench_rtl.BENCH_ELEMENTS)
    parser.add_argument("--targets", nargs="+", choices=bench_rtl.TARGETS, default=list(bench_rtl.TARGETS))
    parser.add_argument("--grad-dtypes", nargs="+", choices=bench_rtl.GRAD_DTYPES, default=list(bench_rtl.GRAD_DTYPES))
    parser.add_argument("--no-icarus", action="store_true")
    args = parser.parse_args(argv)
    report = bench_rtl.collect(elements=args.elements, targets=tuple(args.targets), grad_dtypes=tuple(args.grad_dtypes),
                               with_icarus=not args.no_icarus, log=lambda s: print(s, file=sys.stderr, flush=True))
    report["command"] = "python -m optimusnic.bench.report " + " ".join(argv)
    report["icarus_skipped"] = args.no_icarus
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    report["measured_note"] = (f"This section alone was measured again ({', '.join(args.targets)}; load average "
                               f"{load} at the end on 2 shared cores: clock counts do not depend on load, "
                               "simulator speeds do); the other sections are from the run named at the top.")
    print(write_rtl_section(report))
    print(bench_rtl.format_report(report))
    return 0 if report["meets_goal"] else 1


if __name__ == "__main__":
    sys.exit(rtl_main())
