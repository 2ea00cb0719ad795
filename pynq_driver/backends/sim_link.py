"""The host end of a simulator child process: one Unix socket, length-framed JSON requests with a
binary payload, and the process's life (its own session, killed as a group).

Both simulated-RTL paths run their simulator in a child (cocotb owns the interpreter it runs in):
the single Adam kernel (`pynq_driver.backends.rtlsim`) and the ring of RTL cards
(`pynq_driver.net.rtlsim`). They differ in what they ask and in the error they raise; the framing,
the liveness checks and the teardown are this class.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import IO, Any

HEADER = struct.Struct("<II")  # JSON length, payload length


class SimLink:
    """Mix-in: the subclass sets `_proc`, `_sock`, `_log`, `_tmp` and `log_path`, and names its error
    (`_link_error`, built from one message) and its label in messages (`_link_label`)."""

    _link_error: type[Exception] = RuntimeError
    _link_label = "simulator"
    _proc: subprocess.Popen[bytes] | None
    _sock: socket.socket | None
    _log: IO[bytes]
    _tmp: Path
    log_path: Path

    def _fail(self, message: str) -> Exception:
        return self._link_error(f"{self._link_label}: {message}")

    def _accept(self, listener: socket.socket, timeout_s: float) -> socket.socket:
        deadline = time.monotonic() + timeout_s
        listener.settimeout(1.0)
        while True:
            try:
                return listener.accept()[0]
            except TimeoutError:
                self._check_alive()
                if time.monotonic() > deadline:
                    raise self._fail(f"the simulator did not start within {timeout_s:g} s; "
                                     f"see {self.log_path}") from None

    def _check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            code = self._proc.returncode
            self._proc = None
            raise self._fail(f"the simulator process exited (code {code}); last lines of {self.log_path}:\n"
                             f"{self._tail()}")

    def _tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _recv_exact(self, n: int, deadline: float) -> bytes:
        assert self._sock is not None
        chunks = []
        while n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self._sock.settimeout(min(remaining, 1.0))
            try:
                data = self._sock.recv(min(n, 1 << 20))
            except TimeoutError:
                self._check_alive()
                continue
            if not data:
                self._check_alive()
                time.sleep(0.2)  # let the exit code arrive
                self._check_alive()
                raise self._fail(f"the simulator closed the connection; see {self.log_path}")
            chunks.append(data)
            n -= len(data)
        return b"".join(chunks)

    def _recv(self, timeout_s: float) -> tuple[dict[str, Any], bytes]:
        deadline = time.monotonic() + timeout_s
        try:
            jlen, plen = HEADER.unpack(self._recv_exact(HEADER.size, deadline))
            reply = json.loads(self._recv_exact(jlen, deadline))
            payload = self._recv_exact(plen, deadline) if plen else b""
        except TimeoutError:
            self._kill()
            raise self._fail(f"the simulator did not answer within {timeout_s:g} s (hung); it was stopped, "
                             f"see {self.log_path}") from None
        if not reply.get("ok"):
            raise self._fail(str(reply.get("error")))
        return reply, payload

    def _exchange(self, req: dict[str, Any], payload: bytes, send_timeout_s: float, timeout_s: float
                  ) -> tuple[dict[str, Any], bytes]:
        """One request and its reply (the caller holds whatever lock it needs)."""
        if self._sock is None:
            raise self._fail(f"the simulator is gone; see {self.log_path}")
        self._check_alive()
        body = json.dumps(req).encode()
        try:
            self._sock.settimeout(send_timeout_s)
            self._sock.sendall(HEADER.pack(len(body), len(payload)) + body + payload)
        except OSError as exc:
            self._check_alive()
            raise self._fail(f"cannot reach the simulator ({exc}); see {self.log_path}") from exc
        return self._recv(timeout_s)

    def _kill(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the session this process created for the child
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __del__(self) -> None:
        if getattr(self, "_proc", None) is not None:
            self._kill()


# ---- the child's end (the cocotb test that serves the host) ----------------------------------------
def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        data = sock.recv(min(n, 1 << 20))
        if not data:
            raise ConnectionError("driver closed the socket")
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def recv_message(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    """One request from the host: its JSON and its payload."""
    jlen, plen = HEADER.unpack(_recv_exact(sock, HEADER.size))
    return json.loads(_recv_exact(sock, jlen)), _recv_exact(sock, plen) if plen else b""


def send_message(sock: socket.socket, reply: dict[str, Any], payload: bytes = b"") -> None:
    """One reply to the host."""
    body = json.dumps(reply).encode()
    sock.sendall(HEADER.pack(len(body), len(payload)) + body + payload)
