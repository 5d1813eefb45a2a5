"""`rdma-cni verify`'s out-of-band channel and the RC traffic of one rail.

The two pods talk over TCP on their primary network (eth0): one JSON object a line.
On each rail both sides bring their queue pair to RTS, then the connecting side sends
``iters`` SENDs that the listening side answers (latency: half the round trip), then
RDMA WRITEs ``writes`` blocks of ``size`` bytes into the listener's memory region
(bandwidth); the listener checks the SENDs' payloads and the written bytes, the
connector the answers. Every wait has a deadline; a side that fails says so on the
channel, so the other stops too.
"""

from __future__ import annotations

import hashlib
import json
import select
import socket
import time
from dataclasses import dataclass
from typing import Any

MAX_LINE = 1 << 20
GAVE_UP = "gave up waiting"  # RcEndpoint.await_kind's word when stop() said so
CONNECT_RETRY = 0.5


class WireError(Exception):
    """The out-of-band channel failed (the message names how)."""


def _server_socket() -> socket.socket:
    """IPv6 and IPv4 on one socket; IPv4 alone where the kernel has no IPv6."""
    try:
        srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    except OSError:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return srv


class Wire:
    """One TCP connection carrying JSON lines."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.file = sock.makefile("rb")
        self.early: dict[str, Any] | None = None  # a message read ahead by peer_failed

    @classmethod
    def listen(cls, port: int, deadline: float) -> Wire:
        srv = _server_socket()
        try:
            srv.bind(("::" if srv.family == socket.AF_INET6 else "0.0.0.0", port))
            srv.listen(1)
            srv.settimeout(max(0.1, deadline - time.monotonic()))
            conn, _ = srv.accept()
        except OSError as exc:
            raise WireError(f"no peer connected to port {port}: {exc}") from None
        finally:
            srv.close()
        return cls(conn)

    @classmethod
    def connect(cls, host: str, port: int, deadline: float) -> Wire:
        last: OSError | None = None
        while time.monotonic() < deadline:
            try:
                sock = socket.create_connection((host, port), timeout=5)
                return cls(sock)
            except OSError as exc:  # the listener may not be up yet
                last = exc
                time.sleep(CONNECT_RETRY)
        raise WireError(f"failed to connect to the peer {host}:{port}: {last}")

    def send(self, doc: dict[str, Any]) -> None:
        try:
            self.sock.sendall(json.dumps(doc).encode() + b"\n")
        except OSError as exc:
            raise WireError(f"failed to send to the peer: {exc}") from None

    def recv(self, deadline: float) -> dict[str, Any]:
        if self.early is not None:
            doc, self.early = self.early, None
            return doc
        self.sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            line = self.file.readline(MAX_LINE)
        except OSError as exc:
            raise WireError(f"the peer did not answer: {exc}") from None
        if not line.endswith(b"\n"):
            raise WireError("the peer closed the connection")
        try:
            doc = json.loads(line)
        except ValueError:
            raise WireError("the peer sent something that is not JSON") from None
        if not isinstance(doc, dict):
            raise WireError("the peer sent something that is not a JSON object")
        return doc

    def peer_failed(self) -> bool:
        """The peer has ended the running step with a failure. A message that says it
        went well is kept for :meth:`recv`: the peer finished first (its last answer
        can arrive before our completion of it), nothing to give up on."""
        if self.early is None:
            readable, _, _ = select.select([self.sock], [], [], 0)
            if not readable:
                return False
            try:
                self.early = self.recv(time.monotonic() + 5)
            except WireError:
                return True
        return not self.early.get("ok", True)

    def swap(self, doc: dict[str, Any], deadline: float) -> dict[str, Any]:
        self.send(doc)
        return self.recv(deadline)

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@dataclass
class Traffic:
    iters: int = 100
    writes: int = 20
    size: int = 65536


def pattern(seed: int, size: int) -> bytes:
    """``size`` bytes that differ per rail and per position."""
    block = hashlib.sha256(f"rdma-cni verify {seed}".encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def _step(wire: Wire, name: str, deadline: float, fn: Any) -> Any:
    """Run ``fn``; tell the peer how it went and hear how it went there."""
    try:
        value, error = fn(), None
    except Exception as exc:  # a verbs failure, a deadline, a wrong payload
        value, error = None, str(exc)
    peer = wire.swap({"step": name, "ok": error is None, "error": error}, deadline)
    # a side that stopped waiting because the peer spoke reports the peer's failure
    if not peer.get("ok") and (error is None or error.startswith(GAVE_UP)):
        raise StepError(f"the peer failed at {name}: {peer.get('error')}")
    if error is not None:
        raise StepError(error)
    return value


class StepError(Exception):
    """A step of a rail failed here or at the peer (the message names which and how)."""


def run_rail(ep: Any, remote: dict[str, Any], wire: Wire, connector: bool, seed: int,
             traffic: Traffic, deadline: float) -> dict[str, Any]:
    """RC SEND/RECV and RDMA WRITE on one rail; latency and bandwidth. Raises
    StepError naming the step and the error."""
    def rts() -> None:
        ep.connect(remote)
        if not connector:
            ep.post_recv()

    _step(wire, "connect", deadline, rts)
    latency = _step(wire, "send/recv", deadline,
                    lambda: _pingpong(ep, connector, seed, traffic.iters, deadline,
                                      wire.peer_failed))
    out: dict[str, Any] = {"latency_us": round(latency, 1) if latency else None}
    data = pattern(seed, traffic.size)
    if connector:
        out["bandwidth_MBps"] = _step(wire, "rdma write", deadline,
                                      lambda: _write(ep, remote, data, traffic, deadline))
        checked = wire.recv(deadline)
    else:
        _step(wire, "rdma write", deadline, lambda: None)
        checked = {"written": ep.received(len(data)) == data}
        wire.send(checked)
        out["bandwidth_MBps"] = None
    if not checked.get("written"):
        raise StepError("the bytes RDMA WRITE put in the listener's memory differ")
    out["checked"] = ["SEND/RECV payloads", "RDMA WRITE bytes"]
    return out


def _pingpong(ep: Any, connector: bool, seed: int, iters: int, deadline: float,
              stop: Any) -> float:
    """SEND round trips; ``stop()`` true: the peer failed, give up waiting."""
    start = time.monotonic()
    for i in range(iters):
        ping, pong = f"ping {seed} {i}".encode(), f"pong {seed} {i}".encode()
        if connector:
            ep.post_recv()
            ep.post_send(ping)
            ep.await_kind("send", deadline, stop)
            _expect(ep, ep.await_kind("recv", deadline, stop), pong)
        else:
            _expect(ep, ep.await_kind("recv", deadline, stop), ping)
            if i + 1 < iters:
                ep.post_recv()
            ep.post_send(pong)
            ep.await_kind("send", deadline, stop)
    return (time.monotonic() - start) / max(1, iters) / 2 * 1e6


def _expect(ep: Any, length: int, want: bytes) -> None:
    got = ep.received(length)
    if got != want:
        raise StepError(f"a SEND arrived with {got[:32]!r}, not {want!r}")


def _write(ep: Any, remote: dict[str, Any], data: bytes, traffic: Traffic,
           deadline: float) -> float:
    start = time.monotonic()
    for _ in range(traffic.writes):
        ep.post_send(data, remote)
        ep.await_kind("send", deadline)  # the listener only waits on the channel here
    elapsed = max(time.monotonic() - start, 1e-9)
    return round(traffic.size * traffic.writes / elapsed / 1e6, 2)
