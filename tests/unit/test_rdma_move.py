"""Exclusive mode under RDMA netns mode "exclusive": the RDMA device moves with its
netdev, after it on ADD, before it on undo. rxe devices cannot change netns, so
this is proven against a recording fake; real hardware is needed to verify it."""

from __future__ import annotations

from typing import Any

import pytest

from rdma_cni.datapath import execute, rdmadev
from rdma_cni.errors import IOFailure
from rdma_cni.vocab.plan import IfacePlan


class FakeRdma:
    def __init__(self, visible: bool = True) -> None:
        self.calls: list[tuple[str, int]] = []
        self.visible = visible

    def move(self, name: str, fd: int) -> bool:
        self.calls.append((name, fd))
        return self.visible


def plan(**kw: Any) -> IfacePlan:
    base: dict[str, Any] = dict(k=0, name="eth1", tmp="rdtx0", nic="ens1f0", kind="physical",
                                mtu=1500, table=100, ibdev="mlx5_1", rdma_move=True)
    base.update(kw)
    return IfacePlan(**base)


def ctx(rdma: FakeRdma) -> execute.Ctx:
    c = execute.Ctx(host=None, pod=None, host_fd=3, pod_fd=42, pod_path="/run/netns/p",  # type: ignore[arg-type]
                    marker="rdma-cni:x")
    c.rdma = rdma  # type: ignore[assignment]
    return c


def test_rdma_step_follows_the_netdev_move() -> None:
    names = [s.name for s in execute.steps_for([plan()])]
    assert names.index("move RDMA device in") == names.index("move NIC in") + 1


def test_no_rdma_step_unless_planned() -> None:
    names = [s.name for s in execute.steps_for([plan(rdma_move=False)])]
    assert "move RDMA device in" not in names


def test_rdma_in_moves_the_nics_device_into_the_pod_netns() -> None:
    fake = FakeRdma()
    rdmadev.rdma_in(ctx(fake), plan())
    assert fake.calls == [("mlx5_1", 42)]


def test_rdma_in_fails_when_device_not_visible() -> None:
    with pytest.raises(IOFailure, match="mlx5_1"):
        rdmadev.rdma_in(ctx(FakeRdma(visible=False)), plan())


def test_rollback_undoes_rdma_before_netdev() -> None:
    order: list[str] = []
    p = plan()

    def boom(c: execute.Ctx, q: IfacePlan) -> None:
        raise IOFailure("injected")

    steps = [
        execute.Step("netdev", p, lambda c, q: order.append("netdev in"),
                     lambda c, q: order.append("netdev out")),
        execute.Step("rdma", p, lambda c, q: order.append("rdma in"),
                     lambda c, q: order.append("rdma out")),
        execute.Step("fail", p, boom),
    ]
    with pytest.raises(IOFailure, match="injected"):
        execute.apply(ctx(FakeRdma()), steps)
    assert order == ["netdev in", "rdma in", "rdma out", "netdev out"]
