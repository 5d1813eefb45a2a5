"""RDMA netlink: the exact bytes of each request, reply parsing, and the client's
decisions, through a fake transport that records what it was sent."""

from __future__ import annotations

import errno
import struct

import pytest

from rdma_cni.adapters import rdmanl
from rdma_cni.errors import IOFailure


def nlmsg(kind: int, seq: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), kind, 0, seq, 0) + body


def nla(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def test_move_request_bytes_match_iproute2_rdma_dev_set_netns() -> None:
    # rdma dev set <dev> netns <ns>: RDMA_NLDEV_CMD_SET with DEV_INDEX then NET_NS_FD, u32 each
    got = rdmanl.build_move(seq=7, dev_index=3, netns_fd=9)
    want = (
        struct.pack("=IHHII", 32, (5 << 10) + 2, 0x1 | 0x4, 7, 0)
        + struct.pack("=HHI", 8, 1, 3)
        + struct.pack("=HHI", 8, 68, 9)
    )
    assert got == want


def test_sys_get_and_dump_request_bytes() -> None:
    assert rdmanl.build_sys_get(5) == struct.pack("=IHHII", 16, (5 << 10) + 6, 0x5, 5, 0)
    assert rdmanl.build_dev_dump(6) == struct.pack("=IHHII", 16, (5 << 10) + 1, 0x301, 6, 0)


class FakeTransport:
    def __init__(self, replies: list[bytes]) -> None:
        self.replies = list(replies)
        self.sent: list[bytes] = []

    def __call__(self, data: bytes) -> list[rdmanl.Message]:
        self.sent.append(data)
        return list(rdmanl.parse(self.replies.pop(0)))


def _ack(seq: int, code: int = 0) -> bytes:
    return nlmsg(rdmanl.NLMSG_ERROR, seq, struct.pack("=i", -code) + b"\0" * 16)


def _dev(seq: int, index: int, name: str) -> bytes:
    body = nla(rdmanl.ATTR_DEV_INDEX, struct.pack("=I", index))
    body += nla(rdmanl.ATTR_DEV_NAME, name.encode() + b"\0")
    return nlmsg(rdmanl.msg_type(rdmanl.RDMA_NLDEV_CMD_GET), seq, body)


@pytest.mark.parametrize(("value", "mode"), [(1, "shared"), (0, "exclusive")])
def test_netns_mode(value: int, mode: str) -> None:
    reply = nlmsg(rdmanl.msg_type(6), 2, nla(rdmanl.SYS_ATTR_NETNS_MODE, bytes([value])))
    client = rdmanl.RdmaNetlink(FakeTransport([reply + _ack(2)]))
    assert client.netns_mode() == mode


def test_netns_mode_unknown_without_rdma_netlink() -> None:
    def broken(data: bytes) -> list[rdmanl.Message]:
        raise IOFailure("failed to open an RDMA netlink socket: protocol not supported")

    assert rdmanl.RdmaNetlink(broken).netns_mode() is None


def test_move_finds_index_by_name_then_sends_set() -> None:
    dump = _dev(2, 1, "mlx5_0") + _dev(2, 4, "mlx5_1") + nlmsg(rdmanl.NLMSG_DONE, 2, b"\0" * 4)
    fake = FakeTransport([dump, _ack(3)])
    assert rdmanl.RdmaNetlink(fake).move("mlx5_1", 11) is True
    assert fake.sent[1] == rdmanl.build_move(3, 4, 11)


def test_move_of_invisible_device_is_false_and_sends_nothing_more() -> None:
    dump = _dev(2, 1, "mlx5_0") + nlmsg(rdmanl.NLMSG_DONE, 2, b"\0" * 4)
    fake = FakeTransport([dump])
    assert rdmanl.RdmaNetlink(fake).move("mlx5_9", 11) is False
    assert len(fake.sent) == 1


def test_move_error_names_device_and_cause() -> None:
    dump = _dev(2, 4, "mlx5_1") + nlmsg(rdmanl.NLMSG_DONE, 2, b"\0" * 4)
    fake = FakeTransport([dump, _ack(3, errno.EBUSY)])
    with pytest.raises(IOFailure, match=r"mlx5_1.*busy"):
        rdmanl.RdmaNetlink(fake).move("mlx5_1", 11)


def test_parse_rejects_truncated_header_length() -> None:
    with pytest.raises(IOFailure):
        list(rdmanl.parse(struct.pack("=IHHII", 4, 1, 0, 0, 0)))
