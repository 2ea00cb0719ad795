"""Programming the kernel through its registers: the one code path every backend shares.

Offsets come from the manifest's register map (design.md section 4), never from constants
here: pointer arguments take their low and high words, scalars their word, then ap_start; the
end is ap_done. On `alveo` these are PYNQ register writes, on `rtlsim` AXI4-Lite transactions
into the RTL kernel, on `csim`/`golden` writes into the software card's register file.
"""

from __future__ import annotations

from typing import Any

from pynq_driver.device import Buffer, Device
from pynq_driver.errors import DeviceError


class KernelRunner:
    def __init__(self, device: Device, cu: int = 0) -> None:
        self.device = device
        self.cu = cu
        args = device.manifest["register_map"]["args"]
        self.pointers = {a["name"]: int(a["offset"]) for a in args if a["kind"] == "pointer"}
        self.scalars = {a["name"]: int(a["offset"]) for a in args if a["kind"] == "scalar"}
        if device.stripes.grad == 0:
            raise DeviceError(
                "this kernel takes gradients from its network stream (grad_source=stream); the host "
                "driver streams shards through kernels with grad_source=memory"
            )
        self.busy = False

    def launch(self, pointers: dict[str, tuple[Buffer, int]], n: int, scalar_bits: dict[str, int]) -> None:
        """Program every argument and set ap_start. `pointers`: port -> (buffer, byte offset).

        A state stripe's read and write ports get the same buffer and offset: the kernel reads a
        beat through one and writes it back through the other (separate bundles keep both bursting).
        """
        if self.busy:
            raise DeviceError("launch while the previous run has not been waited for")
        dev = self.device
        missing = sorted(set(self.pointers) - set(pointers)) + sorted(set(self.scalars) - {"n"} - set(scalar_bits))
        if missing:
            raise DeviceError(f"kernel arguments not given: {', '.join(missing)}")
        for name, offset in self.pointers.items():
            buf, byte_offset = pointers[name]
            addr = buf.address + byte_offset
            dev.write_reg(offset, addr & 0xFFFFFFFF, self.cu)
            dev.write_reg(offset + 4, addr >> 32, self.cu)
        for name, offset in self.scalars.items():
            dev.write_reg(offset, n if name == "n" else scalar_bits[name], self.cu)
        dev.start(self.cu)
        self.busy = True

    def wait(self, timeout_s: float | None = None) -> None:
        try:
            self.device.wait(timeout_s, self.cu)
        finally:
            # After a timeout the run is abandoned: the driver never launches over it (the shard
            # is marked inconsistent), but the runner must not block a reset of the state.
            self.busy = False

    def describe(self) -> dict[str, Any]:
        return {"pointers": self.pointers, "scalars": self.scalars}
