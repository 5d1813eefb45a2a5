"""The node's own NIC stays with the node.

A RoCE-capable NIC can also be the node's primary NIC: the one that carries its
default route, or holds its address (the kubelet's InternalIP, the DaemonSet's
``status.hostIP``, written into the entry as ``nodeIPs`` by ``install --node-ip``).
Moved into a pod (exclusive) or shared with pods, it would cut the node off or put pod
traffic on the node's own interface, so it is never offered: discovery leaves it out,
and a config that names it in ``devices`` is refused in one line.

"The default route" is the main table's default route of the lowest metric, per
family: the IPv4 one (``0.0.0.0/0``) and the IPv6 one (``::/0``), so an IPv6-only
node's NIC is found too; every nexthop of a multipath default route is the node's. A
multi-NIC host whose DHCP gives every NIC a default route of its own metric keeps its
other NICs. The node's addresses (``nodeIPs``) are matched in either family. A default
route through an upper device of a NIC (a VLAN on it) is not seen; ``nodeIPs`` on such
a device is not either.

What it costs does not grow with the NICs: the kernel's own lookup (``ip route get
fibmatch``, Linux >= 4.13) of one reserved destination per family (:data:`PROBES`)
names the default route the node uses, with every nexthop's link, and the lookup of
each node address its local route, through the link that holds it; the links found are
read by index (typically four requests in all, eight NICs or one). A lookup that does
not settle it is answered per NIC as before (each candidate's default routes, its
addresses): a route more specific than ``/0`` covers the probe (a VPN's ``0.0.0.0/1``),
a policy rule leads to another table, a reject route, a default route learnt from
router advertisements (every NIC that hears them gets one, all of one metric); an
address without a local route of its link (tentative, kept on a link that is down) or
on the loopback. The lookup answers for the route the kernel uses, which is the lowest
metric's but for these: of default routes of the same lowest metric (IPv4 ``ip route
append``, or another TOS) it sees the first only, and of two links holding the same
node address, one; a default route the kernel skips (``ignore_routes_with_linkdown``
without carrier) or a rule that skips the main table (``suppress_prefixlength 0``)
without leading elsewhere leaves it unseen.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence

from rdma_cni.errors import ConfigError
from rdma_cni.vocab.netlink import (
    RT_TABLE_LOCAL,
    RT_TABLE_MAIN,
    RTN_LOCAL,
    RTN_UNICAST,
    RTPROT_RA,
    Link,
    NetlinkFailure,
    Route,
)
from rdma_cni.vocab.nic import Nic
from rdma_cni.vocab.ports import L3View, NetlinkPort

#: (candidate netdevs, nodeIPs) -> the node's own NICs among them, and why
PrimaryReader = Callable[[Sequence[str], Sequence[str]], Mapping[str, str]]
#: per IP version, a destination no node routes more specifically than its default
#: route (reserved: class E, the documentation prefix): the kernel's lookup of it finds
#: the default route the node uses
PROBES = {4: "240.0.0.1", 6: "2001:db8:ffff:ffff::1"}
DEFAULT = "carries the node's default route"
LOOPBACK = 1  # the loopback's link index, in every netns
_UNSURE = Route("", None, None, 0)


def primary_nics(nl: NetlinkPort, names: Iterable[str],
                 node_ips: Sequence[str] = ()) -> dict[str, str]:
    """Of ``names``, the node's own NICs: netdev -> why (for the messages)."""
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return {}
    why: dict[int, str] = {}  # link index -> why, the default route's first
    unsure: list[int] = []  # IP versions whose default route the lookup did not settle
    for version, probe in PROBES.items():
        found = _lookup(nl, probe)
        if found is None:
            continue  # nothing routes it: no default route of this family
        if _settled_default(found):
            why.update((i, DEFAULT) for i in found.devices if i not in why)
        else:
            unsure.append(version)
    ips = [ipaddress.ip_address(ip) for ip in dict.fromkeys(node_ips)]
    unheld = []
    for ip in ips:
        found = _lookup(nl, str(ip))
        if found is not None and _settled_local(found, ip):
            why.update((i, f"holds the node's address {ip}") for i in found.devices
                       if i not in why)
        else:
            unheld.append(ip)
    if not unsure and not unheld:
        return _named(nl, why, wanted)
    return _per_nic(nl, why, wanted, unsure, unheld)


def _lookup(nl: L3View, dst: str) -> Route | None:
    """The kernel's route to ``dst``; a reject route (or a refusal): not settled."""
    try:
        return nl.route_match(dst)
    except NetlinkFailure:
        return _UNSURE


def _settled_default(r: Route) -> bool:
    """Whether the route a probe matched is the main table's default route the node uses
    (not a more specific one, another table's, a reject route, or one of the same-metric
    routes router advertisements give every NIC)."""
    return (r.table == RT_TABLE_MAIN and r.dst.endswith("/0") and r.type == RTN_UNICAST
            and r.proto != RTPROT_RA and bool(r.devices))


def _settled_local(r: Route, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether the route a node address matched is its local route (the link holding it;
    IPv4 names the main table for it until a policy rule is added: the kernel keeps the
    local table's routes in the main table's trie till then). A local route through the
    loopback is not taken for it: a kernel without FIB_MATCH answers with the route a
    packet to the address takes, through the loopback."""
    return (r.table in (RT_TABLE_LOCAL, RT_TABLE_MAIN) and r.type == RTN_LOCAL
            and bool(r.devices) and LOOPBACK not in r.devices
            and ipaddress.ip_network(r.dst) == ipaddress.ip_network(ip))


def _named(nl: NetlinkPort, why: Mapping[int, str], wanted: Sequence[str]) -> dict[str, str]:
    """``why`` by link name, of the links among ``wanted`` (each link read by index)."""
    found = {link.name: why[i] for i in why if (link := nl.link_at(i)) is not None}
    return {name: found[name] for name in wanted if name in found}


def _per_nic(nl: NetlinkPort, why: Mapping[int, str], wanted: Sequence[str],
             unsure: Sequence[int], unheld: Sequence[ipaddress.IPv4Address |
                                                     ipaddress.IPv6Address]) -> dict[str, str]:
    """What the lookups did not settle, read per candidate NIC: the default routes of the
    ``unsure`` IP versions, the addresses ``unheld``."""
    links = {n: link for n in wanted if (link := nl.link(n)) is not None}
    out = {name: why[link.index] for name, link in links.items() if link.index in why}
    if unsure:
        out.update((name, DEFAULT) for name in _default_route_nics(nl, links, unsure))
    for name, link in links.items() if unheld else ():
        if name in out:  # already the node's: its addresses need not be read
            continue
        held = [ip for a in nl.addrs(link.index)
                if (ip := ipaddress.ip_interface(a.cidr).ip) in unheld]
        if held:
            out[name] = f"holds the node's address {held[0]}"
    return {name: out[name] for name in wanted if name in out}


def host_primary(names: Sequence[str], node_ips: Sequence[str] = ()) -> dict[str, str]:
    """:func:`primary_nics` of this netns (the device plugin, the exporter)."""
    from rdma_cni.adapters.netlink import Netlink

    nl = Netlink.here()
    try:
        return primary_nics(nl, names, node_ips)
    finally:
        nl.close()


def _default_route_nics(nl: L3View, links: Mapping[str, Link],
                        versions: Sequence[int]) -> set[str]:
    """Candidates that carry a default route of ``versions`` the node uses: per family,
    the main table's default route of the lowest metric (a NIC's own default route of a
    higher metric, as DHCP gives every NIC of a multi-NIC host, is not the node's). The
    main table's default routes are read only when a candidate has one at all."""
    own = {name: _lowest(r for r in nl.default_routes(oif=link.index) if r.version in versions)
           for name, link in links.items()}
    if not any(own.values()):
        return set()
    best = _lowest(nl.default_routes())
    return {name for name, metric in own.items()
            if any(best.get(family) == m for family, m in metric.items())}


def _lowest(routes: Iterable[Route]) -> dict[int, int]:
    """IP version -> the lowest metric among ``routes``."""
    out: dict[int, int] = {}
    for r in routes:
        out[r.version] = min(out.get(r.version, r.priority), r.priority)
    return out


def keep_off(nics: Sequence[Nic], primary: Mapping[str, str], pinned: bool) -> list[Nic]:
    """``nics`` without the node's own; a pinned list naming one is refused."""
    if pinned:
        for nic in nics:
            if nic.netdev in primary:
                raise ConfigError(
                    f"invalid config: devices names {nic.netdev}, which {primary[nic.netdev]}: "
                    "the node's own NIC is never given to pods (remove it from devices)")
    return [n for n in nics if n.netdev not in primary]
