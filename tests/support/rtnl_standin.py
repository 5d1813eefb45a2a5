"""A stand-in for the kernel's netlink socket under the kernel adapter
(rdma_cni/adapters/rtnl.py's ``Channel``): it records each request sent and ends each
as the kernel does (a dump with DONE, a request with its ACK), after the answers
:meth:`StandIn.answer` queues for it."""

from __future__ import annotations

import struct

from rdma_cni.adapters import rtnl

HDR = struct.Struct("=IHHII")


class StandIn:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.queue: list[bytes] = []

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        _len, kind, flags, seq, _pid = HDR.unpack_from(data)
        dump = flags & rtnl.NLM_F_DUMP == rtnl.NLM_F_DUMP
        self.answer(data, kind, seq, dump)
        if dump:
            self.queue.append(HDR.pack(20, rtnl.NLMSG_DONE, 2, seq, 0) + b"\0" * 4)
        else:
            self.queue.append(HDR.pack(20, rtnl.NLMSG_ERROR, 0x100, seq, 0) + b"\0" * 4)
        return len(data)

    def answer(self, data: bytes, kind: int, seq: int, dump: bool) -> None:
        """Queue the answers to request ``data`` (none here)."""

    def dumps(self) -> list[bool]:
        """Whether each request sent was a dump."""
        return [HDR.unpack_from(d)[2] & rtnl.NLM_F_DUMP == rtnl.NLM_F_DUMP for d in self.sent]

    def recv_into(self, buf: bytearray, n: int, flags: int) -> int:
        return len(self.queue[0])

    def recv(self, size: int) -> bytes:
        return self.queue.pop(0)

    def close(self) -> None:
        pass
