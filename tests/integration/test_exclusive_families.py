"""exclusive: the NIC goes into the pod and comes back with its configuration of every
family, as it was: IPv4 addresses (the primary of a subnet first, labels), IPv6
addresses with their flags and lifetimes, routes of both families in every table that
names it, and its IPv6 address generation mode (the link-local address the kernel
makes, or none). The pod gets the same addresses and its main-table IPv6 routes.

Oracle: ``ip -j`` of every family; the rig compares the whole node netns
(tests/cnirunner.py ``snapshot``: every family, every table) before ADD and after DEL.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from cnirunner import ip_json, rdma_blocks, sh

pytestmark = pytest.mark.root
PLUGIN_RUNNER = "binary"

GW = "198.51.100.62"
V6 = "2001:db8:7::5/64"
V6_NODAD = "2001:db8:8::5/64"
V6_NET = "2001:db8:9::/48"
V6_GW = "2001:db8:7::1"
LIFETIME = 3600


def _configure(rig, mode: str) -> None:  # type: ignore[no-untyped-def]
    """rnic0 as a node would have it: two IPv4 addresses of one subnet (primary, then a
    labelled secondary), two IPv6 ones (one with a finite lifetime, one nodad and
    noprefixroute), routes of both families in main and in table 123."""
    ns = rig.node.ns
    rig.nic("rnic0", "198.51.100.3/26", None, up=False)
    sh("ip", "-n", ns, "link", "set", "dev", "rnic0", "addrgenmode", mode)
    sh("ip", "-n", ns, "addr", "add", "198.51.100.1/26", "dev", "rnic0", "label", "rnic0:s")
    sh("ip", "-n", ns, "link", "set", "dev", "rnic0", "up")
    sh("ip", "-n", ns, "addr", "add", V6, "dev", "rnic0", "valid_lft", str(LIFETIME),
       "preferred_lft", "1800")
    sh("ip", "-n", ns, "addr", "add", V6_NODAD, "dev", "rnic0", "nodad", "noprefixroute")
    sh("ip", "-n", ns, "route", "add", "198.18.0.0/15", "via", GW, "dev", "rnic0")
    sh("ip", "-n", ns, "route", "add", "203.0.113.0/24", "via", GW, "dev", "rnic0",
       "table", "123")
    sh("ip", "-n", ns, "-6", "route", "add", V6_NET, "via", V6_GW, "dev", "rnic0",
       "metric", "77")
    sh("ip", "-n", ns, "-6", "route", "add", "2001:db8:a::/48", "via", V6_GW, "dev", "rnic0",
       "table", "123")


def _addrs(ns: str, dev: str) -> list[dict[str, Any]]:
    return [a for lk in ip_json(ns, "addr", "show", "dev", dev) for a in lk["addr_info"]]


def _wait_no_tentative(ns: str, dev: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The addresses of ``dev`` once none is tentative: DAD ends, it is not stuck."""
    deadline = time.monotonic() + timeout
    while True:
        addrs = _addrs(ns, dev)
        if not any(a.get("tentative") for a in addrs):
            return addrs
        assert time.monotonic() < deadline, f"stuck in DAD: {addrs}"
        time.sleep(0.05)


def _global(addrs: list[dict[str, Any]]) -> list[str]:
    return [f"{a['local']}/{a['prefixlen']}" for a in addrs if a["scope"] == "global"]


@pytest.mark.parametrize("mode", ["eui64", "none"])
def test_every_family_comes_back_as_it_was(rig, built_binary, mode: str) -> None:
    _configure(rig, mode)
    _wait_no_tentative(rig.node.ns, "rnic0")
    pod = rig.pod()
    chain = rig.chain("exclusive", binary=built_binary)
    t0 = time.monotonic()
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 0, run

    # the pod: the same addresses in the same order, flags and lifetimes; its IPv6 routes
    inside = _wait_no_tentative(pod.name, "eth1")
    assert _global(inside) == ["198.51.100.3/26", "198.51.100.1/26", V6_NODAD, V6], inside
    v4, v6 = inside[1], next(a for a in inside if a["local"] == V6.split("/")[0])
    assert v4.get("secondary") and v4["label"] == "eth1:s", v4
    nodad = next(a for a in inside if a["local"] == V6_NODAD.split("/")[0])
    assert nodad.get("nodad") and nodad.get("noprefixroute"), nodad
    assert LIFETIME - 30 < v6["valid_life_time"] <= LIFETIME, v6
    assert any(r["dst"] == V6_NET and r.get("gateway") == V6_GW and r["metric"] == 77
               for r in ip_json(pod.name, "-6", "route", "show", "dev", "eth1"))
    link_local = [a for a in inside if a["family"] == "inet6" and a["scope"] == "link"]
    assert bool(link_local) == (mode == "eui64"), inside

    assert chain.delete("c1").rc == 0
    # back on the node: not stuck in DAD, the finite lifetime still counting down from
    # where it was, and the whole node netns (every family, every table) as before
    home = _wait_no_tentative(rig.node.ns, "rnic0")
    v6 = next(a for a in home if a["local"] == V6.split("/")[0])
    assert LIFETIME - (time.monotonic() - t0) - 30 < v6["valid_life_time"] <= LIFETIME, v6
    assert rig.node_changes() == {}


def test_a_pod_with_ipv6_disabled_gets_the_ipv4_part_and_the_node_all(rig, built_binary
                                                                      ) -> None:
    """A pod netns whose links get IPv6 disabled (``default.disable_ipv6=1``, as some
    clusters set): ADD succeeds with the NIC's IPv4 addresses and routes (the IPv6 ones
    are logged as not added), and DEL gives the node back every family."""
    _configure(rig, "eui64")
    _wait_no_tentative(rig.node.ns, "rnic0")
    pod = rig.pod()
    sh("ip", "netns", "exec", pod.name, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
    chain = rig.chain("exclusive", binary=built_binary)
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert _global(_addrs(pod.name, "eth1")) == ["198.51.100.3/26", "198.51.100.1/26"]
    assert "IPv6 is disabled there" in rig.log_file.read_text()
    assert chain.delete("c1").rc == 0
    _wait_no_tentative(rig.node.ns, "rnic0")
    assert rig.node_changes() == {}
