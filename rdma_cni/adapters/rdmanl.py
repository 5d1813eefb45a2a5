"""RDMA netlink (NETLINK_RDMA, the "nldev" client): the RDMA subsystem netns
mode and moving an RDMA device between network namespaces. pyroute2 has no
RDMA family, so this is a small hand-built client over a raw socket.

Constants are the kernel ABI from include/uapi/rdma/rdma_netlink.h. Message
building and parsing are pure functions, so tests check the bytes exactly; the
transport is injectable.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable, Iterator

from rdma_cni.errors import IOFailure
from rdma_cni.records import record
from rdma_cni.vocab.modes import RdmaNetnsMode

NETLINK_RDMA = 20
RDMA_NL_NLDEV = 5
RDMA_NLDEV_CMD_GET = 1
RDMA_NLDEV_CMD_SET = 2
RDMA_NLDEV_CMD_SYS_GET = 6
ATTR_DEV_INDEX = 1  # u32
ATTR_DEV_NAME = 2  # string
SYS_ATTR_NETNS_MODE = 66  # u8: 1 shared, 0 exclusive
NET_NS_FD = 68  # u32

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLMSG_ERROR = 0x2
NLMSG_DONE = 0x3
_HDR = struct.Struct("=IHHII")
_NLA = struct.Struct("=HH")


def msg_type(op: int) -> int:
    return (RDMA_NL_NLDEV << 10) + op


def _attr(kind: int, payload: bytes) -> bytes:
    raw = _NLA.pack(_NLA.size + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def build(op: int, flags: int, seq: int, attrs: bytes = b"") -> bytes:
    return _HDR.pack(_HDR.size + len(attrs), msg_type(op), flags, seq, 0) + attrs


def build_sys_get(seq: int) -> bytes:
    return build(RDMA_NLDEV_CMD_SYS_GET, NLM_F_REQUEST | NLM_F_ACK, seq)


def build_dev_dump(seq: int) -> bytes:
    return build(RDMA_NLDEV_CMD_GET, NLM_F_REQUEST | NLM_F_DUMP, seq)


def build_move(seq: int, dev_index: int, netns_fd: int) -> bytes:
    attrs = _attr(ATTR_DEV_INDEX, struct.pack("=I", dev_index))
    attrs += _attr(NET_NS_FD, struct.pack("=I", netns_fd))
    return build(RDMA_NLDEV_CMD_SET, NLM_F_REQUEST | NLM_F_ACK, seq, attrs)


@record
class Message:
    type: int
    seq: int
    attrs: dict[int, bytes]
    error: int = 0


def parse(data: bytes) -> Iterator[Message]:
    off = 0
    while off + _HDR.size <= len(data):
        length, kind, _flags, seq, _pid = _HDR.unpack_from(data, off)
        if length < _HDR.size:
            raise IOFailure("failed to parse an RDMA netlink reply: bad message length")
        body = data[off + _HDR.size: off + length]
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", body, 0)
            yield Message(kind, seq, {}, -code)
        else:
            yield Message(kind, seq, _attrs(body))
        off += (length + 3) & ~3


def _attrs(body: bytes) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    off = 0
    while off + _NLA.size <= len(body):
        length, kind = _NLA.unpack_from(body, off)
        if length < _NLA.size:
            break
        out[kind & 0x3FFF] = body[off + _NLA.size: off + length]
        off += (length + 3) & ~3
    return out


Transport = Callable[[bytes], list[Message]]


def socket_transport(data: bytes) -> list[Message]:
    """Send one request on a fresh NETLINK_RDMA socket; collect replies to DONE or ACK."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_RDMA)
    except OSError as exc:
        raise IOFailure(f"failed to open an RDMA netlink socket: {exc.strerror or exc}") from None
    try:
        sock.settimeout(5.0)
        sock.send(data)
        return _collect(sock)
    except OSError as exc:
        raise IOFailure(f"RDMA netlink request failed: {exc.strerror or exc}") from None
    finally:
        sock.close()


def _collect(sock: socket.socket) -> list[Message]:
    out: list[Message] = []
    while True:
        for msg in parse(sock.recv(65536)):
            if msg.type == NLMSG_DONE or msg.type == NLMSG_ERROR:
                out.append(msg)
                return out
            out.append(msg)


class RdmaNetlink:
    def __init__(self, transport: Transport = socket_transport) -> None:
        self.transport = transport
        self.seq = 1

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def netns_mode(self) -> RdmaNetnsMode | None:
        """The RDMA netns mode, or None when the kernel has no RDMA netlink."""
        try:
            replies = self.transport(build_sys_get(self._next()))
        except IOFailure:
            return None
        for msg in replies:
            value = msg.attrs.get(SYS_ATTR_NETNS_MODE)
            if value:
                return RdmaNetnsMode.SHARED if value[0] else RdmaNetnsMode.EXCLUSIVE
        return None

    def dev_index(self, name: str) -> int | None:
        for msg in self.transport(build_dev_dump(self._next())):
            raw_name = msg.attrs.get(ATTR_DEV_NAME, b"").rstrip(b"\0").decode(errors="replace")
            if raw_name == name and ATTR_DEV_INDEX in msg.attrs:
                return int(struct.unpack("=I", msg.attrs[ATTR_DEV_INDEX][:4])[0])
        return None

    def move(self, name: str, netns_fd: int) -> bool:
        """Move RDMA device ``name`` (as seen from this socket's netns) to ``netns_fd``.

        False when the device is not visible here (already moved, or gone).
        """
        index = self.dev_index(name)
        if index is None:
            return False
        for msg in self.transport(build_move(self._next(), index, netns_fd)):
            if msg.type == NLMSG_ERROR and msg.error:
                if msg.error == errno.ENODEV:
                    return False
                raise IOFailure(f"failed to move RDMA device {name} to another netns: "
                                f"{os.strerror(msg.error).lower()}")
        return True
