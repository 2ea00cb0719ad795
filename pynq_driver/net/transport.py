"""One UDP socket per card: each frame's exact bytes (what an Ethernet port would carry, FCS
included) travel as one datagram to the peer card's socket.

Localhost only by default (127.0.0.1, an ephemeral port): the frame's own Ethernet and IPv4
addresses are the ring's (hls.net.wire), the UDP socket is only the cable. `recv` waits at most
`timeout_s` and returns every datagram already queued (bounded), so an event loop never blocks
for longer than its next deadline; `wake()` makes it return at once (the host started a step).
"""

from __future__ import annotations

import errno
import select
import socket

from pynq_driver.net.errors import RingError

Address = tuple[str, int]
MAX_DATAGRAM = 65535
RECV_BUFFER_BYTES = 8 << 20  # loopback bursts of a window of jumbo frames
RECV_BATCH = 256  # at most this many datagrams per recv call


class UdpTransport:
    """A bound UDP socket on `host` (port 0: any free port); `address` is what the peers send to."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                try:
                    self.sock.setsockopt(socket.SOL_SOCKET, opt, RECV_BUFFER_BYTES)
                except OSError:  # a smaller kernel limit: the protocol recovers from overflow drops
                    pass
            self.sock.bind((host, port))
            self.sock.setblocking(False)
        except BaseException:
            self.sock.close()
            raise
        self.address: Address = self.sock.getsockname()[:2]
        self.closed = False
        self.sent_datagrams = 0
        self.received_datagrams = 0
        self.send_errors = 0

    def send(self, frame: bytes, address: Address) -> None:
        """One datagram; a full socket buffer or a peer that is gone loses the frame, as a wire would."""
        try:
            self.sock.sendto(frame, address)
            self.sent_datagrams += 1
        except (BlockingIOError, ConnectionRefusedError):
            self.send_errors += 1
        except OSError as exc:
            if exc.errno in (errno.ENOBUFS, errno.EAGAIN, errno.ECONNREFUSED, errno.EMSGSIZE):
                self.send_errors += 1
                return
            raise RingError(f"UDP send to {address[0]}:{address[1]} failed: {exc}") from exc

    def recv(self, timeout_s: float) -> list[bytes]:
        """Datagrams received within `timeout_s` (waits only while none is queued)."""
        if self.closed:
            return []
        ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout_s))
        out: list[bytes] = []
        if not ready:
            return out
        while len(out) < RECV_BATCH:
            try:
                data = self.sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionRefusedError:  # an ICMP error of an earlier send: nothing to read
                continue
            if data:  # an empty datagram is `wake`'s: no frame is empty
                out.append(data)
        self.received_datagrams += len(out)
        return out

    def wake(self) -> None:
        """Make a `recv` waiting in another thread return now (an empty datagram to this socket)."""
        try:
            self.sock.sendto(b"", self.address)
        except OSError:  # closed or full: the waiting recv returns at its timeout anyway
            pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.sock.close()

    def __enter__(self) -> UdpTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Address", "UdpTransport"]
