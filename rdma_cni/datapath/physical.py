"""Exclusive NICs: the host's physical NIC moves into the pod (through a private
netns, where it takes the pod's name and our mark), its RDMA device after it under
RDMA netns mode "exclusive"; on the way back it returns under its own name (or a
fallback if the host reused that) and gets its host configuration back."""

from __future__ import annotations

import logging

from rdma_cni.adapters import netns
from rdma_cni.datapath.context import Ctx
from rdma_cni.datapath.plan import IfacePlan
from rdma_cni.datapath.port import RT_TABLE_MAIN, SCOPE_LINK, SCOPE_UNIVERSE, NetlinkPort, Route
from rdma_cni.datapath.sublinks import KINDS as SUBLINK_KINDS
from rdma_cni.errors import IOFailure

log = logging.getLogger("rdma_cni")


def move_in(ctx: Ctx, p: IfacePlan) -> None:
    tmp_fd, tmp = ctx.tmpns()
    ctx.host.move_to_netns(p.nic, tmp_fd, f"move {p.nic} into a private netns")
    try:
        tmp.rename(p.nic, p.name, ctx.marker, f"rename {p.nic} to {p.name}")
        tmp.move_to_netns(p.name, ctx.pod_fd, f"move {p.nic} into {ctx.pod_path}")
    except BaseException:
        _home_from(tmp, p.name if tmp.link(p.name) else p.nic, p, ctx)
        raise


def move_out(ctx: Ctx, p: IfacePlan) -> None:
    """Return an exclusive NIC from the pod to the host under its own name."""
    tmp_fd, tmp = ctx.tmpns()
    current = find_moved(ctx.pod, p, ctx.marker)
    if current is None:
        return
    ctx.pod.move_to_netns(current, tmp_fd, f"move {current} out of {ctx.pod_path}")
    _home_from(tmp, current, p, ctx)


def _home_from(tmp: NetlinkPort, current: str, p: IfacePlan, ctx: Ctx) -> None:
    name = p.nic
    if ctx.host.link(p.nic) is not None:
        name = fallback_name(p)
        log.warning("host name %s of the returning NIC is taken: it comes back as %s",
                    p.nic, name)
    if current != name:
        tmp.rename(current, name, "", f"rename {current} to {name}")
    tmp.move_to_netns(name, ctx.host_fd, f"return {name} to the host")
    restore_host(ctx.host, name, p)


def rdma_in(ctx: Ctx, p: IfacePlan) -> None:
    """RDMA netns mode exclusive: the NIC's RDMA device follows its netdev into the pod."""
    assert p.ibdev is not None
    if not ctx.rdma_nl().move(p.ibdev, ctx.pod_fd):
        raise IOFailure(f"failed to move RDMA device {p.ibdev} into {ctx.pod_path}: "
                        "not visible in the host netns")


def rdma_out(ctx: Ctx, p: IfacePlan) -> None:
    """Return the RDMA device to the host (asked from inside the pod, where it is visible)."""
    if p.ibdev is None:
        return
    with netns.entered(ctx.pod_fd, ctx.host_fd):
        ctx.rdma_nl().move(p.ibdev, ctx.host_fd)


def fallback_name(p: IfacePlan) -> str:
    return f"rdma{(p.identity.get('pci') or p.identity.get('mac') or p.nic)[-6:]}".replace(
        ":", "").replace(".", "")[:15]


def find_moved(nl: NetlinkPort, p: IfacePlan, marker: str) -> str | None:
    """The exclusive NIC in ``nl``'s netns: by PCI address, then permanent MAC, then MAC."""
    links = nl.links()
    parent = p.identity.get("parentDev") or p.identity.get("pci")  # older records: pci only
    for attr, want in (("parent_dev", parent),
                       ("perm_mac", p.identity.get("permMac")),
                       ("mac", p.identity.get("mac"))):
        if not want:
            continue
        hits = [lk for lk in links if getattr(lk, attr) == want and lk.kind not in SUBLINK_KINDS]
        if hits:
            return hits[0].name
    alias = [lk for lk in links if lk.alias == marker and lk.kind not in SUBLINK_KINDS]
    return alias[0].name if alias else None


def restore_host(host: NetlinkPort, name: str, p: IfacePlan) -> None:
    if p.host_mtu:
        host.set_mtu(name, p.host_mtu, f"restore MTU of {name}")
    for addr in p.addresses:
        host.add_address(name, addr)
    if p.host_up:
        host.set_up(name, f"bring {name} up")
    link = host.require(name)
    saved = p.host_routes or tuple((dst, gw, 0, 0, False) for dst, gw in p.routes)
    for dst, gw, proto, metric, onlink in saved:
        scope = SCOPE_UNIVERSE if gw else SCOPE_LINK  # a device route is link scope
        host.add_route(Route(dst=dst, gateway=gw, oif=link.index, table=RT_TABLE_MAIN,
                             onlink=onlink, proto=proto, priority=metric, scope=scope))
