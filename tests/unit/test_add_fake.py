"""The whole ADD command (``cmd_add``) over the in-memory kernel and a fake sysfs (no
root), with a real store in a temp dir: the pod gets its interfaces with addresses from
each NIC's subnet, the state is saved as ready, a repeated ADD returns the same result
without touching the pod, and DEL leaves the node as it was."""

from __future__ import annotations

import time
from ipaddress import IPv4Interface
from pathlib import Path
from typing import Any

import pytest
from support.fakenode import POD, Node
from support.fakes.sysfs import CountingSysfs, FakeSys

from rdma_cni.cni.commands.add import cmd_add
from rdma_cni.cni.commands.delete import cmd_del
from rdma_cni.cni.request import Request
from rdma_cni.datapath import session as session_mod
from rdma_cni.errors import AllocationError, ConfigError, IOFailure, NicUnavailable
from rdma_cni.node import nics as nics_mod
from rdma_cni.store.boot import this_boot
from rdma_cni.store.core import Store
from rdma_cni.vocab.kinds import READY
from rdma_cni.vocab.netlink import Route

BLOCKS: list[tuple[int, Any]] = [(0, {"cniConf": {"name": "rdma"}}),
                                 (1, {"cniConf": {"name": "rdma"}})]
PREV = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": POD}],
        "ips": [{"address": "203.0.113.5/24", "interface": 0}], "routes": []}


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    n = Node()
    n.kernel.port(n.host).add_address("rnic1", IPv4Interface("198.51.100.65/26"))
    monkeypatch.setattr(session_mod, "default_ops", n.kernel)
    fs = FakeSys(tmp_path / "sysroot")
    fs.netdev("rnic0", mac="02:00:00:00:00:01", mtu=9000, ifindex=2)
    fs.netdev("rnic1", mac="02:00:00:00:00:02", mtu=4200, ifindex=3)
    monkeypatch.setattr(nics_mod, "SYSFS_ROOT", str(fs.root))
    return n


def request(tmp_path: Path, command: str, devices: list[str] | None = None,
            **extra: Any) -> Request:
    conf: dict[str, Any] = {"cniVersion": "1.0.0", "name": "rdma", "type": "rdma-cni",
                            "mode": "shared-multi", "allocation": "config",
                            "devices": devices or ["rnic0", "rnic1"],
                            "dataDir": str(tmp_path / "data"), **extra}
    if command == "ADD":
        conf["prevResult"] = PREV
    return Request(command, conf, "1.0.0", container_id="c0ffee", netns=POD, ifname="eth0",
                   prev_result=PREV if command == "ADD" else None)


def pod_view(node: Node) -> dict[str, Any]:
    assert node.pod is not None
    port = node.kernel.port(node.pod)
    return {lk.name: (lk.kind, lk.mtu, sorted(str(a) for i, a in port.addresses()
                                               if i == lk.index))
            for lk in port.links()}


def test_add_repeat_and_del(node: Node, tmp_path: Path) -> None:
    before = node.view()
    out = cmd_add(request(tmp_path, "ADD"), BLOCKS)

    assert [i["name"] for i in out["interfaces"]] == ["eth0", "eth1", "eth2"]
    assert out["ips"][0] == PREV["ips"][0]
    ours = [(ip["address"], ip["interface"]) for ip in out["ips"][1:]]
    assert ours == [("198.51.100.2/26", 1), ("198.51.100.66/26", 2)]  # each NIC's subnet
    view = pod_view(node)
    assert view["eth1"][0] == "macvlan" and view["eth1"][1] == 9000
    assert view["eth2"][0] == "macvlan" and view["eth2"][1] == 4200
    assert view["eth1"][2] == [ours[0][0]] and view["eth2"][2] == [ours[1][0]]
    assert node.pod is not None
    assert node.kernel.port(node.pod).require("eth1").mac == out["interfaces"][1]["mac"]
    store = Store(str(tmp_path / "data"))
    saved = store.get_state(request(tmp_path, "ADD").key)
    assert saved is not None and saved.status == READY and saved.result is not None
    # when it was written, on the clock the agent times its passes by
    assert saved.written is not None and saved.written.boot == this_boot()
    assert 0 <= time.clock_gettime(time.CLOCK_BOOTTIME) - saved.written.boottime < 60

    again = cmd_add(request(tmp_path, "ADD"), BLOCKS)  # the runtime retried the ADD
    assert again == out
    assert pod_view(node) == view

    cmd_del(request(tmp_path, "DEL"))
    assert node.view() == before
    assert sorted(p.name for p in (tmp_path / "data" / "state").iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "data" / "addrs").iterdir()) == []


def test_a_ready_record_that_cannot_be_written_leaves_nothing(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk when ADD writes its ready record: the ADD fails with 5 and rolls
    back like any other failure (it left the interfaces, the reservations and the
    pending record, which a DEL on the same full disk could not take over)."""
    before = node.view()
    real = Store.prepare_state

    def full(self: Store, key: Any, state: Any) -> str:
        if state.status == READY:
            raise IOFailure("failed to write the record: No space left on device")
        return real(self, key, state)

    monkeypatch.setattr(Store, "prepare_state", full)
    with pytest.raises(IOFailure):
        cmd_add(request(tmp_path, "ADD"), BLOCKS)
    assert node.view() == before
    for sub in ("state", "addrs"):
        assert sorted(p.name for p in (tmp_path / "data" / sub).iterdir()) == []


def test_an_attachment_of_0_1_0_for_a_named_entry_is_checked_repeated_and_collected(
        node: Node, tmp_path: Path) -> None:
    """Release 0.1.0 keyed records without the entry's cniConfName. An attachment it made
    for the entry ``rdma-b`` (the record under the key without it, no conf name in it)
    is this entry's after the upgrade: CHECK passes (it said 105), a repeated ADD
    returns its result (it made new interfaces and failed, 103), and GC collects it once
    the network no longer lists it (it was skipped for good)."""
    from rdma_cni.cni.commands.check import cmd_check
    from rdma_cni.cni.commands.gc import cmd_gc

    before = node.view()
    out = cmd_add(request(tmp_path, "ADD"), BLOCKS)  # made under the key 0.1.0 used
    store = Store(str(tmp_path / "data"))
    old_key = request(tmp_path, "ADD").key
    saved = store.get_state(old_key)
    assert saved is not None and old_key.instance == ""
    store.put_state(old_key, saved.with_(conf_name=""))  # as 0.1.0 wrote it
    named = [(k, {"cniConf": {"name": "rdma-b"}}) for k, _ in BLOCKS]
    cmd_check(request(tmp_path, "CHECK", cniConfName="rdma-b"), named)
    assert cmd_add(request(tmp_path, "ADD", cniConfName="rdma-b"), named) == out
    cmd_gc(request(tmp_path, "GC", cniConfName="rdma-b",
                   **{"cni.dev/valid-attachments": [{"containerID": "other", "ifname": "eth0"}]}))
    assert node.view() == before
    assert list((tmp_path / "data" / "state").iterdir()) == []
    assert list((tmp_path / "data" / "addrs").iterdir()) == []


def test_an_add_reads_of_the_pinned_nics_only_the_one_it_gives(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sysfs = CountingSysfs(nics_mod.SYSFS_ROOT)
    monkeypatch.setattr(nics_mod, "Sysfs", lambda root: sysfs)
    out = cmd_add(request(tmp_path, "ADD"), BLOCKS[:1])
    assert [i["name"] for i in out["interfaces"]] == ["eth0", "eth1"]
    assert [p for p in sysfs.asked if "/rnic0" in p]
    assert [p for p in sysfs.asked if "/rnic1" in p] == []
    cmd_del(request(tmp_path, "DEL"))


def test_a_nic_missing_from_the_host_is_refused_and_nothing_is_left(
        node: Node, tmp_path: Path) -> None:
    before = node.view()
    with pytest.raises(NicUnavailable, match="rnic9"):
        cmd_add(request(tmp_path, "ADD", ["rnic0", "rnic9"]), BLOCKS)
    assert node.view() == before
    data = tmp_path / "data"
    assert not (data / "state").exists() or list((data / "state").iterdir()) == []
    assert not (data / "addrs").exists() or list((data / "addrs").iterdir()) == []


# -- the node's own NIC stays with the node ---------------------------------------------
def _default_route(node: Node, nic: str, metric: int = 0, via: str = "198.51.100.62") -> None:
    hp = node.kernel.port(node.host)
    hp.add_route(Route("0.0.0.0/0", via, hp.require(nic).index, 254, proto=3,
                       priority=metric, onlink=True))


def _refused(node: Node, tmp_path: Path, conf: dict[str, Any], why: str) -> None:
    before = node.view()
    with pytest.raises(ConfigError) as exc:
        cmd_add(request(tmp_path, "ADD", **conf), BLOCKS)
    assert exc.value.code == 7 and why in exc.value.msg and "\n" not in exc.value.msg
    assert "the node's own NIC is never given to pods" in exc.value.msg
    assert node.view() == before  # nothing made
    assert not list((tmp_path / "data").rglob("*.json"))


def test_devices_naming_the_default_route_nic_are_refused(node: Node, tmp_path: Path) -> None:
    _default_route(node, "rnic0")
    _refused(node, tmp_path, {}, "devices names rnic0, which carries the node's default route")


def test_devices_naming_the_nic_of_the_node_address_are_refused(node: Node,
                                                              tmp_path: Path) -> None:
    _refused(node, tmp_path, {"nodeIPs": ["198.51.100.65"]},
             "devices names rnic1, which holds the node's address 198.51.100.65")


def test_a_nics_own_default_route_of_a_higher_metric_is_not_the_nodes(node: Node,
                                                                      tmp_path: Path) -> None:
    """DHCP on a multi-NIC host gives every NIC a default route of its own metric: only
    the lowest is the node's (here through a NIC that is not an RDMA NIC)."""
    node.kernel.add_nic(node.host, "ens0", 1500, mac="02:00:00:00:00:09")
    node.kernel.port(node.host).add_address("ens0", IPv4Interface("192.0.2.10/24"))
    _default_route(node, "ens0", metric=100, via="192.0.2.1")
    _default_route(node, "rnic0", metric=200)
    out = cmd_add(request(tmp_path, "ADD"), BLOCKS)
    assert [i["name"] for i in out["interfaces"]] == ["eth0", "eth1", "eth2"]


# -- discovery (devices unset) never offers the node's own NIC ---------------------------
def _roce(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nics: list[str]) -> None:
    """``nics`` discovered as RoCE NICs (each with its RDMA device); the pod interfaces'
    GIDs and the RDMA netns mode are the VM tier's (not this fake's)."""
    fs = FakeSys(tmp_path / "roce")
    for i, (nic, mtu) in enumerate((("rnic0", 9000), ("rnic1", 4200))):
        if nic in nics:
            pci = f"0000:0{i + 3}:00.0"
            fs.netdev(nic, pci=pci, mac=f"02:00:00:00:00:0{i + 1}", mtu=mtu, ifindex=i + 2)
            fs.ibdev(f"mlx5_{i}", pci=pci)
    monkeypatch.setattr(nics_mod, "SYSFS_ROOT", str(fs.root))
    monkeypatch.setattr(nics_mod, "wait_gids", lambda plans: None)
    monkeypatch.setattr(nics_mod, "rdma_netns", lambda nc, plans: plans)


def _discovering(tmp_path: Path, command: str, **extra: Any) -> Request:
    req = request(tmp_path, command, **extra)
    del req.conf["devices"]
    return req


def test_discovery_leaves_the_default_route_nic_out(node: Node, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _roce(tmp_path, monkeypatch, ["rnic0", "rnic1"])
    _default_route(node, "rnic0")
    out = cmd_add(_discovering(tmp_path, "ADD"), BLOCKS[:1])
    assert [(ip["address"], ip["interface"]) for ip in out["ips"][1:]] == [
        ("198.51.100.66/26", 1)]  # rnic1's subnet: the pod is on rnic1
    assert pod_view(node)["eth1"][1] == 4200


@pytest.mark.parametrize("own, conf", [("rnic0", {}),
                                       ("rnic1", {"nodeIPs": ["198.51.100.65"]})])
def test_discovery_finding_only_the_nodes_own_nic_offers_none(
        node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own: str,
        conf: dict[str, Any]) -> None:
    _roce(tmp_path, monkeypatch, [own])
    if not conf:
        _default_route(node, own)
    before = node.view()
    with pytest.raises(AllocationError, match=r"^no RDMA NICs on this node \(discovered"):
        cmd_add(_discovering(tmp_path, "ADD", **conf), BLOCKS[:1])
    assert node.view() == before
    assert not list((tmp_path / "data").rglob("*.json"))
