"""The DEL and CHECK command handlers over the in-memory kernel (no root): a store in a
temp dir holds what ADD records, the fake node holds what ADD makes (by the real
executor), and the handlers run as the CNI dispatcher calls them. Their Sessions take
the fake through ``rdma_cni.datapath.session.default_ops``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.fakenode import POD, PRIO, SHARED, Node, add

from rdma_cni.cni.commands.check import cmd_check
from rdma_cni.cni.commands.delete import cmd_del
from rdma_cni.cni.request import Request
from rdma_cni.datapath import session as session_mod
from rdma_cni.datapath.teardown import marker_of
from rdma_cni.errors import CheckMismatch
from rdma_cni.store.core import Store
from rdma_cni.store.state import make_state
from rdma_cni.vocab.kinds import READY

BLOCKS: list[tuple[int, Any]] = [(0, {}), (1, {})]


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> Node:
    n = Node()
    monkeypatch.setattr(session_mod, "default_ops", n.kernel)
    return n


def request(tmp_path: Path, command: str, netns: str = POD) -> Request:
    conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": "rdma", "type": "rdma-cni",
                            "mode": "shared-multi", "dataDir": str(tmp_path / "data")}
    return Request(command, conf, "1.0.0", container_id="c0ffee", netns=netns, ifname="eth0")


def attach(node: Node, tmp_path: Path) -> Store:
    """What a finished ADD of SHARED leaves: marked links, reservations, the ready record."""
    key = request(tmp_path, "ADD").key
    add(node, SHARED, marker_of(key.digest()))
    store = Store(str(tmp_path / "data"))
    for p in SHARED:
        assert p.address is not None
        assert store.reserve_ip("198.51.100.0/26", p.address.ip, key, p.name)
    store.put_state(key, make_state(READY, "shared-multi", POD, "", "", PRIO,
                                    SHARED, {"interfaces": []}))
    return store


def test_check_passes_on_an_intact_attachment(node: Node, tmp_path: Path) -> None:
    attach(node, tmp_path)
    cmd_check(request(tmp_path, "CHECK"), BLOCKS)


@pytest.mark.parametrize(("damage", "says"), [
    (lambda pod: pod.delete_link("eth2"), "interface eth2 is missing"),
    (lambda pod: pod.set_alias("eth1", "other", "alias"), "eth1 in /run/netns/pod1 is not ours"),
    (lambda pod: pod.del_rule("198.51.100.10", 100, PRIO), "rule from 198.51.100.10 lookup 100"),
    (lambda pod: pod.set_down("eth2", "down"), "route 198.51.100.0/26 dev eth2 is missing"),
])
def test_check_names_what_is_damaged(node: Node, tmp_path: Path, damage: Any,
                                     says: str) -> None:
    attach(node, tmp_path)
    assert node.pod is not None
    damage(node.kernel.port(node.pod))
    with pytest.raises(CheckMismatch, match=says):
        cmd_check(request(tmp_path, "CHECK"), BLOCKS)


def test_check_without_a_record(node: Node, tmp_path: Path) -> None:
    cmd_check(request(tmp_path, "CHECK"), [])
    with pytest.raises(CheckMismatch, match="no RDMA attachment recorded"):
        cmd_check(request(tmp_path, "CHECK"), BLOCKS)


def test_del_removes_links_rules_reservations_and_state(node: Node, tmp_path: Path) -> None:
    before = node.view()
    store = attach(node, tmp_path)
    cmd_del(request(tmp_path, "DEL"))
    assert node.view() == before
    key = request(tmp_path, "DEL").key
    assert store.get_state(key) is None and store.ips_of(key) == []
    cmd_del(request(tmp_path, "DEL"))  # nothing left: still success
    assert node.view() == before


def test_del_with_the_pod_netns_gone_or_unnamed_releases_the_store(node: Node,
                                                                    tmp_path: Path) -> None:
    store = attach(node, tmp_path)
    node.kill_pod()
    cmd_del(request(tmp_path, "DEL", netns=""))
    key = request(tmp_path, "DEL").key
    assert store.get_state(key) is None and store.ips_of(key) == []


def test_del_of_what_was_never_added(node: Node, tmp_path: Path) -> None:
    before = node.view()
    cmd_del(request(tmp_path, "DEL"))
    assert node.view() == before
