"""verify's out-of-band channel and the traffic steps of one rail, over a real TCP
connection on the loopback and an in-memory RC pair (tests/support/fakes/verbs.py). No root."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from support.fakes.verbs import FakeRc
from support.proc import free_port

from rdma_cni.tools.verify_wire import StepError, Traffic, Wire, WireError, run_rail


def _both(a: FakeRc, b: FakeRc, traffic: Traffic) -> tuple[Any, Any]:
    """run_rail on both sides; each side's result or exception."""
    port, deadline = free_port(), time.monotonic() + 20
    out: dict[str, Any] = {}

    def side(name: str, ep: FakeRc, connector: bool) -> None:
        wire = (Wire.connect("127.0.0.1", port, deadline) if connector
                else Wire.listen(port, deadline))
        try:
            out[name] = run_rail(ep, {}, wire, connector, 0, traffic, time.monotonic() + 5)
        except StepError as exc:
            out[name] = exc
        finally:
            wire.close()

    threads = [threading.Thread(target=side, args=("listen", a, False)),
               threading.Thread(target=side, args=("connect", b, True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out["listen"], out["connect"]


def test_a_rail_moves_and_checks_send_and_write() -> None:
    a, b = FakeRc.pair(4096)
    served, got = _both(a, b, Traffic(iters=10, writes=3, size=4096))
    assert served["checked"] == got["checked"] == ["SEND/RECV payloads", "RDMA WRITE bytes"]
    assert got["latency_us"] > 0 and got["bandwidth_MBps"] > 0
    assert served["bandwidth_MBps"] is None


@pytest.mark.parametrize("broken", ["connect", "send"])
def test_a_failure_on_one_side_ends_the_rail_on_both(broken: str) -> None:
    a, b = FakeRc.pair(4096, broken=broken)  # the listener's side fails
    started = time.monotonic()
    served, got = _both(a, b, Traffic(iters=3, writes=1, size=4096))
    assert time.monotonic() - started < 4  # run_rail's deadline is 5 s
    assert isinstance(served, StepError) and isinstance(got, StepError)
    assert "Invalid argument" in str(served) or "status 12" in str(served)
    # the side still waiting for a completion hears of the failure on the channel and
    # stops at once (no waiting out the deadline)
    assert str(got).startswith("the peer failed at "), got


def test_a_peer_that_finishes_first_is_no_failure() -> None:
    """The connector has the last answer before the listener has the completion of its
    send (the ACK is late): the connector's step message arrives meanwhile and is no
    reason for the listener to give up."""
    a, b = FakeRc.pair(4096, late_ack=0.3)
    served, got = _both(a, b, Traffic(iters=2, writes=1, size=4096))
    assert not isinstance(served, Exception) and not isinstance(got, Exception), (served, got)


def test_a_write_that_lands_wrong_is_found() -> None:
    a, b = FakeRc.pair(4096)
    a.mem = bytearray(4096)
    real = b.post_send

    def corrupt(data: bytes, remote: dict[str, Any] | None = None) -> None:
        real(bytes(len(data)) if remote is not None else data, remote)

    b.post_send = corrupt  # type: ignore[method-assign]
    served, got = _both(a, b, Traffic(iters=2, writes=1, size=4096))
    assert isinstance(served, StepError) and isinstance(got, StepError)
    assert "RDMA WRITE put in the listener's memory differ" in str(got)


def test_the_channel_names_a_peer_that_never_comes() -> None:
    with pytest.raises(WireError, match=r"failed to connect to the peer 127\.0\.0\.1:"):
        Wire.connect("127.0.0.1", free_port(), time.monotonic() + 1)
    with pytest.raises(WireError, match="no peer connected to port"):
        Wire.listen(free_port(), time.monotonic() + 0.5)
