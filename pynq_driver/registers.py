"""Programming the kernel through its registers: the one code path every backend shares.

Offsets come from the manifest's register map (design.md section 4), never from constants
here: pointer arguments take their low and high words, scalars their word, then ap_start; the
end is ap_done, then the sticky STATUS word after the arguments (errors of the run: read or
write response errors, stream framing, misaligned pointers; a manifest without it has no
STATUS) and, on a response error, the PORT_ERR words after it that say which m_axi port saw
it: any error raises KernelStatusError naming the cause and the port, and the shard marks
itself inconsistent. On
`alveo` these are PYNQ register writes, on `rtlsim` AXI4-Lite transactions into the RTL kernel,
on `csim`/`golden` writes into the software card's register file.
"""

from __future__ import annotations

from typing import Any

from hls.regmap import STATUS_CAUSES, port_errors
from pynq_driver.device import Buffer, Device
from pynq_driver.errors import DeviceError, KernelStatusError


class KernelRunner:
    def __init__(self, device: Device, cu: int = 0) -> None:
        self.device = device
        self.cu = cu
        args = device.manifest["register_map"]["args"]
        self.pointers = {a["name"]: int(a["offset"]) for a in args if a["kind"] == "pointer"}
        self.scalars = {a["name"]: int(a["offset"]) for a in args if a["kind"] == "scalar"}
        self._given_scalars = set(self.scalars) - {"n"}  # n comes from the launch itself
        if device.stripes.grad == 0:
            raise DeviceError(
                "this kernel takes gradients from its network stream (grad_source=stream); the host "
                "driver streams shards through kernels with grad_source=memory"
            )
        if any(a["kind"] == "stream" and a["direction"] == "out" for a in args):
            raise DeviceError(
                "this kernel sends its updated parameters on a network stream too (out_sink=memory+stream), "
                "which stalls it with nothing connected; the host driver needs out_sink=memory"
            )
        status = device.manifest["register_map"].get("status")
        self.status_offset = int(status["offset"]) if status else None
        self.status_bits = {str(k): int(b) for k, b in status["bits"].items()} if status else {}
        per_port = status.get("port_errors") if status else None
        self.port_error_offsets = [int(o) for o in per_port["offsets"]] if per_port else []
        self.port_error_ports = [str(p) for p in per_port["ports"]] if per_port else []
        self.write_ports = {a["name"] for a in args if a["kind"] == "pointer" and a["direction"] == "out"}
        self.busy = False

    def launch(self, pointers: dict[str, tuple[Buffer, int]], n: int, scalar_bits: dict[str, int]) -> None:
        """Program every argument and set ap_start. `pointers`: port -> (buffer, byte offset).

        A state stripe's read and write ports get the same buffer and offset: the kernel reads a
        beat through one and writes it back through the other (separate bundles keep both bursting).
        """
        if self.busy:
            raise DeviceError("launch while the previous run has not been waited for")
        dev = self.device
        if not (self.pointers.keys() <= pointers.keys() and self._given_scalars <= scalar_bits.keys()):
            missing = sorted(set(self.pointers) - set(pointers)) + sorted(self._given_scalars - set(scalar_bits))
            raise DeviceError(f"kernel arguments not given: {', '.join(missing)}")
        regs: dict[int, int] = {}
        for name, offset in self.pointers.items():
            buf, byte_offset = pointers[name]
            addr = buf.address + byte_offset
            regs[offset] = addr & 0xFFFFFFFF
            regs[offset + 4] = addr >> 32
        for name, offset in self.scalars.items():
            regs[offset] = n if name == "n" else scalar_bits[name]
        dev.write_regs(regs, self.cu)
        dev.start(self.cu)
        self.busy = True

    def wait(self, timeout_s: float | None = None) -> None:
        try:
            self.device.wait(timeout_s, self.cu)
        finally:
            # After a timeout the run is abandoned: the driver never launches over it (the shard
            # is marked inconsistent), but the runner must not block a reset of the state.
            self.busy = False
        self.check_status()

    def check_status(self) -> None:
        """Raise KernelStatusError naming every cause the STATUS register of the last run reports."""
        if self.status_offset is None:
            return
        value = self.device.read_reg(self.status_offset, self.cu)
        if value == 0:
            return
        causes = [name for name, bit in self.status_bits.items() if value >> bit & 1]
        known = sum(1 << bit for bit in self.status_bits.values())
        causes += [f"bit{k}" for k in range(32) if (value & ~known) >> k & 1]
        ports: list[tuple[str, str]] = []
        if {"read_response", "write_response"} & set(causes) and self.port_error_offsets:
            words = [self.device.read_reg(o, self.cu) for o in self.port_error_offsets]
            ports = [(p, "BRESP" if p in self.write_ports else "RRESP")
                     for p in port_errors(self.port_error_ports, words)]
        text = "; ".join(f"{c}: {STATUS_CAUSES.get(c, 'unknown status bit')}" for c in causes)
        text += "".join(f"; {resp} error on port {port}" for port, resp in ports)
        raise KernelStatusError(f"CU {self.cu} STATUS 0x{value:x} after the run: {text}", value, tuple(causes),
                                tuple(ports))

    def describe(self) -> dict[str, Any]:
        return {"pointers": self.pointers, "scalars": self.scalars}
