"""The adapter on a kernel that ignores dump filters (before Linux 4.20, no
``NETLINK_GET_STRICT_CHK``): the same answers as with strict dumps, because the callers
filter what they read. Oracle: the same port calls through a channel whose socket never
asked for strict checking, in one throwaway netns; the raw dumps show that the filter
was in fact ignored there."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.netns import ip

from rdma_cni.adapters import netns
from rdma_cni.adapters.netlink import Netlink
from rdma_cni.adapters.rtnl import RTM_GETADDR, RTM_GETROUTE, Channel, ifaddrmsg, rtmsg

pytestmark = pytest.mark.root
AF_INET = socket.AF_INET
TABLE = 100


def _unfiltered() -> Channel:
    """A channel as an older kernel serves it: the socket never sets strict checking."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                         socket.NETLINK_ROUTE)
    sock.bind((0, 0))
    return Channel(sock)


@pytest.fixture
def ports() -> Iterator[tuple[Netlink, Netlink, Channel, Channel]]:
    ns = f"rcuf{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    home = netns.host_fd()
    fd = netns.open_netns(f"/run/netns/{ns}")
    made: list[Netlink] = []
    try:
        ip(ns, "link", "add", "rnic0", "type", "veth", "peer", "name", "rnic1")
        for dev, addr in (("rnic0", "198.51.100.1/26"), ("rnic1", "198.51.100.65/26")):
            ip(ns, "addr", "add", addr, "dev", dev)
            ip(ns, "link", "set", dev, "up")
        ip(ns, "route", "add", "203.0.113.0/24", "via", "198.51.100.2", "dev", "rnic0",
            "table", str(TABLE))
        ip(ns, "route", "add", "192.0.2.0/24", "via", "198.51.100.66", "dev", "rnic1",
            "table", str(TABLE))
        with netns.entered(fd, home):
            strict, loose = Channel(), _unfiltered()
        made = [Netlink(strict, "strict"), Netlink(loose, "unfiltered")]
        yield made[0], made[1], strict, loose
    finally:
        for port in made:
            port.close()
        os.close(fd)
        os.close(home)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_unfiltered_dumps_give_the_same_answers(
        ports: tuple[Netlink, Netlink, Channel, Channel]) -> None:
    strict, loose, strict_chan, loose_chan = ports
    rnic0, rnic1 = strict.require("rnic0").index, strict.require("rnic1").index
    calls: list[tuple[str, Callable[[Netlink], Any]]] = [
        ("addresses of rnic0", lambda p: p.addresses(rnic0)),
        ("addresses of rnic1", lambda p: p.addresses(rnic1)),
        ("every address", lambda p: p.addresses()),
        ("addresses of a link that is gone", lambda p: p.addresses(rnic1 + 1000)),
        ("routes of the table", lambda p: p.routes(TABLE)),
        ("routes of the table via rnic1", lambda p: p.routes(TABLE, rnic1)),
        ("main table via rnic0", lambda p: p.routes(254, rnic0)),
        ("an empty table", lambda p: p.routes(TABLE + 1)),
        ("rules", lambda p: p.rules()),
        ("links", lambda p: sorted((lk.name, lk.index) for lk in p.links())),
    ]
    for what, call in calls:
        assert call(loose) == call(strict), what
    assert sorted(r.dst for r in strict.routes(TABLE)) == ["192.0.2.0/24", "203.0.113.0/24"]
    assert [r.dst for r in strict.routes(TABLE, rnic1)] == ["192.0.2.0/24"]
    assert strict.addresses(rnic1 + 1000) == []
    # the fallback was exercised: the kernel filtered one dump and not the other
    by_link = {"family": AF_INET, "index": rnic0}
    assert len(strict_chan.dump(ifaddrmsg, RTM_GETADDR, **by_link)) == 1
    assert len(loose_chan.dump(ifaddrmsg, RTM_GETADDR, **by_link)) == 2
    table = [("RTA_TABLE", TABLE)]
    assert len(loose_chan.dump(rtmsg, RTM_GETROUTE, table, family=AF_INET)) > \
        len(strict_chan.dump(rtmsg, RTM_GETROUTE, table, family=AF_INET, table=TABLE))
