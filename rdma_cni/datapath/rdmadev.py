"""The RDMA device of an exclusive NIC under RDMA netns mode "exclusive": it follows its
netdev into the pod (after it on ADD) and returns to the host (before it on undo)."""

from __future__ import annotations

from rdma_cni.adapters import netns
from rdma_cni.datapath.context import Ctx
from rdma_cni.errors import IOFailure
from rdma_cni.vocab.plan import IfacePlan


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
