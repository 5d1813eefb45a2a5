"""ADD's last stage (``_apply``) over the in-memory kernel (no root), with a real store in
a temp dir: the ready state records what the kernel shows, an unchanged pending record
is known as this ADD's by its identity, a state another ADD put meanwhile is left as it
is, and a failed ADD leaves no state and no temp file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.fakenode import EXCL, POD, PRIO, SHARED, Node

from rdma_cni import testhooks
from rdma_cni.cni.commands import add as add_cmd
from rdma_cni.cni.commands import owner as owner_mod
from rdma_cni.cni.request import Request
from rdma_cni.errors import IOFailure, TryAgain
from rdma_cni.records import replace
from rdma_cni.store.atomic import TMP
from rdma_cni.store.core import Store
from rdma_cni.store.state import AttachmentState, make_state
from rdma_cni.vocab.kinds import PENDING, READY
from rdma_cni.vocab.plan import IfacePlan

TOKEN = "0011223344556677"


def _request(tmp_path: Path) -> Request:
    conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": "rdma", "type": "rdma-cni",
                            "mode": "shared-multi", "dataDir": str(tmp_path / "data")}
    return Request("ADD", conf, "1.0.0", container_id="c0ffee", netns=POD, ifname="eth0")


def _apply(node: Node, tmp_path: Path, plans: list[IfacePlan],
           monkeypatch: pytest.MonkeyPatch | None = None, meanwhile: Any = None
           ) -> tuple[dict[str, Any], Store, Request]:
    mode = "shared-multi"
    req = _request(tmp_path)
    store = Store(str(tmp_path / "data"))

    def state(status: str, ps: list[IfacePlan], ours: dict[str, Any] | None
              ) -> AttachmentState:
        return make_state(status, mode, POD, "p1", "uid-p1", PRIO, ps, ours, request=TOKEN)
    pending = store.put_state(req.key, state(PENDING, plans, None))
    assert pending is not None
    if meanwhile is not None:
        assert monkeypatch is not None
        real = add_cmd.apply

        def apply_then(*a: Any) -> None:
            real(*a)
            meanwhile(store, req)
        monkeypatch.setattr(add_cmd, "apply", apply_then)
    session = node.session()
    try:
        out = add_cmd._apply(req, req.netconf, store, session, plans, TOKEN, state, pending)
    finally:
        session.close()
    return out, store, req


def _kernel_macs(node: Node, names: list[str]) -> dict[str, str]:
    assert node.pod is not None
    port = node.kernel.port(node.pod)
    return {n: port.require(n).mac for n in names}


def _temp_files(tmp_path: Path) -> list[str]:
    return [n for n in os.listdir(tmp_path / "data" / "state") if n.startswith(TMP)]


def test_the_ready_state_records_what_the_kernel_shows(tmp_path: Path) -> None:
    node = Node()
    out, store, req = _apply(node, tmp_path, SHARED)
    macs = _kernel_macs(node, ["eth1", "eth2"])
    saved = store.get_state(req.key)
    assert saved is not None and saved.status == READY and saved.request == TOKEN
    assert saved.result is not None
    assert [i["mac"] for i in saved.result["interfaces"]] == [macs["eth1"], macs["eth2"]]
    assert [i["mac"] for i in out["interfaces"]] == [macs["eth1"], macs["eth2"]]
    assert _temp_files(tmp_path) == []


@pytest.mark.parametrize("k", [0, 3])
def test_a_failed_add_leaves_no_state_and_no_temp_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    node = Node()
    monkeypatch.setenv(testhooks.FAIL_AT_STEP, str(k))
    with pytest.raises(IOFailure, match="injected failure"):
        _apply(node, tmp_path, SHARED)
    assert _temp_files(tmp_path) == []
    assert os.listdir(tmp_path / "data" / "state") == []
    assert node.pod is not None
    assert sorted(lk.name for lk in node.kernel.port(node.pod).links()) == ["eth0", "lo"]


def test_an_unchanged_pending_record_is_known_as_ours_by_its_identity(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node()
    reads: list[str] = []
    monkeypatch.setattr(owner_mod, "mine", lambda *a: reads.append("read"))
    _apply(node, tmp_path, SHARED)
    assert reads == []


def test_a_state_another_add_put_meanwhile_is_left_as_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A later ADD of the same attachment replaced the pending record while the links were
    made (same size, other token): this ADD gives up and its ready state is not saved."""
    node = Node()

    def replaced(store: Store, req: Request) -> None:
        st = store.get_state(req.key)
        assert st is not None
        store.put_state(req.key, replace(st, request="ffeeddccbbaa9988"))
    with pytest.raises(TryAgain, match="replaced by a later ADD"):
        _apply(node, tmp_path, SHARED, monkeypatch, meanwhile=replaced)
    saved = Store(str(tmp_path / "data")).get_state(_request(tmp_path).key)
    assert saved is not None and saved.status == PENDING
    assert saved.request == "ffeeddccbbaa9988"
    assert _temp_files(tmp_path) == []


def test_once_another_request_owns_the_attachment_nothing_more_is_done_or_undone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A later request takes the pending record over after this ADD made its first
    sub-link (boundary 2: before the rename): this ADD renames nothing and undoes nothing
    (the sub-link is the later request's to undo, by the record it took over)."""
    node = Node()
    real = testhooks.step_seams()
    req = _request(tmp_path)

    def take_over_at(k: int) -> None:
        if k == 2:
            store = Store(str(tmp_path / "data"))
            st = store.get_state(req.key)
            assert st is not None
            store.put_state(req.key, replace(st, request="ffeeddccbbaa9988"))
        real(k)
    monkeypatch.setattr(testhooks, "step_seams", lambda: take_over_at)
    assert node.pod is not None
    pod = node.kernel.port(node.pod)
    with pytest.raises(TryAgain, match="another request's now"):
        _apply(node, tmp_path, SHARED)
    assert sorted(lk.name for lk in pod.links()) == sorted(["eth0", "lo", SHARED[0].tmp])
    saved = Store(str(tmp_path / "data")).get_state(req.key)
    assert saved is not None and saved.request == "ffeeddccbbaa9988"


def test_a_nic_moved_in_is_undone_when_the_record_of_its_move_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The write that records an exclusive NIC's index in the pod fails once (a full disk
    for a moment) after the NIC moved in: the move is undone all the same (before, the
    step counted as never applied: no undo, the record purged, the NIC left in the pod)."""
    node = Node()
    real = Store.put_state
    writes: list[int] = []

    def put_state(self: Store, *a: Any, **kw: Any) -> Any:
        writes.append(1)
        if len(writes) == 2:  # the pending record, then the record of the move
            raise IOFailure("injected: no space left on device")
        return real(self, *a, **kw)
    monkeypatch.setattr(Store, "put_state", put_state)
    with pytest.raises(IOFailure, match="no space left"):
        _apply(node, tmp_path, [EXCL])
    assert node.pod is not None
    assert sorted(lk.name for lk in node.kernel.port(node.pod).links()) == ["eth0", "lo"]
    assert node.kernel.port(node.host).require("rnic0").mtu == 9000
    assert os.listdir(tmp_path / "data" / "state") == []
