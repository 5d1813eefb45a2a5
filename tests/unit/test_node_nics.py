"""The NICs an ADD may use (rdma_cni.node.nics): pinned NICs are read from sysfs when
first asked for, and a device ID is matched as the whole match over every NIC would."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.errors import AllocationError, ConfigError
from rdma_cni.node import nics as node_nics
from rdma_cni.node.discovery import discover, resolve_device_id

sys.path.insert(0, str(Path(__file__).parent))
from support.fakes.sysfs import CountingSysfs, FakeSys

PINNED = ["eth1", "eth2", "bond0", "eth3", "eth4", "gone0"]


class NoPrimary:
    """The host's netlink as primary_nics reads it: no default route, no node address."""

    def route_match(self, dst: str) -> None:
        return None

    def link_at(self, index: int) -> None:
        return None


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CountingSysfs:
    fs = FakeSys(tmp_path)
    for i, name in enumerate(("eth1", "eth2", "eth3", "eth4")):
        pci = f"0000:{0x3b + i:02x}:00.0"
        fs.netdev(name, pci=pci, numa=i % 2)
        fs.ibdev(f"mlx5_{i}", pci=pci, numa=i % 2, uverbs=f"uverbs{i}")
    fs.netdev("bond0")
    fs.netdev("ens5f0", pci="0000:5e:00.0", numa=0, master="bond0")
    fs.ibdev("mlx5_bond_0", pci="0000:5e:00.0", numa=0, uverbs="uverbs9")
    fs.roce_pair("mlx5_bond_0", 1, 2, "192.0.2.1", "bond0")
    sysfs = CountingSysfs(str(tmp_path))
    monkeypatch.setattr(node_nics, "Sysfs", lambda root: sysfs)
    return sysfs


def _conf(devices: list[str] | None) -> Any:
    from types import SimpleNamespace
    return SimpleNamespace(devices=devices, nodeIPs=[])


def _touching(sysfs: CountingSysfs, netdev: str) -> list[str]:
    return [p for p in sysfs.asked if f"/{netdev}/" in p + "/"]


def test_a_pinned_nic_is_read_only_when_asked_for(node: CountingSysfs) -> None:
    nics = node_nics.rdma_nics(_conf(PINNED), NoPrimary())  # type: ignore[arg-type]
    assert nics.names == PINNED
    assert [n.netdev for n in nics.named] == PINNED
    assert node.asked == []  # nothing read yet: the names are the config's
    got = nics.by_netdev(["eth2"])
    assert got == {"eth2": discover(node, ["eth2"])[0]}
    assert got["eth2"].ibdev == "mlx5_1" and got["eth2"].uverbs == "uverbs1"
    for other in ("eth1", "eth3", "eth4", "bond0", "gone0"):
        assert _touching(node, other) == [], other


def test_pinned_nics_read_whole_are_what_discovery_gives(node: CountingSysfs) -> None:
    nics = node_nics.rdma_nics(_conf(PINNED), NoPrimary())  # type: ignore[arg-type]
    assert nics.nics == discover(node, PINNED)


@pytest.mark.parametrize("dev_id", [
    "0000:3d:00.0", "0000:3D:00.0@2", "0000:5e:00.0", "mlx5_3", "eth4", " eth1 ",
    "mlx5_bond_0", "bond0",
])
def test_a_device_id_resolves_as_the_whole_match_does(node: CountingSysfs, dev_id: str) -> None:
    nics = node_nics.rdma_nics(_conf(PINNED), NoPrimary())  # type: ignore[arg-type]
    assert nics.resolve(dev_id) == resolve_device_id(node, discover(node, PINNED), dev_id)


def test_a_pci_address_reads_the_nics_before_it_only(node: CountingSysfs) -> None:
    nics = node_nics.rdma_nics(_conf(PINNED), NoPrimary())  # type: ignore[arg-type]
    assert nics.resolve("0000:3c:00.0@1").netdev == "eth2"
    assert _touching(node, "eth1") and _touching(node, "eth2")
    for later in ("bond0", "eth3", "eth4", "gone0"):
        assert _touching(node, later) == [], later


def test_an_unknown_device_id_is_refused(node: CountingSysfs) -> None:
    nics = node_nics.rdma_nics(_conf(PINNED), NoPrimary())  # type: ignore[arg-type]
    with pytest.raises(AllocationError, match=r"0000:99:00\.0"):
        nics.resolve("0000:99:00.0")


def test_discovered_nics_come_whole(node: CountingSysfs) -> None:
    nics = node_nics.rdma_nics(_conf(None), NoPrimary())  # type: ignore[arg-type]
    assert nics.names == ["bond0", "eth1", "eth2", "eth3", "eth4"]
    asked = len(node.asked)
    got, eth1 = nics.nics, nics.resolve("0000:3b:00.0")
    assert len(node.asked) == asked  # nothing read again
    assert got == discover(node) and eth1 == got[1]


def test_a_pinned_primary_nic_is_refused(node: CountingSysfs,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_nics, "primary_nics",
                        lambda nl, names, ips: {"eth3": "carries the node's default route"})
    with pytest.raises(ConfigError, match="devices names eth3"):
        node_nics.rdma_nics(_conf(PINNED), NoPrimary())  # type: ignore[arg-type]
