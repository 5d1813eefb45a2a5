"""Read what the host shows of its RDMA NICs into plain facts for the planner."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv4Interface

from rdma_cni.datapath.plan import NicFacts
from rdma_cni.datapath.port import Link, NetlinkPort, Route
from rdma_cni.errors import NicUnavailable
from rdma_cni.node.discovery import Nic

RTPROT_KERNEL = 2


def nic_facts(nl: NetlinkPort, names: Iterable[str],
              rdma: dict[str, Nic]) -> tuple[dict[str, NicFacts], set[IPv4Address]]:
    """The planner's facts of each named NIC, and every IPv4 address of the host (one
    address dump serves both)."""
    wanted = list(dict.fromkeys(names))
    # one RTM_GETLINK per NIC: a dump would decode every link of the node (pod veths too)
    found = {n: nl.link(n) for n in wanted}
    links = {n: link for n, link in found.items() if link is not None}
    missing = [n for n in wanted if n not in links]
    if missing:
        raise NicUnavailable(f"RDMA NIC {', '.join(missing)} not found on the host")
    addrs = nl.addresses()
    out = {}
    for name in wanted:
        link = links[name]
        own = tuple(sorted((a for i, a in addrs if i == link.index), key=lambda a: a.ip))
        # the NIC's routes (of the main table, through it: the kernel filters the dump),
        # but not the connected ones the kernel makes from its addresses
        through = [r for r in nl.routes(oif=link.index) if r.gateway or r.proto != RTPROT_KERNEL]
        out[name] = _facts(link, own, through, rdma.get(name))
    return out, {a.ip for _, a in addrs}


def _facts(link: Link, addresses: tuple[IPv4Interface, ...], via: Sequence[Route],
           nic: Nic | None) -> NicFacts:
    gws = [r for r in via if r.gateway]
    default = [r.gateway for r in gws if r.dst == "0.0.0.0/0"]
    gateway = default[0] if default else (gws[0].gateway if gws else None)
    return NicFacts(
        name=link.name, index=link.index, mtu=link.mtu, mac=link.mac, up=link.up,
        addresses=addresses, gateway=IPv4Address(gateway) if gateway else None,
        routes=tuple((r.dst, r.gateway) for r in via),
        host_routes=tuple((r.dst, r.gateway, r.proto, r.priority, r.onlink) for r in via),
        pci=link.parent_dev if link.parent_bus == "pci" else (nic.pci if nic else None),
        parent_dev=link.parent_dev,
        perm_mac=link.perm_mac, ibdev=nic.ibdev if nic else None,
    )
