"""The node's own NICs (rdma_cni/node/primary.py) as the kernel has them set up: in a
throwaway node netns with four veth stand-in NICs, each case sets up routes, rules and
addresses with iproute2, and :func:`primary_nics` must answer what iproute2 shows (the
main table's unicast default routes of the lowest metric per family, every nexthop of a
multipath one; the candidates holding a node address). Where the kernel's lookup settles
it, the answer costs a few netlink requests whatever the number of NICs."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.netns import ip, ip_json

from rdma_cni.adapters import netns
from rdma_cni.adapters.netlink import Netlink
from rdma_cni.node.primary import primary_nics

pytestmark = pytest.mark.root
NICS = ("nic0", "nic1", "nic2", "nic3")
V4 = {"nic0": "192.0.2.10/24", "nic1": "198.51.100.10/24", "nic2": "203.0.113.10/24",
      "nic3": "198.18.0.10/24"}
GW4 = {"nic0": "192.0.2.1", "nic1": "198.51.100.1", "nic2": "203.0.113.1",
       "nic3": "198.18.0.1"}
V6 = {n: f"2001:db8:{i + 1}::10/64" for i, n in enumerate(NICS)}
GW6 = {n: f"2001:db8:{i + 1}::1" for i, n in enumerate(NICS)}
DEFAULT = "carries the node's default route"
#: the requests of a settled answer without node addresses: two lookups, a link read by
#: index or two (a node address adds its lookup, and its link if another)
SETTLED = 4


class Node:
    def __init__(self, name: str) -> None:
        self.ns = name
        self.requests = 0

    def ip(self, *args: str) -> None:
        ip(self.ns, *args)

    def expected(self, node_ips: tuple[str, ...]) -> dict[str, str]:
        """What iproute2 shows: per family, the devices of the main table's unicast
        default routes of the lowest metric; then the candidates holding a node address."""
        out: dict[str, str] = {}
        for family in ("-4", "-6"):
            routes = [r for r in ip_json(self.ns, family, "route", "show", "table", "main")
                      if r["dst"] == "default" and r.get("type", "unicast") == "unicast"]
            if not routes:
                continue
            best = min(r.get("metric", 0) for r in routes)
            for r in routes:
                if r.get("metric", 0) == best:
                    for hop in r.get("nexthops", [r]):
                        if hop["dev"] in NICS:
                            out.setdefault(hop["dev"], DEFAULT)
        for link in ip_json(self.ns, "addr", "show"):
            held = [a["local"] for a in link.get("addr_info", []) if a["local"] in node_ips]
            if link["ifname"] in NICS and held and link["ifname"] not in out:
                out[link["ifname"]] = f"holds the node's address {held[0]}"
        return out


@pytest.fixture
def node() -> Iterator[Node]:
    name = f"rcpl{uuid.uuid4().hex[:6]}"
    ip(None, "netns", "add", name)
    try:
        n = Node(name)
        n.ip("link", "set", "lo", "up")
        for i, nic in enumerate(NICS):
            n.ip("link", "add", nic, "type", "veth", "peer", "name", f"peer{i}")
            n.ip("link", "set", f"peer{i}", "up")
            n.ip("link", "set", nic, "up")
            n.ip("addr", "add", V4[nic], "dev", nic)
        yield n
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _answer(node: Node, node_ips: tuple[str, ...] = ()) -> dict[str, str]:
    home = netns.host_fd()
    fd = netns.open_netns(f"/run/netns/{node.ns}")
    nl = Netlink.inside(fd, home, "the node")
    exchange = nl._nl._exchange

    def counted(*args: Any) -> Any:
        node.requests += 1
        return exchange(*args)

    nl._nl._exchange = counted  # type: ignore[method-assign]
    try:
        return primary_nics(nl, NICS, node_ips)
    finally:
        nl.close()
        os.close(fd)
        os.close(home)


def _v6(node: Node, *nics: str) -> None:
    for nic in nics:
        node.ip("-6", "addr", "add", V6[nic], "dev", nic, "nodad")


def _default(node: Node, nic: str, metric: int, family: int = 4) -> None:
    gw = GW4[nic] if family == 4 else GW6[nic]
    node.ip(f"-{family}", "route", "add", "default", "via", gw, "dev", nic, "metric", str(metric))


def _check(node: Node, want: dict[str, str], node_ips: tuple[str, ...] = ()) -> int:
    """The answer is what iproute2 shows, and ``want``; the requests it took."""
    assert node.expected(node_ips) == want
    node.requests = 0
    assert _answer(node, node_ips) == want
    return node.requests


def test_of_default_routes_of_different_metrics_the_lowest_is_the_nodes(node: Node) -> None:
    _v6(node, "nic0", "nic2", "nic3")
    _default(node, "nic0", 200)
    _default(node, "nic1", 100)
    _default(node, "nic2", 300, family=6)
    _default(node, "nic3", 50, family=6)
    _default(node, "nic0", 20, family=6)
    assert _check(node, {"nic0": DEFAULT, "nic1": DEFAULT}) <= SETTLED


def test_a_slash_one_pair_is_not_the_default_route(node: Node) -> None:
    """0.0.0.0/1 and 128.0.0.0/1 (a VPN's) cover the lookup's destination: the main
    table's default route still decides."""
    _default(node, "nic0", 100)
    for half in ("0.0.0.0/1", "128.0.0.0/1"):
        node.ip("route", "add", half, "via", GW4["nic1"], "dev", "nic1")
    _check(node, {"nic0": DEFAULT})


def test_every_nexthop_of_a_multipath_default_route_is_the_nodes(node: Node) -> None:
    _v6(node, "nic2", "nic3")
    node.ip("route", "add", "default", "metric", "50", "nexthop", "via", GW4["nic0"], "dev",
            "nic0", "nexthop", "via", GW4["nic1"], "dev", "nic1")
    node.ip("-6", "route", "add", "default", "metric", "50", "nexthop", "via", GW6["nic2"],
            "dev", "nic2", "nexthop", "via", GW6["nic3"], "dev", "nic3")
    want = dict.fromkeys(NICS, DEFAULT)
    assert _check(node, want) <= 2 + len(NICS)  # the lookups and each link by index


def test_a_dead_or_linkdown_nexthop_still_counts(node: Node) -> None:
    """A multipath default route keeps the nexthop of a link that went down (dead); a
    route through a link without carrier (linkdown) is still the node's."""
    node.ip("route", "add", "default", "metric", "50", "nexthop", "via", GW4["nic0"], "dev",
            "nic0", "nexthop", "via", GW4["nic1"], "dev", "nic1")
    node.ip("link", "set", "nic1", "down")
    _v6(node, "nic2")
    _default(node, "nic2", 10, family=6)
    node.ip("link", "set", "peer2", "down")  # nic2 loses its carrier
    assert _check(node, {"nic0": DEFAULT, "nic1": DEFAULT, "nic2": DEFAULT}) <= SETTLED + 1


def test_an_ipv6_only_default_route(node: Node) -> None:
    _v6(node, "nic3")
    _default(node, "nic3", 1024, family=6)
    assert _check(node, {"nic3": DEFAULT}) <= SETTLED


def test_node_addresses_held_by_candidates_in_either_family(node: Node) -> None:
    _v6(node, "nic3")
    ips = ("198.51.100.10", "2001:db8:4::10")
    assert _check(node, {"nic1": f"holds the node's address {ips[0]}",
                         "nic3": f"holds the node's address {ips[1]}"}, ips) <= 2 + 2 + 2


def test_node_addresses_without_a_local_route_are_still_found(node: Node) -> None:
    """An IPv6 address on a link that is down stays tentative (no local route yet); an
    IPv4 one keeps its local route."""
    node.ip("link", "set", "nic2", "down")
    node.ip("-6", "addr", "add", V6["nic2"], "dev", "nic2")
    node.ip("link", "set", "nic0", "down")
    ips = ("2001:db8:3::10", "192.0.2.10")
    _check(node, {"nic2": f"holds the node's address {ips[0]}",
                  "nic0": f"holds the node's address {ips[1]}"}, ips)


def test_no_default_route_at_all(node: Node) -> None:
    assert _check(node, {}) <= 2


def test_a_policy_rule_to_another_table_does_not_decide(node: Node) -> None:
    """A rule before main leads the lookup to table 100 (its default route through nic2):
    the main table's default route is still the node's."""
    _default(node, "nic0", 100)
    node.ip("route", "add", "default", "via", GW4["nic2"], "dev", "nic2", "table", "100")
    node.ip("rule", "add", "pref", "100", "lookup", "100")
    _check(node, {"nic0": DEFAULT})


def test_a_reject_default_route_of_a_lower_metric_is_not_one(node: Node) -> None:
    _default(node, "nic1", 100)
    node.ip("route", "add", "unreachable", "default", "metric", "10")
    _check(node, {"nic1": DEFAULT})


def test_router_advertisement_routes_are_read_per_nic(node: Node) -> None:
    """Default routes learnt from router advertisements: every NIC that hears them has
    one of the same metric, all the node's."""
    _v6(node, "nic1", "nic2")
    for nic, gw in (("nic1", "fe80::1"), ("nic2", "fe80::2")):
        node.ip("-6", "route", "append", "default", "via", gw, "dev", nic, "proto", "ra",
                "metric", "1024")
    _check(node, {"nic1": DEFAULT, "nic2": DEFAULT})
