"""The node's own NIC stays with the node.

A RoCE-capable NIC can also be the node's primary NIC: the one that carries its
default route, or holds its address (the kubelet's InternalIP, the DaemonSet's
``status.hostIP``, written into the entry as ``nodeIPs`` by ``install --node-ip``).
Moved into a pod (exclusive) or shared with pods, it would cut the node off or put pod
traffic on the node's own interface, so it is never offered: discovery leaves it out,
and a config that names it in ``devices`` is refused in one line.

"The default route" is the main table's default route of the lowest metric, per
family: the IPv4 one (``0.0.0.0/0``) and the IPv6 one (``::/0``, lowest metric among
the IPv6 default routes), so an IPv6-only node's NIC is found too. A multi-NIC host whose
DHCP gives every NIC a default route of its own metric keeps its other NICs. Only the
candidate NICs' default routes are read (the kernel filters the dump by interface), and
the main table's only when one of them has a default route at all, so ADD pays a few
small netlink requests, not a dump of every route. The node's addresses (``nodeIPs``)
are matched in either family. A default route through an upper device of a NIC (a VLAN
on it) is not seen; ``nodeIPs`` on such a device is not either.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence

from rdma_cni.errors import ConfigError
from rdma_cni.vocab.netlink import Link, Route
from rdma_cni.vocab.nic import Nic
from rdma_cni.vocab.ports import L3View, NetlinkPort

#: (candidate netdevs, nodeIPs) -> the node's own NICs among them, and why
PrimaryReader = Callable[[Sequence[str], Sequence[str]], Mapping[str, str]]


def primary_nics(nl: NetlinkPort, names: Iterable[str],
                 node_ips: Sequence[str] = ()) -> dict[str, str]:
    """Of ``names``, the node's own NICs: netdev -> why (for the messages)."""
    links = {n: link for n in dict.fromkeys(names) if (link := nl.link(n)) is not None}
    if not links:
        return {}
    out = _default_route_nics(nl, links)
    wanted = {ipaddress.ip_address(ip) for ip in node_ips}
    for name, link in links.items() if wanted else ():
        if name in out:  # already the node's: its addresses need not be read
            continue
        held = [ip for a in nl.addrs(link.index)
                if (ip := ipaddress.ip_interface(a.cidr).ip) in wanted]
        if held:
            out[name] = f"holds the node's address {held[0]}"
    return out


def host_primary(names: Sequence[str], node_ips: Sequence[str] = ()) -> dict[str, str]:
    """:func:`primary_nics` of this netns (the device plugin, the exporter)."""
    from rdma_cni.adapters.netlink import Netlink

    nl = Netlink.here()
    try:
        return primary_nics(nl, names, node_ips)
    finally:
        nl.close()


def _default_route_nics(nl: L3View, links: Mapping[str, Link]) -> dict[str, str]:
    """Candidates that carry a default route the node uses: per family, the main table's
    default route of the lowest metric (a NIC's own default route of a higher metric, as
    DHCP gives every NIC of a multi-NIC host, is not the node's). The main table's
    default routes are read only when a candidate has one at all."""
    own = {name: _lowest(nl.default_routes(oif=link.index)) for name, link in links.items()}
    if not any(own.values()):
        return {}
    best = _lowest(nl.default_routes())
    return {name: "carries the node's default route" for name, metric in own.items()
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
