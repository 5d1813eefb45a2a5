"""Whether one pod interface is as ADD made it: shared by CHECK and a repeated ADD.

The link under the planned name and our mark must be the planned device itself, found
as DEL finds it (an exclusive NIC by the identity ADD recorded, a sub-link on its NIC:
a pod with CAP_NET_ADMIN gives a link of its own making a name, a MAC, an address and
our mark); then its addresses, the source rule and the routes ADD put in the
interface's table, each through that link and by the planned gateway (a table the pod
emptied and filled with routes through another link sends the interface's traffic
elsewhere); then the IPv4 settings ADD gave it (``rp_filter`` 0 lets a multi-NIC pod
answer ARP for one NIC's address on another)."""

from __future__ import annotations

from rdma_cni.datapath import sublinks
from rdma_cni.datapath.physical import POD, find_moved, peer_points_back
from rdma_cni.datapath.plan import SYSCTLS, pod_routes
from rdma_cni.datapath.session import Session
from rdma_cni.vocab.kinds import LinkKind
from rdma_cni.vocab.netlink import Link
from rdma_cni.vocab.plan import IfacePlan


def mismatch(session: Session, p: IfacePlan, marker: str, priority: int) -> str | None:
    """What of interface ``p`` is not in the pod as ADD made it (None: nothing)."""
    assert session.pod is not None
    link = session.pod.link(p.name)
    if link is None:
        return f"interface {p.name} is missing in {session.pod_path}"
    if link.alias != marker or not _the_device(session, p, link, marker, priority):
        return f"interface {p.name} in {session.pod_path} is not ours"
    have = {str(a) for _, a in session.pod.addresses(link.index)}
    lacking = [a for a in p.addresses if str(a) not in have]
    if lacking:
        return f"interface {p.name} lacks its address {lacking[0]}"
    rules = set(session.pod.rules())
    for addr in p.addresses[:1]:
        if (priority, p.table, f"{addr.ip}/32") not in rules:
            return f"rule from {addr.ip} lookup {p.table} pref {priority} is missing"
    return _routes(session, p, link) or _settings(session, p)


def _settings(session: Session, p: IfacePlan) -> str | None:
    """The IPv4 settings ADD gave the interface, as the kernel shows them (a key the
    kernel does not show is not judged)."""
    assert session.pod is not None
    conf = session.pod.link_conf(p.name)
    have = conf.ipv4 if conf is not None else {}
    for key, want in SYSCTLS:
        if key in have and have[key] != want:
            return f"{key} of {p.name} is {have[key]}, not {want}"
    return None


def _the_device(session: Session, p: IfacePlan, link: Link, marker: str,
                priority: int) -> bool:
    """Whether ``link`` is the planned device: an exclusive NIC under the identity ADD
    recorded (:func:`rdma_cni.datapath.physical.find_moved`, as DEL takes it back), a
    sub-link of the planned kind on the planned NIC (:func:`sublinks.on_nic`)."""
    ctx = session.ctx(marker, priority)
    if p.kind != LinkKind.PHYSICAL:
        return sublinks.on_nic(ctx, p, link)
    peer = peer_points_back(ctx.host, ctx.pod_fd, p.identity) \
        if p.identity.get("peerIndex") else None
    return find_moved(ctx.pod, p, marker, POD, peer=peer) == link.name


def _routes(session: Session, p: IfacePlan, link: Link) -> str | None:
    """Each route ADD put in the interface's table is there through ``link`` (and its
    gateway), and no route of the table leads elsewhere."""
    assert session.pod is not None
    have = session.pod.routes(table=p.table)
    for dst, gw, _ in pod_routes(p):
        if not any(r.dst == dst and r.oif == link.index and r.gateway == gw for r in have):
            via = f" via {gw}" if gw else ""
            return (f"route {dst}{via} dev {p.name} is missing from routing table "
                    f"{p.table}")
    stray = next((r for r in have if not r.devices or
                  any(d != link.index for d in r.devices)), None)
    if stray is not None:
        return (f"routing table {p.table} of {p.name} holds a route to {stray.dst} that "
                f"does not lead through {p.name}")
    return None
