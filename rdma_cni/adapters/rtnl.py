"""A synchronous rtnetlink channel: one raw ``NETLINK_ROUTE`` socket in the netns it
was made in; requests and answers in pyroute2's message classes' layouts, packed in
one pass (:mod:`rdma_cni.adapters.rtnlcodec`) and read attribute by attribute when
asked (:mod:`rdma_cni.adapters.rtnlanswer`), in every process. The
request/response layer of pyroute2's ``IPRoute`` runs each call through an asyncio
loop and argument filters, which cost more than the message itself.

Dumps are filtered by the kernel (``NETLINK_GET_STRICT_CHK``, Linux >= 4.20): a
node's address or route dump for one link or table then carries only what was asked;
callers still filter what they read, so an older kernel that ignores the filter
gives the same answer, only slower.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
from collections.abc import Sequence
from typing import Any

import rdma_cni.adapters.pyroute2pkg  # isort: skip  # noqa: F401 - before any pyroute2 import
from pyroute2.netlink.rtnl.fibmsg import fibmsg
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.nsidmsg import nsidmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from rdma_cni.adapters.rtnlanswer import Answer
from rdma_cni.adapters.rtnlcodec import NLMSG_HDR, Unsupported, encode

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_DUMP = 0x300
NLM_F_DUMP_INTR = 0x10
#: a dump the kernel marks interrupted (the table changed under it) is read again, this
#: many times at most, before the request fails
DUMP_TRIES = 5
NLMSG_ERROR = 2
NLMSG_DONE = 3
SOL_NETLINK = 270
NETLINK_GET_STRICT_CHK = 12

RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK, RTM_SETLINK = 16, 17, 18, 19
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTM_NEWRULE, RTM_DELRULE, RTM_GETRULE = 32, 33, 34
RTM_NEWNSID, RTM_GETNSID = 88, 90
RTM_NEWLINKPROP, RTM_DELLINKPROP = 108, 109
#: the answers a request can carry, by message type
_ANSWERS: dict[int, Any] = {RTM_NEWLINK: ifinfmsg, RTM_NEWADDR: ifaddrmsg,
                            RTM_NEWROUTE: rtmsg, RTM_NEWRULE: fibmsg, RTM_NEWNSID: nsidmsg}
_ERR = struct.Struct("=i")

__all__ = ["Answer", "Channel", "fibmsg", "ifaddrmsg", "ifinfmsg", "nsidmsg", "rtmsg"]


class Channel:
    """One socket, one request at a time; answers matched by sequence number."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        if sock is None:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                 socket.NETLINK_ROUTE)
            with contextlib.suppress(OSError):  # an older kernel: dumps come unfiltered
                sock.setsockopt(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1)
            sock.bind((0, 0))
        self._sock = sock
        self._seq = 0
        self._peek = bytearray(1)

    def close(self) -> None:
        self._sock.close()

    def request(self, cls: type, kind: int, nl_flags: int = 0,
                attrs: Sequence[tuple[str, Any]] = (), /, **fields: Any) -> list[Answer]:
        """Send a ``cls`` message (pyroute2's class; ``fields``: its fixed fields,
        ``attrs``: its attributes) as ``kind`` with NLM_F_REQUEST|ACK|``nl_flags``; the
        answers. A refusal raises OSError with the kernel's errno."""
        return self._exchange(cls, attrs, fields, kind,
                              NLM_F_REQUEST | NLM_F_ACK | nl_flags)[0]

    def dump(self, cls: type, kind: int, attrs: Sequence[tuple[str, Any]] = (), /,
             **fields: Any) -> list[Answer]:
        """Every object of a dump request, from one consistent pass of the kernel."""
        for _ in range(DUMP_TRIES):
            out, interrupted = self._exchange(cls, attrs, fields, kind,
                                              NLM_F_REQUEST | NLM_F_DUMP)
            if not interrupted:
                return out
        raise OSError(errno.EAGAIN, "the kernel's table kept changing during the dump")

    def _exchange(self, cls: type, attrs: Sequence[tuple[str, Any]], fields: dict[str, Any],
                  kind: int, flags: int) -> tuple[list[Answer], bool]:
        self._seq = self._seq % 0x7FFFFFFF + 1
        try:
            data = encode(cls, kind, flags, self._seq, fields, list(attrs))
        except Unsupported as exc:  # refused here as the kernel would refuse it
            raise OSError(errno.EINVAL, f"cannot pack the request ({exc})") from None
        self._sock.send(data)
        return self._collect(self._seq)

    def _collect(self, seq: int) -> tuple[list[Answer], bool]:
        """The answers to request ``seq`` and whether the kernel marked any of them
        interrupted; answers to earlier requests (left by a failed read) are skipped."""
        out: list[Answer] = []
        interrupted = False
        while True:
            data = self._recv()
            off = 0
            while off + NLMSG_HDR.size <= len(data):
                length, kind, flags, mseq, _pid = NLMSG_HDR.unpack_from(data, off)
                if length < NLMSG_HDR.size:
                    break
                if mseq == seq:
                    interrupted = interrupted or bool(flags & NLM_F_DUMP_INTR)
                    if kind in (NLMSG_DONE, NLMSG_ERROR):
                        # an ACK ends a request, DONE a dump; either may carry an errno
                        (err,) = _ERR.unpack_from(data, off + NLMSG_HDR.size) \
                            if length >= NLMSG_HDR.size + _ERR.size else (0,)
                        if err:
                            raise OSError(-err, os.strerror(-err))
                        return out, interrupted
                    cls = _ANSWERS.get(kind)
                    if cls is not None:
                        out.append(Answer(cls, data, off, length))
                off += (length + 3) & ~3

    def _recv(self) -> bytes:
        """One datagram, whatever its size (a NIC with many VFs answers in more than
        the usual 32 KiB)."""
        while True:
            try:
                size = self._sock.recv_into(self._peek, 0, socket.MSG_PEEK | socket.MSG_TRUNC)
                return self._sock.recv(max(size, 1))
            except InterruptedError:
                continue

