"""The pieces of the software cards on the wire: the UDP transport, the seeded fault layer and the
rendezvous through a (duck-typed) torch.distributed store."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
import torch.distributed as dist

from hls.errors import ToolMissing, UserError
from hls.net import wire
from pynq_driver.backends.alveo import AlveoDevice, require_network_bitstream
from pynq_driver.net.errors import RendezvousTimeout
from pynq_driver.net.faults import FaultLayer, Faults
from pynq_driver.net.rendezvous import exchange_addresses
from pynq_driver.net.transport import UdpTransport


def _frame(seq: int, payload: bytes = b"\x01" * 64) -> bytes:
    a, b = wire.endpoint_for_rank(0), wire.endpoint_for_rank(1)
    header = wire.Header(wire.Opcode.RS, seq=seq, length=len(payload))
    return wire.build_frame(a, b, header, payload, with_fcs=True)


def test_transport_carries_each_frame_as_one_datagram():
    with UdpTransport() as a, UdpTransport() as b:
        frames = [_frame(i, bytes([i]) * 8192) for i in range(20)]
        for f in frames:
            a.send(f, b.address)
        got: list[bytes] = []
        end = time.monotonic() + 5
        while len(got) < len(frames) and time.monotonic() < end:
            got += b.recv(0.1)
        assert got == frames  # exact bytes, FCS included, in order on loopback
        assert b.recv(0.01) == []
        b.wake()  # an empty datagram wakes a waiting recv and is no frame
        assert b.recv(1.0) == [] and b.received_datagrams == len(frames)
    assert a.recv(0.01) == []  # closed: nothing, no error


def _through(faults: Faults, count: int = 2000) -> tuple[list[bytes], FaultLayer]:
    sent: list[bytes] = []
    layer = FaultLayer(faults, lambda frame, _addr: sent.append(frame))
    for i in range(count):
        layer.send(_frame(i), None, now=i * 1e-3)
        layer.flush(i * 1e-3)
    layer.flush(1e9)
    return sent, layer


def test_faults_are_seeded_and_counted():
    faults = Faults(drop=0.02, duplicate=0.02, reorder=0.02, bitflip=0.02, delay=0.02, delay_s=0.005, seed=3)
    sent, layer = _through(faults)
    again, _ = _through(faults)
    assert sent == again  # the same seed, the same faults
    c = layer.counters
    assert min(c.dropped, c.duplicated, c.reordered, c.bitflipped, c.delayed) > 10
    assert len(sent) == c.frames - c.dropped + c.duplicated
    parsed = [wire.parse_frame(f, with_fcs=True) for f in sent]
    assert sum(p is wire.Drop.FCS for p in parsed) == c.bitflipped  # every flipped bit fails the FCS
    seqs = [p.header.seq for p in parsed if isinstance(p, wire.Frame)]
    assert seqs != sorted(seqs)  # reordered and delayed
    other, _ = _through(Faults(**{**vars(faults), "seed": 4}))
    assert other != sent
    assert faults.for_rank(1).seed != faults.for_rank(2).seed


def test_no_faults_passes_every_frame_through():
    sent, layer = _through(Faults(), 50)
    assert sent == [_frame(i) for i in range(50)] and layer.next_due() is None


@pytest.mark.parametrize("bad", [{"drop": 1.0}, {"bitflip": -0.1}, {"delay_s": 5.0}, {"seed": 1.5}])
def test_bad_faults_are_refused(bad):
    with pytest.raises(UserError):
        Faults(**bad)


def test_rendezvous_through_a_tcpstore():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=10))
    world = 3
    got: dict[int, list] = {}

    def rank(r: int, base: int) -> None:  # each rank its own client, as each process has
        client = dist.TCPStore("127.0.0.1", store.port, is_master=False, timeout=datetime.timedelta(seconds=10))
        got[r] = exchange_addresses(client, r, world, ("127.0.0.1", base + r), comm=5, timeout_s=10)

    for base in (40000, 50000):  # a ring opened again through the same store reads the new addresses
        threads = [threading.Thread(target=rank, args=(r, base)) for r in range(world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        want = [("127.0.0.1", base + r) for r in range(world)]
        assert got == {r: want for r in range(world)}


def test_rendezvous_names_the_rank_that_never_came():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=10))
    t0 = time.monotonic()
    with pytest.raises(RendezvousTimeout, match=r"rank 0: rank 1 did not publish its card's address .* 0\.5 s"):
        exchange_addresses(store, 0, 2, ("127.0.0.1", 1), timeout_s=0.5)
    assert time.monotonic() - t0 < 5
    with pytest.raises(UserError, match="has no set"):
        exchange_addresses(object(), 0, 2, ("127.0.0.1", 1))


def test_alveo_backend_needs_the_network_bitstream():
    with pytest.raises(ToolMissing, match=r"network bitstream \(.*issue \"the card's network RTL\", not built yet"):
        require_network_bitstream()
    assert AlveoDevice.join_ring.__doc__
