"""An in-memory pair of RC endpoints shaped like rdma_cni.adapters.verbs.RcEndpoint:
what one side SENDs lands in the other's receive buffer, an RDMA WRITE in its memory.
``broken`` makes a step fail the way verbs reports it (an exception naming it);
``late_ack`` delays each send completion (the peer's ACK) by that many seconds, as on
a fabric where the receiver sees the data before the sender sees its completion."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rdma_cni.adapters.verbs import VerbsError


class FakeRc:
    def __init__(self, size: int, broken: str = "", late_ack: float = 0.0) -> None:
        self.size, self.broken, self.late_ack = size, broken, late_ack
        self.peer: FakeRc | None = None
        self.mem = bytearray(size)
        self.recvs = 0  # receives posted and not yet used
        self.inbox: list[bytes] = []
        self.done: dict[str, list[int]] = {"send": [], "recv": []}
        self.lock = threading.Condition()

    @staticmethod
    def pair(size: int, broken: str = "", late_ack: float = 0.0) -> tuple[FakeRc, FakeRc]:
        a, b = FakeRc(size, broken, late_ack), FakeRc(size)
        a.peer, b.peer = b, a
        return a, b

    def local(self) -> dict[str, Any]:
        return {"qpn": id(self) & 0xFFFFFF, "psn": 1, "gid": "::", "rkey": 1, "addr": 0,
                "mtu": 3}

    def connect(self, remote: dict[str, Any]) -> None:
        if self.broken == "connect":
            raise VerbsError("failed to bring the queue pair to RTS: Invalid argument")

    def post_recv(self) -> None:
        with self.lock:
            self.recvs += 1
            self._deliver()

    def post_send(self, data: bytes, remote: dict[str, Any] | None = None) -> None:
        assert self.peer is not None
        if self.broken == "send":
            raise VerbsError("work completion failed: status 12 (transport retry counter "
                             "exceeded)")
        if remote is not None:
            with self.peer.lock:
                self.peer.mem[:len(data)] = data
        else:
            with self.peer.lock:
                self.peer.inbox.append(bytes(data))
                self.peer._deliver()
        if self.late_ack:
            threading.Timer(self.late_ack, self._completed, (len(data),)).start()
        else:
            self._completed(len(data))

    def _completed(self, length: int) -> None:
        with self.lock:
            self.done["send"].append(length)
            self.lock.notify_all()

    def _deliver(self) -> None:  # with self.lock held
        while self.recvs and self.inbox:
            data = self.inbox.pop(0)
            self.recvs -= 1
            self.mem[:len(data)] = data
            self.done["recv"].append(len(data))
        self.lock.notify_all()

    def await_kind(self, kind: str, deadline: float,
                   stop: Callable[[], bool] | None = None) -> int:
        with self.lock:
            while not self.done[kind]:
                if stop is not None and stop():
                    raise VerbsError(f"gave up waiting for a {kind} work completion")
                self.lock.wait(timeout=0.05)
                if time.monotonic() > deadline:
                    raise VerbsError(f"no {kind} work completion before the deadline")
            return self.done[kind].pop(0)

    def received(self, length: int) -> bytes:
        with self.lock:
            return bytes(self.mem[:length])

    def close(self) -> None:
        pass
