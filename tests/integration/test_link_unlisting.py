"""A pod's links are deleted and the call returns once the kernel has unlisted them
(rdma_cni/adapters/rtnlunlist.py): the links, their addresses and routes are gone from
the netns when ``delete_links`` returns, while the kernel's own wait before freeing them
(the system's RCU callbacks, tens of milliseconds) goes on in a thread of its own that
ends by itself and leaves no descriptor behind. Only the kernel's notification counts,
and a link found again under its index makes the call wait for the request's answer."""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.netns import ip, ip_json

from rdma_cni.adapters import netns, rtnlunlist
from rdma_cni.adapters.netlink import Netlink

pytestmark = pytest.mark.root
THREAD = "rdma-cni-dellink"


@dataclass
class Pod:
    name: str
    fd: int
    home: int
    port: Netlink


@pytest.fixture
def pod() -> Iterator[Pod]:
    name = f"rcul{uuid.uuid4().hex[:6]}"
    ip(None, "netns", "add", name)
    fd = home = -1
    port = None
    try:
        ip(name, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        ip(name, "link", "set", "p0", "up")
        home = netns.host_fd()
        fd = netns.open_netns(f"/run/netns/{name}")
        port = Netlink.inside(fd, home, "pod")
        yield Pod(name, fd, home, port)
    finally:
        _threads_end()
        if port is not None:
            port.close()
        for f in (fd, home):
            if f >= 0:
                os.close(f)
        ip(None, "netns", "del", name)


def _macvlan(pod: Pod, name: str, addr: str) -> None:
    ip(pod.name, "link", "add", name, "link", "p0", "type", "macvlan", "mode", "bridge")
    ip(pod.name, "addr", "add", addr, "dev", name)
    ip(pod.name, "link", "set", name, "up")


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD and t.is_alive()]


def _threads_end() -> None:
    for t in _helpers():
        t.join(10)
    assert not _helpers()


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("names", [["m1"], ["m1", "m2"]], ids=["one", "a group"])
def test_the_links_are_gone_when_the_delete_returns(pod: Pod, names: list[str]) -> None:
    for i, name in enumerate(names):
        _macvlan(pod, name, f"198.51.100.{10 + i}/26")
    before = _fds()
    pod.port.delete_links(names)
    shown = {lk["ifname"] for lk in ip_json(pod.name, "link", "show")}
    addrs = ip(pod.name, "-4", "addr", "show")
    # the kernel's freeing of them is still under way (its RCU barrier: 18 to 27 ms here,
    # against 0.4 ms for the unlisting) on the request's own thread
    still = _helpers()
    assert shown == {"lo", "p0", "p1"}
    assert "198.51.100." not in addrs
    assert still, "delete_links waited for the kernel's freeing of the links"
    _threads_end()
    assert _fds() == before


def test_a_refusal_is_the_request_s(pod: Pod) -> None:
    before = _fds()
    with pytest.raises(OSError) as caught:
        rtnlunlist.delete_unlisted(pod.fd, [("IFLA_IFNAME", "nope")], [4242],
                                   lambda i: pod.port.link_at(i) is None)
    assert caught.value.errno == errno.ENODEV
    assert not _helpers()
    assert _fds() == before


def test_a_link_found_again_under_its_index_waits_for_the_answer(pod: Pod) -> None:
    _macvlan(pod, "m1", "198.51.100.10/26")
    index = pod.port.require("m1").index
    rtnlunlist.delete_unlisted(pod.fd, [("IFLA_IFNAME", "m1")], [index], lambda i: False)
    assert not _helpers()
    assert "m1" not in {lk["ifname"] for lk in ip_json(pod.name, "link", "show")}


def _dellink_notice(index: int, family: int = socket.AF_UNSPEC) -> bytes:
    body = struct.pack("=BxHiII", family, 1, index, 0, 0)
    return struct.pack("=IHHII", 16 + len(body), 17, 0, 0, 0) + body


def test_a_process_s_notification_is_not_the_kernel_s(pod: Pod) -> None:
    """A process in the pod with CAP_NET_ADMIN can multicast an RTM_DELLINK of its own to
    the link group; the watch ignores what does not come from the kernel (port id 0)."""
    with netns.entered(pod.fd, pod.home):
        listener = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        forger = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    done_r, done_w = os.pipe()
    try:
        listener.bind((0, rtnlunlist.RTMGRP_LINK))
        forger.bind((0, 0))
        seen: list[bool] = []
        watch = threading.Thread(target=lambda: seen.append(
            rtnlunlist._watch(listener, done_r, {4242})))
        watch.start()
        forger.sendto(_dellink_notice(4242), (0, rtnlunlist.RTMGRP_LINK))
        time.sleep(0.2)  # time for a watch that took it to return
        assert not seen, "a process's notification was taken for the kernel's"
        os.write(done_w, b"x")
        watch.join(5)
        assert seen == [False]
    finally:
        for s in (listener, forger):
            s.close()
        os.close(done_r)
        os.close(done_w)


def test_only_a_link_s_own_deletion_notice_counts() -> None:
    """A bridge's notice that a port left it (AF_BRIDGE) is an RTM_DELLINK of a link that
    stays; several notices in one datagram are all read."""
    data = _dellink_notice(5) + _dellink_notice(6, socket.AF_BRIDGE) + _dellink_notice(7)
    assert rtnlunlist._deleted_indexes(data) == [5, 7]


def test_no_thread_for_it_deletes_the_links_the_plain_way(
        pod: Pod, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pids limit refuses the thread: the port sends the request itself and waits."""
    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    _macvlan(pod, "m1", "198.51.100.10/26")
    before = _fds()
    monkeypatch.setattr(threading.Thread, "start", refused)
    pod.port.delete_links(["m1"])
    monkeypatch.undo()
    assert "m1" not in {lk["ifname"] for lk in ip_json(pod.name, "link", "show")}
    assert _fds() == before


def test_a_thread_that_cannot_enter_the_netns_sends_nothing(pod: Pod, tmp_path: Path) -> None:
    _macvlan(pod, "m1", "198.51.100.10/26")
    index = pod.port.require("m1").index
    before = _fds()
    with open(tmp_path / "not-a-netns", "w") as f, pytest.raises(rtnlunlist.SetupError):
        rtnlunlist.delete_unlisted(f.fileno(), [("IFLA_IFNAME", "m1")], [index],
                                   lambda i: False)
    assert not _helpers()
    assert _fds() == before
    assert "m1" in {lk["ifname"] for lk in ip_json(pod.name, "link", "show")}


def test_descriptors_past_1024_are_watched(pod: Pod) -> None:
    """A busy `serve` (hundreds of connections) hands the watch descriptors select()
    cannot take."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 1200:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = []
    try:
        while len(_fds()) < 1100:
            filler.append(os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC))
        _macvlan(pod, "m1", "198.51.100.10/26")
        pod.port.delete_links(["m1"])
        assert "m1" not in {lk["ifname"] for lk in ip_json(pod.name, "link", "show")}
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
