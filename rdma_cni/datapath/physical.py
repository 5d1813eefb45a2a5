"""Exclusive NICs: the host's physical NIC moves into the pod (through a private
netns, where it takes the pod's name and our mark), its RDMA device after it under RDMA
netns mode "exclusive" (:mod:`.rdmadev`); it returns under its own name
(:mod:`.homename`) and gets its host configuration back
(:mod:`rdma_cni.datapath.hostconfig`).

The NIC is only ever taken back under the identity ADD recorded (:func:`same_device`),
never by a name, a MAC, our mark or its index, which a pod with CAP_NET_ADMIN can give
a link of its own making. A NIC with no bus device is a veth stand-in whose peer stays
behind, where the pod makes no links (:func:`peer_points_back`); exclusive mode takes
no other NIC without one (:func:`unprovable`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NoReturn

from rdma_cni import testhooks
from rdma_cni.datapath.altnames import clean_altnames
from rdma_cni.datapath.context import Ctx
from rdma_cni.datapath.homename import fallback_name, home_name
from rdma_cni.datapath.hostconfig import restore_host
from rdma_cni.datapath.stacked import drop_stacked
from rdma_cni.datapath.sublinks import KINDS as SUBLINK_KINDS
from rdma_cni.errors import CniError, NicUnavailable, TryAgain
from rdma_cni.records import replace
from rdma_cni.vocab.modes import Mode
from rdma_cni.vocab.netlink import Link
from rdma_cni.vocab.plan import IfacePlan
from rdma_cni.vocab.ports import LinkView, NetlinkPort

log = logging.getLogger("rdma_cni")
#: the netns an index of a NIC without a bus device was recorded in
HOST, POD = "host", "pod"
__all__ = ["SUBLINK_KINDS", "NicNotBack", "fallback_name", "find_moved", "home_name", "lookalikes",
           "move_in", "move_out", "peer_points_back", "restore_host", "unprovable"]


class NicNotBack(TryAgain):
    """An exclusive NIC is not where DEL can take it back under its recorded identity
    (in no netns in sight, or only a look-alike is): the state is kept for a retry."""


def move_in(ctx: Ctx, p: IfacePlan) -> None:
    reason = unprovable(p.identity)
    if reason is not None:
        raise NicUnavailable(f"{Mode.EXCLUSIVE} mode cannot take RDMA NIC {p.nic}: {reason}")
    tmp_fd, tmp = ctx.tmpns()
    ctx.host.move_to_netns(p.nic, tmp_fd, f"move {p.nic} into a private netns")
    try:
        testhooks.in_move()
        tmp.rename(p.nic, p.name, ctx.marker, f"rename {p.nic} to {p.name}")
        tmp.move_to_netns(p.name, ctx.pod_fd, f"move {p.nic} into {ctx.pod_path}")
    except BaseException:
        _undo_move_in(ctx, tmp, p)
        raise
    try:
        testhooks.after_move(POD)
        # its index in the pod (another when the pod uses its own): a veth's identity
        ctx.made[p.k] = ctx.pod.require(p.name).index
    except BaseException:  # in the pod, where DEL finds it by its identity, as after a crash
        ctx.undone_clean = False
        log.error("rollback: %s is in the pod, its index unread: the state is kept for DEL", p.nic)
        raise


def _undo_move_in(ctx: Ctx, tmp: NetlinkPort, p: IfacePlan) -> None:
    """A move into the pod failed half way: the NIC goes home from the private netns as
    DEL takes it, or into the pod (:func:`_back_to_pod`), never left to die with it;
    short of home, restored, the state is kept for DEL (:attr:`Ctx.undone_clean`)."""
    link = tmp.link(p.name) or tmp.link(p.nic)
    if link is None:  # moved on into the pod after all, or gone
        ctx.undone_clean = False
        log.error("rollback: %s is not in the private netns: the state is kept for DEL", p.nic)
        return
    try:
        name = _to_host(tmp, link.name, p, ctx)
    except CniError as exc:
        ctx.undone_clean = False
        try:
            _back_to_pod(ctx, tmp, link.index, link.name, p, exc)
        except CniError as kept:
            log.error("rollback: %s", kept.msg)
        return
    try:
        _home_restored(ctx, name, p)
    except CniError as exc:  # home, perhaps not restored: the state is kept for DEL
        ctx.undone_clean = False
        log.error("rollback: %s", exc.msg)


def _home_restored(ctx: Ctx, name: str, p: IfacePlan) -> None:
    """A rollback's NIC, home as ``name``: restored; under a fallback name, or not
    restored, the state is kept for DEL (which gives it its own name once free). Its index
    on the host is noted first (:attr:`Ctx.home`: a veth's identity), for the record of a
    failure from here on."""
    link = ctx.host.link(name)
    if link is not None:
        ctx.home[p.k] = link.index
    testhooks.after_move(HOST)
    failed = None  # the reason it is not restored
    try:
        restore_host(ctx.host, name, p)
    except CniError as exc:
        failed = exc.msg
    if name != p.nic or failed:
        ctx.undone_clean = False
        log.error("rollback: exclusive NIC %s is back on the host as %s%s: the state is kept "
                  "for DEL", p.nic, name, f", not restored ({failed})" if failed else "")


def move_back(ctx: Ctx, p: IfacePlan) -> None:
    """Undo :func:`move_in`: only the NIC this request moved in (by its index in the pod,
    kept in :attr:`Ctx.made` until it has left the pod: one put back there stays so)."""
    if (index := ctx.made.get(p.k)) is None:
        return
    current = next((lk.name for lk in ctx.pod.links() if lk.index == index), None)
    if current is None:
        del ctx.made[p.k]
        log.warning("rollback: %s is no longer in %s under the index it was moved in "
                    "with: nothing moved back", p.nic, ctx.pod_path)
        return
    name = _out_of_pod(ctx, current, with_index(p, index))
    del ctx.made[p.k]
    _home_restored(ctx, name, p)


def move_out(ctx: Ctx, p: IfacePlan) -> bool:
    """Return an exclusive NIC from the pod to the host under its own name, restored;
    False when it is not in the pod (under its recorded identity)."""
    current = find_moved(ctx.pod, p, ctx.marker, POD,
                         peer=peer_points_back(ctx.host, ctx.pod_fd, p.identity))
    if current is None:
        return False
    restore_host(ctx.host, _out_of_pod(ctx, current, p), p)
    return True


def _out_of_pod(ctx: Ctx, current: str, p: IfacePlan) -> str:
    """Move the NIC (``current`` in the pod) home through the private netns: its name on
    the host. The links the pod stacked on it are deleted once it has left the pod
    (:mod:`.stacked`). One that cannot go on to the host goes back into the pod, never left
    in the private netns (released after the request: a veth dies with it, a NIC falls to
    the init netns)."""
    tmp_fd, tmp = ctx.tmpns()
    ctx.pod.move_to_netns(current, tmp_fd, f"move {current} out of {ctx.pod_path}")
    index = tmp.require(current).index
    try:
        drop_stacked(ctx.pod, index, tmp_fd, p.nic)
        return _to_host(tmp, current, p, ctx)
    except CniError as exc:
        _back_to_pod(ctx, tmp, index, current, p, exc)


def _to_host(tmp: NetlinkPort, current: str, p: IfacePlan, ctx: Ctx) -> str:
    """Move the NIC (``current`` in the private netns ``tmp``) to the host, without the
    alternative names ADD did not record, under its host name (or a fallback): that name."""
    def taken(n: str) -> bool:
        return ctx.host.link(n) is not None

    clean_altnames(tmp, current, p, taken)
    link = tmp.link(current)
    name = home_name(p, taken, link.index if link else 0)
    if current != name:
        tmp.rename(current, name, "", f"rename {current} to {name}")
    tmp.move_to_netns(name, ctx.host_fd, f"return {name} to the host")
    return name


def _back_to_pod(ctx: Ctx, tmp: NetlinkPort, index: int, current: str, p: IfacePlan,
                 exc: CniError) -> NoReturn:
    """The NIC (``index`` in the private netns) could not go to the host (``exc``): back
    into the pod with our mark, where a retry finds it, under the name it had there
    (``current``; taken meanwhile: :attr:`IfacePlan.tmp`); :class:`NicNotBack` (the state
    is kept)."""
    link = tmp.link_at(index)
    if link is None:
        raise exc
    back = current if ctx.pod.link(current) is None else p.tmp
    try:
        if link.name != back:
            tmp.rename(link.name, back, ctx.marker, f"rename {link.name} to {back}")
        tmp.move_to_netns(back, ctx.pod_fd, f"move {p.nic} back into {ctx.pod_path}")
    except CniError as again:
        log.error("exclusive NIC %s is lost: it could not go to the host (%s) nor back "
                  "into the pod (%s)", p.nic, exc.msg, again.msg)
        raise exc from None
    log.warning("exclusive NIC %s could not go to the host (%s): back in %s as %s for a "
                "retry", p.nic, exc.msg, ctx.pod_path, back)
    raise NicNotBack(f"failed to return exclusive NIC {p.nic} to the host: {exc.msg}; it is "
                     f"back in the pod as {back}, the state is kept for a retry")


def with_index(p: IfacePlan, index: int, where: str = POD) -> IfacePlan:
    """``p`` whose NIC has ``index`` in the netns ``where`` (the pod's: it moved in)."""
    return replace(p, identity={**p.identity, "ifindex": index, "ifindexNetns": where})


def unprovable(ident: dict[str, Any]) -> str | None:
    """Why DEL could not tell the NIC ``ident`` names from a link a pod makes (None: it
    can): a NIC with no bus device must be a veth whose peer ADD recorded. Any other
    (a dummy, a bond, a VLAN: a pod makes one of its kind, name, MAC and index) is
    refused. A record of an earlier release, written before ADD refused it, is matched
    as it was (:func:`same_device`)."""
    if ident.get("parentDev") or ident.get("pci"):
        return None
    if ident.get("kind") == "veth" and ident.get("peerIndex"):
        return None
    what = f"a link of kind {ident['kind']}" if ident.get("kind") else "a netdev"
    return (f"it is {what} with no bus device, which a pod could copy (kind, name, MAC "
            "and index) for DEL to take back in its place")


def peer_points_back(host: LinkView, pod_fd: int, ident: dict[str, Any]
                     ) -> Callable[[Link], bool]:
    """Whether a veth in the pod (``pod_fd``) is the stand-in ``ident`` names: the peer
    ADD recorded (in the host's netns, or the one the host knows by ``peerNetnsid``:
    neither is the pod's to change) is still a veth whose own peer is that link, by
    its index, in the pod's netns. A link the pod makes has its peer in the pod's
    reach, never there."""
    def check(link: Link) -> bool:
        peer = host.link_at(ident["peerIndex"], ident.get("peerNetnsid"))
        if peer is None or peer.kind != "veth" or peer.iflink != link.index:
            return False
        # read after the peer: reading it gave the pod's netns an id on the host
        return peer.link_netnsid is not None and peer.link_netnsid == host.netnsid(pod_fd)
    return check


def same_device(link: Link, ident: dict[str, Any], where: str,
                device_path: Callable[[str], str | None] | None = None,
                peer: Callable[[Link], bool] | None = None) -> bool:
    """Whether ``link``, seen in the netns ``where`` (:data:`POD` or :data:`HOST`), is the
    netdev ``ident`` (recorded at ADD) names: the same kind (a NIC's own driver has
    none), the same permanent MAC when it has one, and the same bus device
    (IFLA_PARENT_DEV_NAME, which no link made through netlink has). A NIC recorded
    without one: a link with a sysfs device (``device_path``: on the host) must have the
    PCI address ADD read there (a kernel before 5.16 does not say it over netlink); a
    veth stand-in in the pod, the veth its recorded peer points back at (``peer``:
    :func:`peer_points_back`; none given, none is); otherwise (on the host, where a pod
    makes no links, or a record without a peer) no bus device and the same index, in
    the netns the index was recorded in. The MAC, the name, the alias and, in the pod,
    the index prove nothing: a pod with CAP_NET_ADMIN sets them on links of its own
    making."""
    if link.kind != ident.get("kind"):
        return False
    perm = ident.get("permMac")
    if perm and link.perm_mac != perm:
        return False
    bus = ident.get("parentDev")
    if bus:
        return link.parent_dev == bus and ident.get("parentBus") in (None, link.parent_bus)
    if link.parent_dev is not None:
        return False
    pci = ident.get("pci")
    path = device_path(link.name) if pci and device_path is not None else None
    if path is not None:
        return pci in path.split("/")
    if where == POD and ident.get("peerIndex"):
        return peer is not None and peer(link)
    return ident.get("ifindexNetns", HOST) == where and link.index == ident.get("ifindex")


def find_moved(nl: LinkView, p: IfacePlan, marker: str, where: str,
               device_path: Callable[[str], str | None] | None = None,
               peer: Callable[[Link], bool] | None = None) -> str | None:
    """The name of the exclusive NIC in ``nl``'s netns (``where``), found by its recorded
    identity (:func:`same_device`)."""
    links = nl.links()
    if "kind" not in p.identity:
        return _legacy(links, p, marker)
    return next((lk.name for lk in links
                 if same_device(lk, p.identity, where, device_path, peer)), None)


def _legacy(links: list[Link], p: IfacePlan, marker: str) -> str | None:
    """A record of a release before 0.3 (no kind, no index): its bus device when it
    names one (nothing else may stand for it); otherwise, as those releases did, the
    permanent MAC, then the MAC, then our mark."""
    ours = [lk for lk in links if lk.kind not in SUBLINK_KINDS]
    parent = p.identity.get("parentDev")
    if parent:
        return next((lk.name for lk in ours if lk.parent_dev == parent and lk.kind is None), None)
    for attr, want in (("parent_dev", p.identity.get("pci")),
                       ("perm_mac", p.identity.get("permMac")),
                       ("mac", p.identity.get("mac"))):
        hit = next((lk.name for lk in ours if want and getattr(lk, attr) == want), None)
        if hit is not None:
            return hit
    return next((lk.name for lk in ours if lk.alias == marker), None)


def lookalikes(nl: LinkView, p: IfacePlan, marker: str) -> list[str]:
    """Links in ``nl``'s netns that carry our mark or the NIC's MAC while the NIC is not
    there under its identity: a pod can make such a link, and hide the NIC in a netns of
    its own. They are never taken (see :mod:`rdma_cni.datapath.teardown`)."""
    macs = {m for m in (p.identity.get("mac"), p.identity.get("permMac")) if m}
    return [lk.name for lk in nl.links()
            if lk.alias == marker or lk.mac in macs or (lk.perm_mac or "") in macs]
