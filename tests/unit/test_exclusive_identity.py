"""Which link DEL takes for an exclusive NIC (no root): only the device ADD recorded,
never a look-alike a pod can make (a veth with the NIC's name, MAC and our mark)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rdma_cni.datapath.physical import HOST, POD, find_moved, lookalikes, same_device
from rdma_cni.datapath.plan import IfacePlan
from rdma_cni.datapath.port import Link

MAC = "02:00:00:00:00:01"
MARK = "rdma-cni:abc"
PCI_NIC: dict[str, Any] = {"pci": "0000:03:00.0", "parentDev": "0000:03:00.0",
                           "parentBus": "pci", "permMac": MAC, "mac": MAC, "kind": None,
                           "ifindex": 5, "ifindexNetns": POD}
STAND_IN: dict[str, Any] = {"pci": None, "parentDev": None, "parentBus": None,
                            "permMac": None, "mac": MAC, "kind": "veth", "ifindex": 5,
                            "ifindexNetns": POD}


def link(index: int = 5, name: str = "eth1", **kw: Any) -> Link:
    fields: dict[str, Any] = {"mtu": 1500, "mac": MAC, "kind": None, "up": True,
                              "alias": MARK, **kw}
    return Link(index=index, name=name, **fields)


def plan(identity: dict[str, Any]) -> IfacePlan:
    return IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1500,
                     table=100, identity=identity)


class Links:
    def __init__(self, *links: Link) -> None:
        self._links = list(links)

    def links(self) -> list[Link]:
        return self._links


REAL = link(9, parent_dev="0000:03:00.0", parent_bus="pci", perm_mac=MAC)


def test_a_pci_nic_is_its_bus_device_whatever_its_name_index_or_mac() -> None:
    assert same_device(replace(REAL, name="weird0", mac="02:99:00:00:00:01", alias=None),
                       PCI_NIC, HOST)
    # a veth made to look like it: right name, MAC, mark and even index, no bus device
    assert not same_device(link(5, kind="veth"), PCI_NIC, POD)
    assert not same_device(link(5), PCI_NIC, POD)  # no kind, but no bus device either
    assert not same_device(replace(REAL, parent_dev="0000:04:00.0"), PCI_NIC, POD)
    assert not same_device(replace(REAL, perm_mac="02:00:00:00:00:02"), PCI_NIC, POD)
    assert not same_device(replace(REAL, parent_bus="virtio"), PCI_NIC, POD)


def test_a_nic_without_a_bus_device_is_its_index_in_the_netns_it_was_recorded_in() -> None:
    assert same_device(link(5, kind="veth", alias=None, name="w0"), STAND_IN, POD)
    assert not same_device(link(5, kind="veth"), STAND_IN, HOST)  # index of another netns
    assert not same_device(link(6, kind="veth"), STAND_IN, POD)
    assert not same_device(link(5, kind="macvlan"), STAND_IN, POD)
    assert not same_device(link(5, kind="veth", parent_dev="x"), STAND_IN, POD)


def test_on_the_host_a_kernel_that_does_not_say_the_bus_device_has_sysfs_say_it() -> None:
    ident = {**PCI_NIC, "parentDev": None, "parentBus": None}
    paths = {"eth1": "sys/devices/pci0000:00/0000:03:00.0",  # sys/class/net/eth1/device
             "other": "sys/devices/pci0000:00/0000:04:00.0", "fake": None}
    assert same_device(link(11, perm_mac=MAC), ident, HOST, paths.get)
    assert not same_device(link(11, name="other", perm_mac=MAC), ident, HOST, paths.get)
    # no sysfs device (virtual): only the index rule, in the netns it was recorded in
    assert not same_device(link(11, name="fake", perm_mac=MAC), ident, HOST, paths.get)
    assert not same_device(link(5, name="fake", perm_mac=MAC), ident, HOST, paths.get)


def test_find_moved_takes_the_device_and_never_the_look_alike() -> None:
    fake = link(12, kind="veth")
    assert find_moved(Links(fake, replace(REAL, name="hidden")), plan(PCI_NIC), MARK,  # type: ignore[arg-type]
                      POD) == "hidden"
    assert find_moved(Links(fake), plan(PCI_NIC), MARK, POD) is None  # type: ignore[arg-type]
    assert lookalikes(Links(fake, link(13, kind="veth", mac="02:aa:00:00:00:01", alias=None)),  # type: ignore[arg-type]
                      plan(PCI_NIC), MARK) == ["eth1"]


def test_records_of_earlier_releases_are_found_as_before_but_a_bus_device_binds() -> None:
    legacy = {"pci": None, "parentDev": None, "permMac": None, "mac": MAC}
    assert find_moved(Links(link(7, kind="veth", alias=None)), plan(legacy), MARK,  # type: ignore[arg-type]
                      POD) == "eth1"
    legacy_pci = {"pci": "0000:03:00.0", "parentDev": "0000:03:00.0", "permMac": MAC,
                  "mac": MAC}
    assert find_moved(Links(link(7, kind="veth")), plan(legacy_pci), MARK, POD) is None  # type: ignore[arg-type]
    assert find_moved(Links(link(7, kind="veth"), REAL), plan(legacy_pci), MARK,  # type: ignore[arg-type]
                      POD) == "eth1"
