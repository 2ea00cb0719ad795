"""cocotb side of the driver's `rtlsim` backend: the RTL kernel as a card that serves the host.

The simulator runs this one test. It builds the card around the kernel with the RTL team's
`KernelTB` (AxiLiteMaster on s_axi_control; one read or write memory model per m_axi port, each
port of the memory plan on its channel, all over one flat memory in which the driver's stripe
buffers live at the addresses it allocated),
connects back to the driver process over a Unix socket and serves its requests until told to
stop. Simulated time advances only inside requests (register accesses, `wait_done`), so while
the host thinks, the card is frozen; results do not depend on it.

Environment (set by pynq_driver/backends/rtlsim.py): ONIC_MANIFEST, ONIC_DRIVER_SOCKET, ONIC_MEM_SIZE,
ONIC_MEMORY ("ideal" or "hbm", see kernel_tb), ONIC_LATENCY (ideal memory read latency in
clocks), ONIC_STALLS (random AXI pause probability).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import cocotb
from cocotb.triggers import ClockCycles
from kernel_tb import AP_DONE, CTRL, KernelTB

from pynq_driver.backends.sim_link import recv_message, send_message


@cocotb.test()
async def serve(dut: Any) -> None:
    manifest = json.loads(Path(os.environ["ONIC_MANIFEST"]).read_text())
    tb = KernelTB(dut, manifest=manifest, mem_size=int(os.environ["ONIC_MEM_SIZE"]),
                  memory=os.environ.get("ONIC_MEMORY", "ideal"), read_latency=int(os.environ.get("ONIC_LATENCY", "16")),
                  stall_probability=float(os.environ.get("ONIC_STALLS", "0")), seed=1)
    await tb.reset()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["ONIC_DRIVER_SOCKET"])
    send_message(sock, {"ok": True, "hello": "rtlsim"})
    clk = dut.ap_clk
    while True:
        try:
            req, payload = recv_message(sock)
        except ConnectionError:
            return
        op = req["op"]
        try:
            if op == "write_reg":
                await tb.write_reg(req["offset"], req["value"])
                send_message(sock, {"ok": True})
            elif op == "read_reg":
                send_message(sock, {"ok": True, "value": await tb.read_reg(req["offset"])})
            elif op == "mem_write":
                tb.mem.write(req["address"], payload)
                send_message(sock, {"ok": True})
            elif op == "mem_read":
                send_message(sock, {"ok": True}, bytes(tb.mem.read(req["address"], req["nbytes"])))
            elif op == "wait_done":
                # Poll ap_done (clear on read) every 16 clocks, as XRT does, for a bounded slice of
                # wall-clock time; the driver repeats until its own timeout.
                done = False
                until = time.monotonic() + req["wall_s"]
                while time.monotonic() < until:
                    if await tb.read_reg(CTRL) & AP_DONE:
                        done = True
                        break
                    await ClockCycles(clk, 16)
                send_message(sock, {"ok": True, "done": done})
            elif op == "fault":
                tb.hang()
                send_message(sock, {"ok": True})
            elif op == "close":
                send_message(sock, {"ok": True})
                sock.close()
                return
            else:
                send_message(sock, {"ok": False, "error": f"unknown request {op!r}"})
        except Exception as exc:  # report to the driver instead of dying silently
            send_message(sock, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
