"""Sysfs adapter, NIC discovery and device-ID mapping on fake sysfs trees."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import AllocationError
from rdma_cni.node.discovery import discover, missing, normalize_ids, resolve_device_id
from rdma_cni.vocab.nic import Nic

sys.path.insert(0, str(Path(__file__).parent))
from support.fakes.sysfs import CountingSysfs, FakeSys


@pytest.fixture
def node(tmp_path: Path) -> Sysfs:
    fs = FakeSys(tmp_path)
    fs.netdev("lo")
    fs.netdev("eth0", pci="0000:00:03.0")  # plain virtio, no RDMA
    fs.netdev("eth1", pci="0000:3b:00.0", numa=0)
    fs.ibdev("mlx5_0", pci="0000:3b:00.0", numa=0, uverbs="uverbs0")
    fs.netdev("eth2", pci="0000:af:00.0", numa=1)
    fs.ibdev("mlx5_1", pci="0000:af:00.0", numa=1, uverbs="uverbs1", state="1: DOWN")
    fs.netdev("ib0", pci="0000:d8:00.0", numa=1)  # InfiniBand link layer: not RoCE
    fs.ibdev("mlx5_2", pci="0000:d8:00.0", ports={1: "InfiniBand"}, uverbs="uverbs2")
    # a RoCE bond: no device/infiniband, named by the GID table of mlx5_bond_0
    fs.netdev("bond0")
    fs.netdev("ens5f0", pci="0000:5e:00.0", numa=0, master="bond0")  # slave: not a NIC
    fs.ibdev("mlx5_bond_0", pci="0000:5e:00.0", numa=0, uverbs="uverbs3")
    fs.roce_pair("mlx5_bond_0", 1, 2, "192.0.2.1", "bond0")
    # a pod's upper device named like a host NIC without RDMA must not count
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.50", "eth0")
    fs.netdev("veth9")
    return Sysfs(str(tmp_path))


def test_sysfs_adapter(tmp_path: Path) -> None:
    fs = FakeSys(tmp_path)
    fs.netdev("eth1", pci="0000:3b:00.0", mtu=9000)
    fs.unreadable("sys/class/net/eth1/broken")
    s = Sysfs(str(tmp_path))
    assert s.read("sys/class/net/eth1/mtu") == "9000"
    assert s.read("/sys/class/net/eth1/mtu") == "9000"
    assert s.read("sys/class/net/eth1/broken") is None
    assert s.read("sys/class/net/eth9/mtu") is None
    assert s.listdir("sys/class/net") == ["eth1"]
    assert s.listdir("sys/nothing") == []
    assert s.realpath("sys/class/net/eth1/device") == "sys/devices/pci0000:00/0000:3b:00.0"
    assert s.realpath("sys/class/net/eth9") is None
    assert s.exists("sys/class/net/eth1") and not s.exists("sys/class/net/eth9")


def test_read_each_reads_the_readable_files_of_a_directory(tmp_path: Path) -> None:
    fs = FakeSys(tmp_path)
    fs.ibdev("mlx5_0", pci="0000:3b:00.0", slots=4)
    fs.roce_pair("mlx5_0", 1, 1, "192.0.2.7", "eth1")
    s = Sysfs(str(tmp_path))
    ndevs = "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs"
    assert s.read_each(ndevs) == {"1": "eth1", "2": "eth1"}  # slots 0 and 3 fail to read
    assert s.read_each(ndevs) == {i: v for i in s.listdir(ndevs)
                                  if (v := s.read(f"{ndevs}/{i}")) is not None}
    assert s.read_each("sys/class/infiniband/mlx5_9/ports/1/gid_attrs/ndevs") == {}
    assert s.read_each(f"{ndevs}/1") == {}  # a file, not a directory


def test_a_single_port_nic_is_built_without_reading_its_gid_table(tmp_path: Path) -> None:
    fs = FakeSys(tmp_path)
    fs.netdev("eth1", pci="0000:3b:00.0", numa=0)
    fs.ibdev("mlx5_0", pci="0000:3b:00.0", numa=0, uverbs="uverbs0", slots=256)
    fs.roce_pair("mlx5_0", 1, 0, "192.0.2.1", "eth1")
    sysfs = CountingSysfs(str(tmp_path))
    [nic] = discover(sysfs, ["eth1"])
    assert (nic.ibdev, nic.port, nic.link_layer) == ("mlx5_0", 1, "Ethernet")
    assert [p for p in sysfs.asked if "gid_attrs" in p] == []


def test_a_two_port_nic_finds_its_port_in_the_gid_table(tmp_path: Path) -> None:
    fs = FakeSys(tmp_path)
    fs.netdev("eth1", pci="0000:3b:00.0", dev_port=0)
    fs.ibdev("mlx4_0", pci="0000:3b:00.0", ports={1: "Ethernet", 2: "Ethernet"})
    fs.roce_pair("mlx4_0", 2, 0, "192.0.2.1", "eth1")
    [nic] = discover(Sysfs(str(tmp_path)), ["eth1"])
    assert nic.port == 2  # named by port 2's GID table, not dev_port 0 (port 1)


def test_a_pod_on_the_other_port_naming_its_interface_alike_moves_no_nic(
        tmp_path: Path) -> None:
    fs = FakeSys(tmp_path)
    fs.netdev("eth1", pci="0000:3b:00.0", dev_port=1)
    fs.ibdev("mlx4_0", pci="0000:3b:00.0", ports={1: "Ethernet", 2: "Ethernet"})
    fs.roce_pair("mlx4_0", 2, 0, "192.0.2.1", "eth1")
    fs.roce_pair("mlx4_0", 1, 2, "192.0.2.9", "eth1")  # a pod's interface on port 1
    [nic] = discover(Sysfs(str(tmp_path)), ["eth1"])
    assert nic.port == 2


def test_discover_roce_nics(node: Sysfs) -> None:
    nics = discover(node)
    assert [n.netdev for n in nics] == ["bond0", "eth1", "eth2"]
    eth1 = nics[1]
    assert eth1 == Nic("eth1", "mlx5_0", 1, "0000:3b:00.0", 0, "Ethernet", "ACTIVE", "uverbs0")
    assert nics[2].state == "DOWN" and nics[2].numa == 1  # health, not a filter
    bond = nics[0]
    assert (bond.ibdev, bond.port, bond.pci, bond.uverbs) == (
        "mlx5_bond_0",
        1,
        "0000:5e:00.0",
        "uverbs3",
    )
    assert bond.device_id == "0000:5e:00.0"


def test_a_pods_interface_named_like_a_host_netdev_makes_no_roce_nic(
        node: Sysfs, tmp_path: Path) -> None:
    """A GID table names a pod's interface by the name the pod gave it: named like the
    host's bridge, or like the host's RoCE bond on another RDMA device's port."""
    fs = FakeSys(tmp_path)
    fs.netdev("cni0")
    fs.roce_pair("mlx5_0", 1, 6, "192.0.2.77", "cni0")
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.78", "bond0")  # sorts before mlx5_bond_0
    nics = discover(node)
    assert [n.netdev for n in nics] == ["bond0", "eth1", "eth2"]
    assert nics[0].ibdev == "mlx5_bond_0"
    assert discover(node, ["cni0", "bond0"]) == [Nic("cni0"), nics[0]]


def test_an_upper_of_a_roce_nic_is_found_through_the_gid_table(node: Sysfs,
                                                              tmp_path: Path) -> None:
    fs = FakeSys(tmp_path)
    fs.netdev("eth1.100", lower="eth1")  # a VLAN on the NIC, with an address
    fs.roce_pair("mlx5_0", 1, 6, "192.0.2.100", "eth1.100")
    fs.netdev("bond0.7", lower="bond0")  # and one on the bond: two levels down
    fs.roce_pair("mlx5_bond_0", 1, 6, "192.0.2.107", "bond0.7")
    found = {n.netdev: n.ibdev for n in discover(node)}
    assert found == {"bond0": "mlx5_bond_0", "bond0.7": "mlx5_bond_0", "eth1": "mlx5_0",
                     "eth1.100": "mlx5_0", "eth2": "mlx5_1"}


def test_soft_roce_on_a_virtual_netdev_is_its_parents(tmp_path: Path) -> None:
    fs = FakeSys(tmp_path)
    fs.netdev("veth0")
    fs.netdev("veth1")
    fs.ibdev("rxe0", uverbs="uverbs0")
    fs.write("sys/class/infiniband/rxe0/parent", "veth0")
    fs.roce_pair("rxe0", 1, 0, "192.0.2.1", "veth0")
    fs.roce_pair("rxe0", 1, 2, "192.0.2.2", "veth1")  # a pod's interface named veth1
    [nic] = discover(Sysfs(str(tmp_path)))
    assert (nic.netdev, nic.ibdev, nic.port) == ("veth0", "rxe0", 1)


def test_discovery_reads_a_gid_table_only_for_a_netdev_without_a_device_on_it(
        tmp_path: Path) -> None:
    fs = FakeSys(tmp_path)
    for i in range(4):
        fs.netdev(f"eth{i}", pci=f"0000:{0x3b + i:02x}:00.0")
        fs.ibdev(f"mlx5_{i}", pci=f"0000:{0x3b + i:02x}:00.0", slots=64)
        fs.roce_pair(f"mlx5_{i}", 1, 0, f"192.0.2.{i + 1}", f"eth{i}")
        fs.netdev(f"veth{i}")  # the host end of a pod's veth: on no RDMA device
    sysfs = CountingSysfs(str(tmp_path))
    assert [n.netdev for n in discover(sysfs)] == ["eth0", "eth1", "eth2", "eth3"]
    assert [p for p in sysfs.asked if "gid_attrs" in p] == []

    fs.netdev("eth2.5", lower="eth2")  # a VLAN on one NIC: that NIC's table, until found
    fs.roce_pair("mlx5_2", 1, 2, "192.0.2.25", "eth2.5")
    sysfs.asked.clear()
    assert "eth2.5" in [n.netdev for n in discover(sysfs)]
    assert {p.split("/")[3] for p in sysfs.asked if "gid_attrs" in p} == {"mlx5_2"}


def test_discover_pinned(node: Sysfs) -> None:
    nics = discover(node, ["veth9", "eth2", "gone0", "ib0"])
    assert [n.netdev for n in nics] == ["veth9", "eth2", "gone0", "ib0"]
    assert nics[0] == Nic("veth9") and nics[0].device_id == "veth9"
    assert nics[1].ibdev == "mlx5_1"
    assert nics[2] == Nic("gone0")
    assert nics[3].link_layer == "InfiniBand"  # pinned: no RoCE check
    assert missing(node, nics) == ["gone0"]


def test_normalize_ids() -> None:
    ids = ["0000:af:00.0@3", "0000:3b:00.0@1", "0000:af:00.0@0", "mlx5_1", "0000:3b:00.0"]
    assert normalize_ids(ids) == ["0000:3b:00.0", "0000:af:00.0", "mlx5_1"]
    assert normalize_ids([]) == []


@pytest.mark.parametrize(
    ("dev_id", "netdev"),
    [
        ("0000:3b:00.0", "eth1"),
        ("0000:AF:00.0@3", "eth2"),
        ("mlx5_1", "eth2"),
        ("eth1", "eth1"),
        ("veth9", "veth9"),
        ("mlx5_bond_0", "bond0"),
    ],
)
def test_resolve_device_id(node: Sysfs, dev_id: str, netdev: str) -> None:
    nics = discover(node) + discover(node, ["veth9"])
    assert resolve_device_id(node, nics, dev_id).netdev == netdev


def test_resolve_unknown(node: Sysfs) -> None:
    with pytest.raises(AllocationError, match=r"0000:99:00\.0@2") as exc:
        resolve_device_id(node, discover(node), "0000:99:00.0@2")
    assert exc.value.code == 101


def test_virtio_nic_maps_to_the_pci_function_above_it(tmp_path: Path) -> None:
    """virtio-net: class/net/<if>/device is .../<pci>/virtio10; the NIC's device ID is
    the PCI function (as the device plugin advertises it), with that function's NUMA."""
    fs = FakeSys(tmp_path)
    pci = fs.pci("0000:00:0c.0", numa=1)
    fs.write(f"{pci}/virtio10/net/rnic1/address", "52:54:00:12:34:57")
    fs.symlink("sys/class/net/rnic1", f"{pci}/virtio10/net/rnic1")
    fs.symlink(f"{pci}/virtio10/net/rnic1/device", f"{pci}/virtio10")
    sysfs = Sysfs(str(tmp_path))
    [nic] = discover(sysfs, ["rnic1"])
    assert (nic.pci, nic.numa, nic.device_id) == ("0000:00:0c.0", 1, "0000:00:0c.0")
    assert resolve_device_id(sysfs, [nic], "0000:00:0c.0").netdev == "rnic1"
