"""The `rtlsim` backend: the generated RTL kernel in a cocotb simulation, driven like a card.

How it runs (chosen so a simulator that dies or hangs can never hang the driver):
- The driver (this process) listens on a Unix socket and starts a child process
  (`python -m pynq_driver.backends.rtlsim CONFIG`) in its own session. The child builds the kernel
  with Verilator (or Icarus) through `hls.rtl.simulators.run_cocotb` and runs the single cocotb
  test `rtlsim_server.py` beside it, which wraps the kernel in the RTL team's `KernelTB`
  (AxiLiteMaster as the host; one cocotbext-axi RAM model per m_axi port, every stripe port on
  its memory-plan channel, all over one flat simulated memory) and connects back.
- Every device call is one request over the socket: register writes/reads become AXI4-Lite
  transactions, buffer copies become backdoor writes/reads of the flat memory (each buffer at
  the address the bank allocator gave it, so every port's pointer reaches its buffer), `wait`
  polls ap_done inside the simulation in slices of simulated time.
- Every receive has a timeout. A child that exits, or does not answer in time, becomes a
  DeviceError naming its log; close() (and the garbage collector) kill the child's process
  group, which this process created.
So the driver code above the device interface is exactly the code that drives a card.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from hls import rtl_sources
from hls.errors import ToolMissing, UserError
from hls.paths import BUILD_DIR, REPO_ROOT, TB_MODELS_DIR
from hls.spec import KernelSpec
from pynq_driver.backends.sim_link import SimLink
from pynq_driver.backends.soft import bank_layout
from pynq_driver.device import Buffer, BumpAllocator, Device
from pynq_driver.errors import DeviceError, KernelTimeout

SERVER_DIR = Path(__file__).resolve().parent
MEM_SIZE = 1 << 44  # cocotbext-axi SparseMemory: only touched pages cost memory (banks are 64 GiB apart)
START_TIMEOUT_S = 900.0  # building the kernel with Verilator takes minutes on 2 cores
WAIT_SLICE_S = 0.25  # wall time the simulator polls ap_done before answering "not yet"


def kernel_sources(project_dir: Path, spec: KernelSpec) -> list[Path]:
    """The shared RTL library, then the kernel's control block and top from the project."""
    name = spec.name
    rtl = Path(project_dir) / "rtl"
    top = sorted(rtl.glob("*.v"))
    if not (rtl / f"{name}.v").is_file():
        raise ToolMissing(f"{rtl / (name + '.v')}: no RTL kernel in the project; regenerate it (optimusnic generate)")
    try:
        libs = rtl_sources.static_sources()
    except UserError as exc:  # a checkout without the RTL library: the simulator cannot be had here
        raise ToolMissing(str(exc)) from None
    return [*libs, *top]


class RtlSimDevice(SimLink, Device):
    backend = "rtlsim"
    _link_error = DeviceError
    _link_label = "rtlsim"

    def __init__(self, manifest: dict[str, Any], project_dir: Path, *, timeout_s: float = 10.0,
                 simulator: str = "verilator", start_timeout_s: float = START_TIMEOUT_S,
                 read_latency: int = 16, stall_probability: float = 0.0, memory: str = "ideal") -> None:
        super().__init__(manifest, timeout_s=timeout_s)
        if self.cus != 1:
            raise UserError(f"rtlsim simulates one compute unit; this spec has {self.cus}. CUs are identical "
                            "instances on channels of their own: simulate compute_units=1, or use csim/golden")
        from hls.rtl import simulators

        if not simulators.available(simulator):
            simulators.simulator_env(simulator)  # raises SimulatorMissing with the fix
        if self.cus != 1:
            raise DeviceError(f"rtlsim simulates one compute unit; this kernel has {self.cus} "
                              "(generate it with compute_units=1: every CU is the same kernel on its own banks)")
        if memory not in ("ideal", "hbm"):
            raise ValueError(f"rtlsim memory {memory!r}: choose ideal or hbm")
        if not (TB_MODELS_DIR / "kernel_tb.py").is_file():
            raise ToolMissing(f"{TB_MODELS_DIR / 'kernel_tb.py'}: the RTL kernel testbench is not in this checkout")
        self.project_dir = Path(project_dir)
        kernel_sources(self.project_dir, self.spec)  # fails early, and clearly, without the RTL
        bases, caps = bank_layout(self)
        self._alloc = BumpAllocator(bases, caps)
        key = hashlib.sha256(json.dumps([manifest["files"], simulator], sort_keys=True).encode()).hexdigest()[:12]
        self.build_dir = BUILD_DIR / "rtlsim_driver" / f"{self.spec.name}-{simulator}-{key}"
        self.build_dir.mkdir(parents=True, exist_ok=True)
        # one log per driver: several processes (pytest-xdist workers) may drive one build at once
        self.log_path = self.build_dir / f"driver_sim-{os.getpid()}-{id(self):x}.log"
        self._tmp = Path(tempfile.mkdtemp(prefix="onic-rtlsim-"))
        sock_path = self._tmp / "sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(sock_path))
        listener.listen(1)
        config = {
            "spec": self.spec.to_dict(), "simulator": simulator, "log_dir": str(self.build_dir),
            "env": {"ONIC_MANIFEST": str(self.project_dir / "manifest.json"), "ONIC_DRIVER_SOCKET": str(sock_path),
                    "ONIC_MEM_SIZE": str(MEM_SIZE), "ONIC_LATENCY": str(read_latency), "ONIC_MEMORY": memory,
                    "ONIC_STALLS": str(stall_probability)},
        }
        (self._tmp / "config.json").write_text(json.dumps(config))
        self.log_path.unlink(missing_ok=True)  # a new file: never written through a link left there
        self._log = open(self.log_path, "xb")  # noqa: SIM115 - lives as long as the child
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-m", "pynq_driver.backends.rtlsim", str(self._tmp / "config.json")],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self._sock: socket.socket | None = None
        try:
            self._sock = self._accept(listener, start_timeout_s)
            self._recv(start_timeout_s)  # hello, after reset
        except BaseException:
            self._kill()
            raise
        finally:
            listener.close()

    def _call(self, req: dict[str, Any], payload: bytes = b"", timeout_s: float | None = None) -> tuple[dict, bytes]:
        with self._lock:
            return self._exchange(req, payload, self.timeout_s, self.timeout_s if timeout_s is None else timeout_s)

    # ---- the device interface ------------------------------------------------------------------
    def _allocate(self, nbytes: int, bank: str) -> Buffer:
        return Buffer(self._alloc.take(nbytes, bank), nbytes, bank)

    def _free(self, buf: Buffer) -> None:
        self._alloc.release(buf.bank)

    def _write(self, buf: Buffer, data: np.ndarray, offset: int) -> None:
        self._call({"op": "mem_write", "address": buf.address + offset}, data.tobytes())

    def _read(self, buf: Buffer, out: np.ndarray, offset: int) -> None:
        _, payload = self._call({"op": "mem_read", "address": buf.address + offset, "nbytes": out.nbytes})
        out[...] = np.frombuffer(payload, np.uint8)

    def _write_reg(self, offset: int, value: int, cu: int = 0) -> None:
        self._call({"op": "write_reg", "offset": offset, "value": value})

    def _read_reg(self, offset: int, cu: int = 0) -> int:
        return int(self._call({"op": "read_reg", "offset": offset})[0]["value"])

    def _wait_done(self, timeout_s: float, cu: int = 0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            reply, _ = self._call({"op": "wait_done", "wall_s": WAIT_SLICE_S},
                                  timeout_s=max(self.timeout_s, timeout_s, 10 * WAIT_SLICE_S))
            if reply["done"]:
                return
            if time.monotonic() >= deadline:
                raise KernelTimeout(f"rtlsim: kernel did not finish within {timeout_s:g} s (ap_done never set); "
                                    "card memory is still readable")

    def inject_fault(self, kind: str = "hang") -> None:
        """Test hook: stop every memory channel of the simulated card, so the kernel never finishes."""
        if kind != "hang":
            raise ValueError(f"unknown fault {kind!r}")
        self._call({"op": "fault", "kind": kind})

    # ---- shutting down ---------------------------------------------------------------------
    def _close(self) -> None:
        if self._sock is not None and self._proc is not None and self._proc.poll() is None:
            try:
                self._call({"op": "close"}, timeout_s=5.0)
                self._proc.wait(timeout=10)
            except (DeviceError, subprocess.TimeoutExpired):
                pass
        self._kill()

    @property
    def child_pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid


def _child_main(config_path: str) -> int:
    """Child process: build (or reuse) the kernel's simulation and run the serving cocotb test."""
    from hls.rtl import bench_runner as rtlsim
    from hls.rtl import simulators

    cfg = json.loads(Path(config_path).read_text())
    spec = KernelSpec.from_dict(cfg["spec"])
    runner, bdir, _ = rtlsim.build(spec, cfg["simulator"])  # shared with the RTL bench: one build per spec
    # The cocotb test imports the RTL team's kernel_tb and our hls package.
    # (cocotb's runner gives the simulator this process's sys.path as PYTHONPATH).
    sys.path[:0] = [str(SERVER_DIR), str(TB_MODELS_DIR), str(REPO_ROOT)]
    xml = runner.test(
        test_module="rtlsim_server",
        hdl_toplevel=spec.name,
        test_dir=SERVER_DIR,
        build_dir=bdir,
        extra_env=cfg["env"],
        results_xml=str(Path(cfg["log_dir"]) / f"driver-results-{os.getpid()}.xml"),
        timescale=("1ns", "1ps") if cfg["simulator"] != "verilator" else None,
    )
    ran, failed = simulators.check_results(xml)
    return 0 if ran and not failed else 1


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))
