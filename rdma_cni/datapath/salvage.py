"""DEL of an attachment whose state record is unreadable (hand-edited, truncated,
larger than any release reads): rebuild what teardown needs from what is left.

The store still holds the key's reservations and NIC claims (they are never freed
while the record is unreadable), and every link ADD made carries the alias
``rdma-cni:<digest>``. From those this builds a state record that
:func:`rdma_cni.datapath.teardown.teardown` undoes like any other:

- a sub-interface (macvlan/ipvlan) in the pod: deleted, with the rules from its
  reserved addresses (their table read from the pod's rules);
- an exclusive NIC: the interface its claim holds (:mod:`rdma_cni.store.nics`), as ADD
  planned it from the host: teardown finds the NIC by the identity recorded there (in
  the pod, or on the host where the kernel returned it) and restores the host
  configuration recorded there, as for a readable record;
- an exclusive NIC claimed by an earlier release (no plan in its claim): a marked link
  in the pod that is a bus device (a pod makes none) under the name its claim records,
  moved back with the MTU, up-state, IPv4 addresses and main-table routes it has in the
  pod; or, the pod netns gone, a marked link on the host, renamed back, its addresses
  logged as not restored.

The mark and the names are the pod's to set: a pod with ``CAP_NET_ADMIN`` can put the
mark on a link of its own making, under the name a claim records, and give it
addresses and routes. Only a mode that moves NICs (``moves_nics``) takes anything but a
sub-interface, and then only what is proven its NIC (the claim's identity, or for an
earlier release's claim a bus device); anything else marked is left where it is, and
logged. A dummy made in the pod and marked never goes to the host, under a NIC's name
or any other.

Pure except for the reads through the netlink sessions and the store it is given.
"""

from __future__ import annotations

import logging
from ipaddress import IPv4Address, IPv4Interface
from typing import Any

from rdma_cni.datapath.physical import HOST, POD, SUBLINK_KINDS
from rdma_cni.records import replace
from rdma_cni.store.core import Store
from rdma_cni.store.records import plan_from_dict
from rdma_cni.store.state import AttachmentState, make_state
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import SALVAGED, LinkKind
from rdma_cni.vocab.netlink import RT_TABLE_MAIN, Link
from rdma_cni.vocab.plan import HostRoute, IfacePlan
from rdma_cni.vocab.ports import L3View, NetlinkPort

log = logging.getLogger("rdma_cni")
RTPROT_BOOT = 3


def _identity(link: Link, where: str) -> dict[str, Any]:
    """The link's identity as ADD records it (its index in ``where``): the link found by
    our mark is the one."""
    return {"pci": None, "parentDev": link.parent_dev, "parentBus": link.parent_bus,
            "permMac": link.perm_mac, "mac": link.mac, "kind": link.kind,
            "ifindex": link.index, "ifindexNetns": where}


def _tables(nl: L3View, priority: int) -> dict[str, int]:
    """source address -> table of our rules (at ``priority``) in ``nl``'s netns."""
    return {src.split("/")[0]: table for prio, table, src in nl.rules()
            if prio == priority and src}


def _sublink(k: int, link: Link, ips: list[IPv4Interface], tables: dict[str, int],
             nics: set[int]) -> IfacePlan:
    """A marked sub-link in the pod. Teardown deletes it only on the NIC its identity
    names (:func:`rdma_cni.datapath.sublinks.on_nic`): its lower device, when that is a
    host link ``nics`` holds, one with an address in the subnet of the link's reserved
    address (a pod's address comes from its NIC's own subnet); a marked link on any
    other (a pod's ipvlan eth0 on the node's primary NIC) is not ours."""
    table = next((tables[str(ip.ip)] for ip in ips if str(ip.ip) in tables), 0)
    ident = {"ifindex": link.iflink} if link.iflink in nics else {}
    return IfacePlan(k=k, name=link.name, tmp=link.name, nic="", kind=str(link.kind),
                     mtu=link.mtu, table=table, addresses=tuple(ips), identity=ident)


def _nics_of(host: L3View, ips: list[IPv4Interface]) -> set[int]:
    """The host links with an address in the subnet of one of ``ips``."""
    return {index for index, addr in host.addresses() if ips and
            any(ip.ip in addr.network for ip in ips)}


def _physical_in_pod(k: int, pod: L3View, link: Link, nic: str,
                     tables: dict[str, int]) -> IfacePlan:
    addrs = tuple(a for idx, a in pod.addresses(link.index) if idx == link.index)
    # ADD applies the NIC's routes in the pod "onlink" with its own protocol; the host's
    # originals are not known: give them back as `ip route add` makes them (proto boot),
    # onlink only where the gateway is outside the NIC's subnets
    routes = tuple(HostRoute(r.dst, r.gateway, RTPROT_BOOT, r.priority,
                             not any(IPv4Address(r.gateway) in a.network for a in addrs))
                   for r in pod.routes(RT_TABLE_MAIN, oif=link.index) if r.gateway)
    table = next((tables[str(a.ip)] for a in addrs if str(a.ip) in tables), 0)
    return IfacePlan(k=k, name=link.name, tmp=link.name, nic=nic, kind=LinkKind.PHYSICAL,
                     mtu=link.mtu, table=table, addresses=addrs, identity=_identity(link, POD),
                     host_mtu=link.mtu, host_up=link.up, host_routes=routes)


def _physical_on_host(k: int, link: Link, nic: str) -> IfacePlan:
    log.warning("DEL of an unreadable state record: exclusive NIC %s is back on the host as "
                "%s; its addresses and routes are not known and are not restored", nic,
                link.name)
    return IfacePlan(k=k, name=nic, tmp=nic, nic=nic, kind=LinkKind.PHYSICAL, mtu=link.mtu,
                     table=0, identity=_identity(link, HOST), host_mtu=0, host_up=link.up)


def _not_ours(link: Link, where: str) -> None:
    log.warning("DEL of an unreadable state record: link %s %s bears this attachment's mark "
                "but is no NIC it claims: left as it is", link.name, where)


def _parsed(nic: str, plan: dict[str, Any]) -> IfacePlan | None:
    """The claim's plan; one whose recorded settings (``host_link``) alone do not read,
    without them: the NIC still comes home by its identity, under its host name, with
    its addresses, routes, MTU and up-state (None: unusable)."""
    for d in (plan, {**plan, "host_link": None}):
        try:
            p = plan_from_dict(d)
        except (KeyError, ValueError, TypeError, IndexError, AttributeError):
            continue
        if d is not plan:
            log.warning("DEL of an unreadable state record: the settings the claim of "
                        "exclusive NIC %s records do not read; they are not restored", nic)
        return p
    return None


def _planned(k: int, nic: str, plan: dict[str, Any]) -> IfacePlan | None:
    """The interface the claim of ``nic`` holds (None: unusable)."""
    p = _parsed(nic, plan)
    if p is None or p.kind != LinkKind.PHYSICAL or p.nic != nic:
        return None
    if p.extra.get("hostRoutesLeft"):
        log.warning("DEL of an unreadable state record: exclusive NIC %s had more routes "
                    "than its claim keeps; they are not restored", nic)
    return replace(p, k=k)


def _real_device(link: Link) -> bool:
    """A link no pod can make: a NIC's own driver (no kind) on a bus device."""
    return link.kind is None and link.parent_dev is not None


def _claimed(store: Store, key: AttachmentKey, moves_nics: bool
             ) -> tuple[list[IfacePlan], dict[str, str]]:
    """The interfaces ``key``'s NIC claims hold (in a mode that moves NICs), and the
    claims that hold none (ifname -> netdev: an earlier release's)."""
    plans: list[IfacePlan] = []
    claims: dict[str, str] = {}
    for netdev, (ifname, plan) in sorted(store.claimed_plans(key).items()):
        p = _planned(len(plans), netdev, plan) if moves_nics and plan else None
        if p is not None:
            plans.append(p)
        else:
            claims[ifname] = netdev
    return plans, claims


def _reserved(store: Store, key: AttachmentKey) -> dict[str, list[IPv4Interface]]:
    ips: dict[str, list[IPv4Interface]] = {}
    for pool, ip, ifname in store.ips_of(key):
        prefix = pool.split("/")[1] if "/" in pool else "32"
        ips.setdefault(ifname, []).append(IPv4Interface(f"{ip}/{prefix}"))
    return ips


def rebuild(store: Store, key: AttachmentKey, pod: NetlinkPort | None, host: NetlinkPort,
            netns: str, priority: int, moves_nics: bool) -> AttachmentState:
    """A state record for teardown, built from the store and our marked links
    (``moves_nics``: the network's mode moves NICs into pods)."""
    marker = f"rdma-cni:{key.digest()}"
    plans, claims = _claimed(store, key, moves_nics)
    planned = {p.name for p in plans}
    if pod is not None:
        ips, tables = _reserved(store, key), _tables(pod, priority)
        for link in (lk for lk in pod.links() if lk.alias == marker):
            if link.kind in SUBLINK_KINDS:
                mine = ips.get(link.name, [])
                plans.append(_sublink(len(plans), link, mine, tables, _nics_of(host, mine)))
            elif moves_nics and link.name in claims and _real_device(link):
                nic = claims.pop(link.name)
                plans.append(_physical_in_pod(len(plans), pod, link, nic, tables))
            elif not (planned and (_real_device(link) or link.name in planned)):
                _not_ours(link, "in the pod")
    left = [netdev for _, netdev in sorted(claims.items())]
    for link in (lk for lk in host.links() if lk.alias == marker and lk.kind not in SUBLINK_KINDS):
        if moves_nics and left:
            plans.append(_physical_on_host(len(plans), link, left.pop(0)))
        elif not planned:
            _not_ours(link, "on the host")
    log.warning("DEL of %s/%s from an unreadable state record: %d interface(s) found by "
                "their claims and marks", key.network, key.container_id, len(plans))
    return make_state(SALVAGED, "", netns, "", "", priority, plans)
