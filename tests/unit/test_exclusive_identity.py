"""Which link DEL takes for an exclusive NIC (no root): only the device ADD recorded,
never a look-alike a pod can make (a veth with the NIC's name, MAC and our mark)."""

from __future__ import annotations

from typing import Any

from rdma_cni.datapath.physical import (
    HOST,
    POD,
    find_moved,
    lookalikes,
    peer_points_back,
    same_device,
    unprovable,
)
from rdma_cni.datapath.plan import identity_of
from rdma_cni.records import replace
from rdma_cni.vocab.netlink import Link
from rdma_cni.vocab.plan import IfacePlan, NicFacts

MAC = "02:00:00:00:00:01"
MARK = "rdma-cni:abc"
PCI_NIC: dict[str, Any] = {"pci": "0000:03:00.0", "parentDev": "0000:03:00.0",
                           "parentBus": "pci", "permMac": MAC, "mac": MAC, "kind": None,
                           "ifindex": 5, "ifindexNetns": POD}
#: a veth stand-in as a record without its peer has it (written before ADD recorded one)
STAND_IN: dict[str, Any] = {"pci": None, "parentDev": None, "parentBus": None,
                            "permMac": None, "mac": MAC, "kind": "veth", "ifindex": 5,
                            "ifindexNetns": POD}
#: the same with its peer: index 9 in the netns the host knows as id 0
VETH = {**STAND_IN, "peerIndex": 9, "peerNetnsid": 0}
POD_FD, POD_NSID = 77, 3


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


class Host:
    """The host's view: its links by (netns id, index) and the ids it gives netns fds."""

    def __init__(self, *peers: tuple[int | None, Link], ids: dict[int, int] | None = None
                 ) -> None:
        self.peers = {(nsid, lk.index): lk for nsid, lk in peers}
        self.ids = {POD_FD: POD_NSID} if ids is None else ids

    def link_at(self, index: int, netnsid: int | None = None) -> Link | None:
        return self.peers.get((netnsid, index))

    def netnsid(self, fd: int) -> int | None:
        return self.ids.get(fd)


def peer(points_at: int = 5, nsid: int | None = POD_NSID, kind: str = "veth") -> Link:
    return link(9, "frnic0", kind=kind, alias=None, iflink=points_at, link_netnsid=nsid)


def test_a_veth_stand_in_is_the_veth_its_recorded_peer_points_back_at() -> None:
    check = peer_points_back(Host((0, peer())), POD_FD, VETH)  # type: ignore[arg-type]
    assert same_device(link(5, kind="veth"), VETH, POD, peer=check)
    # moved away and back: another index, still the one the peer points at
    moved = peer_points_back(Host((0, peer(points_at=8))), POD_FD, VETH)  # type: ignore[arg-type]
    assert same_device(link(8, kind="veth"), VETH, POD, peer=moved)


def test_a_look_alike_with_the_nics_kind_name_mac_mark_and_index_is_not_it() -> None:
    """The pod hid the NIC in a netns of its own (the peer points there) and made a veth
    under the index it freed."""
    fake = link(5, kind="veth")
    hidden = peer_points_back(Host((0, peer(nsid=4))), POD_FD, VETH)  # type: ignore[arg-type]
    assert not same_device(fake, VETH, POD, peer=hidden)
    assert find_moved(Links(fake), plan(VETH), MARK, POD, peer=hidden) is None  # type: ignore[arg-type]
    for host in (Host(), Host((0, peer(kind="bridge"))), Host((0, peer(points_at=6))),
                 Host((1, peer())), Host((0, peer(nsid=None))), Host((0, peer()), ids={})):
        assert not same_device(fake, VETH, POD,
                               peer=peer_points_back(host, POD_FD, VETH))  # type: ignore[arg-type]
    assert not same_device(fake, VETH, POD)  # no way to ask the host: never
    # on the host, where a pod makes no links, the index rule of the record stands
    assert same_device(link(5, kind="veth"), {**VETH, "ifindexNetns": HOST}, HOST)


def test_a_record_without_a_peer_keeps_the_index_rule() -> None:
    assert same_device(link(5, kind="veth"), STAND_IN, POD)


def test_add_records_a_veths_peer_and_refuses_what_has_nothing_unforgeable() -> None:
    facts = NicFacts(name="rnic0", index=4, mtu=1500, mac=MAC, kind="veth", iflink=9,
                     link_netnsid=0)
    ident = identity_of(facts)
    assert (ident["peerIndex"], ident["peerNetnsid"]) == (9, 0)
    assert unprovable(ident) is None
    assert unprovable(PCI_NIC) is None
    assert unprovable({**PCI_NIC, "parentDev": None, "parentBus": None}) is None  # sysfs
    assert "peerIndex" not in identity_of(NicFacts(name="rnic0", index=4, mtu=1500, mac=MAC))
    for kind, what in (("ifb", "a link of kind ifb"), ("vxlan", "a link of kind vxlan"),
                       (None, "a netdev"), ("veth", "a link of kind veth")):
        bare = {**STAND_IN, "kind": kind}
        assert unprovable(bare) == (f"it is {what} with no bus device, which a pod could "
                                    "copy (kind, name, MAC and index) for DEL to take back "
                                    "in its place")
