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
import struct
import time
from pathlib import Path
from typing import Any

import cocotb
from cocotb.triggers import ClockCycles
from kernel_tb import AP_DONE, CTRL, KernelTB

HEADER = struct.Struct("<II")  # JSON length, payload length


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        data = sock.recv(min(n, 1 << 20))
        if not data:
            raise ConnectionError("driver closed the socket")
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def _recv(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    jlen, plen = HEADER.unpack(_recv_exact(sock, HEADER.size))
    return json.loads(_recv_exact(sock, jlen)), _recv_exact(sock, plen) if plen else b""


def _send(sock: socket.socket, reply: dict[str, Any], payload: bytes = b"") -> None:
    body = json.dumps(reply).encode()
    sock.sendall(HEADER.pack(len(body), len(payload)) + body + payload)


@cocotb.test()
async def serve(dut: Any) -> None:
    manifest = json.loads(Path(os.environ["ONIC_MANIFEST"]).read_text())
    tb = KernelTB(dut, manifest=manifest, mem_size=int(os.environ["ONIC_MEM_SIZE"]),
                  memory=os.environ.get("ONIC_MEMORY", "ideal"), read_latency=int(os.environ.get("ONIC_LATENCY", "16")),
                  stall_probability=float(os.environ.get("ONIC_STALLS", "0")), seed=1)
    await tb.reset()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["ONIC_DRIVER_SOCKET"])
    _send(sock, {"ok": True, "hello": "rtlsim"})
    clk = dut.ap_clk
    while True:
        try:
            req, payload = _recv(sock)
        except ConnectionError:
            return
        op = req["op"]
        try:
            if op == "write_reg":
                await tb.write_reg(req["offset"], req["value"])
                _send(sock, {"ok": True})
            elif op == "read_reg":
                _send(sock, {"ok": True, "value": await tb.read_reg(req["offset"])})
            elif op == "mem_write":
                tb.mem.write(req["address"], payload)
                _send(sock, {"ok": True})
            elif op == "mem_read":
                _send(sock, {"ok": True}, bytes(tb.mem.read(req["address"], req["nbytes"])))
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
                _send(sock, {"ok": True, "done": done})
            elif op == "fault":
                tb.hang()
                _send(sock, {"ok": True})
            elif op == "close":
                _send(sock, {"ok": True})
                sock.close()
                return
            else:
                _send(sock, {"ok": False, "error": f"unknown request {op!r}"})
        except Exception as exc:  # report to the driver instead of dying silently
            _send(sock, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
