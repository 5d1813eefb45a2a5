"""Sub-links (ipvlan L2 / macvlan of a host RDMA NIC) in the pod: made under a
temporary name straight into the pod netns, then renamed and marked with the alias
``rdma-cni:<digest>`` so that DEL and GC can tell ours from anything else."""

from __future__ import annotations

import errno

from rdma_cni.datapath.context import Ctx
from rdma_cni.errors import IfNameInUse
from rdma_cni.records import replace
from rdma_cni.vocab.kinds import LinkKind
from rdma_cni.vocab.netlink import Link, NetlinkFailure
from rdma_cni.vocab.plan import IfacePlan

#: link kinds we create ourselves: never mistaken for a moved NIC
KINDS = (LinkKind.MACVLAN, LinkKind.IPVLAN, "macvtap", "ipvtap")


def check_name(ctx: Ctx, p: IfacePlan) -> None:
    if ctx.pod.link(p.name) is not None:
        raise IfNameInUse(f"interface name {p.name} is already in use in {ctx.pod_path}")


def create(ctx: Ctx, p: IfacePlan) -> None:
    parent = ctx.host.require(p.nic)
    ctx.host.create_sublink(p.kind, p.tmp, parent, ctx.pod_fd, p.mtu, p.mac)
    ctx.made[p.k] = ctx.pod.require(p.tmp).index  # what a rollback may delete


def with_pod_index(p: IfacePlan, index: int) -> IfacePlan:
    """``p`` whose sub-link has ``index`` in the pod's netns (the ready record's)."""
    return replace(p, identity={**p.identity, "podIndex": index})


def ours(ctx: Ctx, p: IfacePlan) -> list[str]:
    """The names our sub-link of plan ``p`` has in the pod: the link at the index ADD
    recorded (whatever the pod renamed it or marked it), its temporary name, or its
    final name when it bears our marker; each only on the NIC (:func:`on_nic`)."""
    out = []
    index = p.identity.get("podIndex")
    if isinstance(index, int) and not isinstance(index, bool):
        link = ctx.pod.link_at(index)
        if link is not None and on_nic(ctx, p, link):
            out.append(link.name)
    for name in (p.tmp, p.name):
        link = ctx.pod.link(name)
        if link is not None and name not in out and (name == p.tmp or link.alias == ctx.marker) \
                and on_nic(ctx, p, link):
            out.append(name)
    return out


def on_nic(ctx: Ctx, p: IfacePlan, link: Link) -> bool:
    """Whether ``link`` (in the pod) is a sub-link of plan ``p``'s kind on the plan's
    NIC: its lower device is the NIC's index in the host's netns. Names and marks are
    the pod's to set (and the temporary name follows from the mark): a pod with
    CAP_NET_ADMIN could give them to its primary's eth0 for DEL to delete. A link on the
    NIC is ours, or one the pod made on top of ours (the kernel gives a macvlan or ipvlan
    made on a macvlan its lower device): deleting either takes nothing from the node or
    the primary."""
    if link.kind != p.kind or link.iflink is None or link.link_netnsid is None:
        return False
    index = p.identity.get("ifindex")
    if not isinstance(index, int):  # a record of an earlier release: the NIC's name
        nic = ctx.host.link(p.nic)
        index = nic.index if nic is not None else None
    # read after the link: reading it gave the host's netns an id in the pod's
    return link.iflink == index and link.link_netnsid == ctx.pod.netnsid(ctx.host_fd)


def delete(ctx: Ctx, p: IfacePlan) -> None:
    """Undo :func:`create`: the sub-link this request made, by its index in the pod's
    netns (whatever its name is now), and nothing else."""
    index = ctx.made.pop(p.k, None)
    if index is not None:
        ctx.pod.delete_links([lk.name for lk in ctx.pod.links()
                              if lk.index == index and lk.kind == p.kind])


def rename(ctx: Ctx, p: IfacePlan) -> None:
    try:
        ctx.pod.rename(p.tmp, p.name, ctx.marker,
                       f"rename {p.tmp} to {p.name} in {ctx.pod_path}")
    except NetlinkFailure as exc:
        if exc.errno == errno.EEXIST:
            raise IfNameInUse(f"interface name {p.name} is already in use in {ctx.pod_path}") \
                from None
        raise
