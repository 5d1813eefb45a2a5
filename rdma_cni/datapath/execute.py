"""The executor: turns interface plans into steps and applies them through the
netlink adapter, undoing applied steps in reverse when one fails.

Rollback is data: each step knows its own undo; the executor keeps the list of
what was applied. Every link we make carries the alias ``rdma-cni:<digest>`` so
DEL and GC can tell ours from anything else in the pod.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Interface

from rdma_cni import defaults
from rdma_cni.adapters import netns
from rdma_cni.adapters.netlink import RT_TABLE_MAIN, Netlink, NetlinkFailure, Route
from rdma_cni.adapters.rdmanl import RdmaNetlink
from rdma_cni.datapath.plan import SYSCTLS, IfacePlan, pod_routes
from rdma_cni.errors import IfNameInUse, IOFailure

log = logging.getLogger("rdma_cni")

#: test-only seam (issue 7): stop before step k with SIGKILL; inert unless set
_CRASH_AT = "RDMA_CNI_TEST_CRASH_AT_STEP"
#: test-only seam: raise IOFailure before step k (rollback runs); inert unless set
_FAIL_AT = "RDMA_CNI_TEST_FAIL_AT_STEP"
#: link kinds we create ourselves: never mistaken for a moved NIC
_SUBLINKS = ("macvlan", "ipvlan", "macvtap", "ipvtap")


@dataclass
class Ctx:
    host: Netlink
    pod: Netlink
    host_fd: int
    pod_fd: int
    pod_path: str
    marker: str
    priority: int = defaults.RULE_PRIORITY
    rdma: RdmaNetlink | None = None
    _tmp: tuple[int, Netlink] | None = field(default=None, repr=False)

    def tmpns(self) -> tuple[int, Netlink]:
        if self._tmp is None:
            fd = netns.private_netns(self.host_fd)
            self._tmp = (fd, Netlink.inside(fd, self.host_fd, "a private netns"))
        return self._tmp

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp[1].close()
            os.close(self._tmp[0])
            self._tmp = None


@dataclass(frozen=True)
class Step:
    name: str
    plan: IfacePlan
    do: Callable[[Ctx, IfacePlan], None]
    undo: Callable[[Ctx, IfacePlan], None] | None = None


def steps_for(plans: Sequence[IfacePlan]) -> list[Step]:
    steps: list[Step] = []
    for p in plans:
        steps.append(Step("check name", p, _check_name))
        if p.kind == "physical":
            steps.append(Step("move NIC in", p, move_in, move_out))
            if p.rdma_move:
                steps.append(Step("move RDMA device in", p, rdma_in, rdma_out))
        else:
            steps.append(Step(f"create {p.kind}", p, _create, _delete))
            steps.append(Step("rename", p, _rename))
        steps += [
            Step("sysctls", p, _sysctls),
            Step("addresses", p, _addresses),
            Step("up", p, _up),
            Step("routes", p, _routes),
            Step("rule", p, _rule, _unrule),
        ]
    return steps


def apply(ctx: Ctx, steps: Sequence[Step]) -> None:
    applied: list[Step] = []
    try:
        for i, step in enumerate(steps):
            _inject(i)
            step.do(ctx, step.plan)
            applied.append(step)
        _inject(len(steps))
    except BaseException:
        rollback(ctx, applied)
        raise


def _inject(k: int) -> None:
    """The test seams, at the boundary before step k (k == len(steps): after the last)."""
    if k == int(os.environ.get(_CRASH_AT, "-1") or -1):
        os.kill(os.getpid(), 9)
    if k == int(os.environ.get(_FAIL_AT, "-1") or -1):
        raise IOFailure(f"injected failure at step {k}")


def rollback(ctx: Ctx, applied: Sequence[Step]) -> None:
    for step in reversed(applied):
        if step.undo is None:
            continue
        try:
            step.undo(ctx, step.plan)
        except Exception as exc:  # best effort: the original error is what we report
            log.warning("rollback of %s for %s failed: %s", step.name, step.plan.name, exc)


# --- steps -------------------------------------------------------------------
def _check_name(ctx: Ctx, p: IfacePlan) -> None:
    if ctx.pod.link(p.name) is not None:
        raise IfNameInUse(f"interface name {p.name} is already in use in {ctx.pod_path}")


def _create(ctx: Ctx, p: IfacePlan) -> None:
    parent = ctx.host.require(p.nic)
    ctx.host.create_sublink(p.kind, p.tmp, parent, ctx.pod_fd, p.mtu, p.mac)


def _delete(ctx: Ctx, p: IfacePlan) -> None:
    for name in (p.tmp, p.name):
        link = ctx.pod.link(name)
        if link is not None and (name == p.tmp or link.alias == ctx.marker):
            ctx.pod.delete_link(name)


def _rename(ctx: Ctx, p: IfacePlan) -> None:
    try:
        ctx.pod.set_link(p.tmp, f"rename {p.tmp} to {p.name} in {ctx.pod_path}",
                         ifname=p.name, ifalias=ctx.marker)
    except NetlinkFailure as exc:
        if exc.errno == errno.EEXIST:
            raise IfNameInUse(f"interface name {p.name} is already in use in {ctx.pod_path}") \
                from None
        raise


def move_in(ctx: Ctx, p: IfacePlan) -> None:
    tmp_fd, tmp = ctx.tmpns()
    ctx.host.set_link(p.nic, f"move {p.nic} into a private netns", net_ns_fd=tmp_fd)
    try:
        tmp.set_link(p.nic, f"rename {p.nic} to {p.name}", ifname=p.name, ifalias=ctx.marker)
        tmp.set_link(p.name, f"move {p.nic} into {ctx.pod_path}", net_ns_fd=ctx.pod_fd)
    except BaseException:
        _home_from(tmp, p.name if tmp.link(p.name) else p.nic, p, ctx)
        raise


def move_out(ctx: Ctx, p: IfacePlan) -> None:
    """Return an exclusive NIC from the pod to the host under its own name."""
    tmp_fd, tmp = ctx.tmpns()
    current = find_moved(ctx.pod, p, ctx.marker)
    if current is None:
        return
    ctx.pod.set_link(current, f"move {current} out of {ctx.pod_path}", net_ns_fd=tmp_fd)
    _home_from(tmp, current, p, ctx)


def _home_from(tmp: Netlink, current: str, p: IfacePlan, ctx: Ctx) -> None:
    name = p.nic
    if ctx.host.link(p.nic) is not None:
        name = fallback_name(p)
        log.warning("host name %s of the returning NIC is taken: it comes back as %s",
                    p.nic, name)
    if current != name:
        tmp.set_link(current, f"rename {current} to {name}", ifname=name, ifalias="")
    tmp.set_link(name, f"return {name} to the host", net_ns_fd=ctx.host_fd)
    restore_host(ctx.host, name, p)


def _rdma(ctx: Ctx) -> RdmaNetlink:
    if ctx.rdma is None:
        ctx.rdma = RdmaNetlink()
    return ctx.rdma


def rdma_in(ctx: Ctx, p: IfacePlan) -> None:
    """RDMA netns mode exclusive: the NIC's RDMA device follows its netdev into the pod."""
    assert p.ibdev is not None
    if not _rdma(ctx).move(p.ibdev, ctx.pod_fd):
        raise IOFailure(f"failed to move RDMA device {p.ibdev} into {ctx.pod_path}: "
                        "not visible in the host netns")


def rdma_out(ctx: Ctx, p: IfacePlan) -> None:
    """Return the RDMA device to the host (asked from inside the pod, where it is visible)."""
    if p.ibdev is None:
        return
    with netns.entered(ctx.pod_fd, ctx.host_fd):
        _rdma(ctx).move(p.ibdev, ctx.host_fd)


def fallback_name(p: IfacePlan) -> str:
    return f"rdma{(p.identity.get('pci') or p.identity.get('mac') or p.nic)[-6:]}".replace(
        ":", "").replace(".", "")[:15]


def find_moved(nl: Netlink, p: IfacePlan, marker: str) -> str | None:
    """The exclusive NIC in ``nl``'s netns: by PCI address, then permanent MAC, then MAC."""
    links = nl.links()
    parent = p.identity.get("parentDev") or p.identity.get("pci")  # older records: pci only
    for attr, want in (("parent_dev", parent),
                       ("perm_mac", p.identity.get("permMac")),
                       ("mac", p.identity.get("mac"))):
        if not want:
            continue
        hits = [lk for lk in links if getattr(lk, attr) == want and lk.kind not in _SUBLINKS]
        if hits:
            return hits[0].name
    alias = [lk for lk in links if lk.alias == marker and lk.kind not in _SUBLINKS]
    return alias[0].name if alias else None


def restore_host(host: Netlink, name: str, p: IfacePlan) -> None:
    if p.host_mtu:
        host.set_link(name, f"restore MTU of {name}", mtu=p.host_mtu)
    for addr in p.addresses:
        host.add_address(name, addr)
    if p.host_up:
        host.set_link(name, f"bring {name} up", state="up")
    link = host.require(name)
    saved = p.host_routes or tuple((dst, gw, 0, 0, False) for dst, gw in p.routes)
    for dst, gw, proto, metric, onlink in saved:
        host.add_route(Route(dst=dst, gateway=gw, oif=link.index, table=RT_TABLE_MAIN,
                             onlink=onlink, proto=proto, priority=metric,
                             scope=0 if gw else 253))  # a device route is link scope


def _sysctls(ctx: Ctx, p: IfacePlan) -> None:
    with netns.entered(ctx.pod_fd, ctx.host_fd):
        for key, value in SYSCTLS:
            path = f"/proc/sys/net/ipv4/conf/{p.name}/{key}"
            try:
                with open(path, "w") as fh:
                    fh.write(value)
            except OSError as exc:
                raise IOFailure(f"failed to set {key}={value} on {p.name}: {exc.strerror or exc}") \
                    from None


def _addresses(ctx: Ctx, p: IfacePlan) -> None:
    for addr in p.addresses:
        ctx.pod.add_address(p.name, IPv4Interface(addr))


def _up(ctx: Ctx, p: IfacePlan) -> None:
    ctx.pod.set_link(p.name, f"bring {p.name} up in {ctx.pod_path}", state="up", mtu=p.mtu)


def _routes(ctx: Ctx, p: IfacePlan) -> None:
    link = ctx.pod.require(p.name)
    for dst, gw, onlink in pod_routes(p):
        scope = 253 if gw is None else 0  # link scope for the connected route
        ctx.pod.add_route(Route(dst=dst, gateway=gw, oif=link.index, table=p.table,
                                onlink=onlink, scope=scope))
        if p.kind == "physical" and gw is not None:
            ctx.pod.add_route(Route(dst=dst, gateway=gw, oif=link.index,
                                    table=RT_TABLE_MAIN, onlink=True))


def _rule(ctx: Ctx, p: IfacePlan) -> None:
    if p.address is not None:
        ctx.pod.add_rule(str(p.address.ip), p.table, ctx.priority)


def _unrule(ctx: Ctx, p: IfacePlan) -> None:
    if p.address is not None:
        ctx.pod.del_rule(str(p.address.ip), p.table, ctx.priority)

