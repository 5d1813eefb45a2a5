"""The rtnetlink channel's reading of answers (rdma_cni/adapters/rtnl.py), over a
scripted socket: answers matched by sequence number, errors, dumps across datagrams,
and dumps the kernel marks interrupted read again. (Against the kernel it runs in
tests/integration/test_netlink_contract.py.)"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Callable

import pytest

from rdma_cni.adapters.rtnl import (
    DUMP_TRIES,
    NLM_F_DUMP_INTR,
    NLMSG_DONE,
    NLMSG_ERROR,
    RTM_GETADDR,
    RTM_NEWADDR,
    Channel,
    ifaddrmsg,
)

HDR = struct.Struct("=IHHII")


def addr(seq: int, ip: str, flags: int = 0) -> bytes:
    m = ifaddrmsg()
    m["family"], m["prefixlen"], m["index"] = 2, 24, 7
    m["attrs"] = [("IFA_LOCAL", ip), ("IFA_ADDRESS", ip)]
    m["header"].update(type=RTM_NEWADDR, flags=flags, sequence_number=seq, pid=0)
    m.encode()
    return bytes(m.data)


def end(seq: int, kind: int = NLMSG_DONE, err: int = 0) -> bytes:
    body = struct.pack("=i", err) + (HDR.pack(16, RTM_GETADDR, 0, seq, 0) if kind == 2 else b"")
    return HDR.pack(HDR.size + len(body), kind, 0, seq, 0) + body


class Scripted:
    """A socket whose answer to the n-th request is ``script(n, seq)``: a list of
    datagrams."""

    def __init__(self, script: Callable[[int, int], list[bytes]]) -> None:
        self.script, self.sent, self.queue = script, [], []

    def send(self, data: bytes) -> int:
        seq = HDR.unpack_from(data)[3]
        self.queue += self.script(len(self.sent), seq)
        self.sent.append(bytes(data))
        return len(data)

    def recv_into(self, buf: bytearray, n: int, flags: int) -> int:
        assert flags == socket.MSG_PEEK | socket.MSG_TRUNC
        return len(self.queue[0])

    def recv(self, n: int) -> bytes:
        return self.queue.pop(0)

    def close(self) -> None:
        pass


def ips(msgs: list) -> list[str]:
    return [m.get_attr("IFA_LOCAL") for m in msgs]


def dump(sock: Scripted) -> list[str]:
    return ips(Channel(sock).dump(ifaddrmsg, RTM_GETADDR, family=2))  # type: ignore[arg-type]


def test_a_dump_spans_datagrams_and_skips_answers_to_earlier_requests() -> None:
    sock = Scripted(lambda n, seq: [addr(seq - 1, "192.0.2.99") + addr(seq, "192.0.2.1"),
                                    addr(seq, "192.0.2.2") + end(seq)])
    assert dump(sock) == ["192.0.2.1", "192.0.2.2"]


def test_an_interrupted_dump_is_read_again() -> None:
    def script(n: int, seq: int) -> list[bytes]:
        if n == 0:  # the table changed under the first pass
            return [addr(seq, "192.0.2.1", NLM_F_DUMP_INTR) + end(seq)]
        return [addr(seq, "192.0.2.1") + addr(seq, "192.0.2.2") + end(seq)]

    sock = Scripted(script)
    assert dump(sock) == ["192.0.2.1", "192.0.2.2"]
    assert len(sock.sent) == 2


def test_a_dump_that_never_settles_fails() -> None:
    sock = Scripted(lambda n, seq: [addr(seq, "192.0.2.1", NLM_F_DUMP_INTR) + end(seq)])
    with pytest.raises(OSError) as info:
        dump(sock)
    assert info.value.errno == errno.EAGAIN
    assert len(sock.sent) == DUMP_TRIES


def test_a_refusal_carries_the_kernels_errno() -> None:
    sock = Scripted(lambda n, seq: [end(seq, NLMSG_ERROR, -errno.ENODEV)])
    with pytest.raises(OSError) as info:
        Channel(sock).request(ifaddrmsg, RTM_GETADDR)  # type: ignore[arg-type]
    assert info.value.errno == errno.ENODEV


def test_an_ack_ends_a_request() -> None:
    sock = Scripted(lambda n, seq: [addr(seq, "192.0.2.5"), end(seq, NLMSG_ERROR, 0)])
    assert ips(Channel(sock).request(ifaddrmsg, RTM_GETADDR)) == ["192.0.2.5"]  # type: ignore[arg-type]
