"""What a pod leaves on an exclusive NIC (no root): the links it stacked on it, found
through IFLA_LINK (recursively), and the alternative names ADD did not record; the
kernel-facing tests are tests/faults/test_fault_exclusive_links.py."""

from __future__ import annotations

import logging

import pytest
from support.fakes.netlink import FakeKernel

from rdma_cni.datapath.altnames import clean_altnames, restore_altnames
from rdma_cni.datapath.stacked import stacked
from rdma_cni.vocab.netlink import Link
from rdma_cni.vocab.plan import IfacePlan


def link(index: int, iflink: int | None = None, nsid: int | None = None) -> Link:
    return Link(index, f"l{index}", 1500, "02:00:00:00:00:01", "macvlan", True,
                iflink=iflink, link_netnsid=nsid)


def test_stacked_finds_links_on_links_uppermost_first() -> None:
    nic, other = 5, 9  # the NIC: link 5 of the netns the pod knows by id 7
    links = [link(1), link(2, 3), link(3, 2),  # a veth pair of the pod's own
             link(4, 5, 0),  # eth0: link 5 of another netns (the node's)
             link(10, nic, 7), link(11, 10), link(12, 11),  # stacked, and on that
             link(13, nic, 7), link(14, other)]
    assert [lk.index for lk in stacked(links, nic, 7)] == [12, 11, 13, 10]
    assert stacked(links, nic, 8) == []
    # the same netns (None): the NIC itself is never its own upper
    assert [lk.index for lk in stacked([link(5, 5), link(6, 5)], 5, None)] == [6]


def plan(altnames: list[str] | None) -> IfacePlan:
    ident = {"kind": "veth"} if altnames is None else {"kind": "veth", "altnames": altnames}
    return IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1500,
                     table=100, identity=ident)


def _nic(names: tuple[str, ...]):  # type: ignore[no-untyped-def]
    kernel = FakeKernel()
    port = kernel.port(kernel.host)
    kernel.add_nic(kernel.host, "eth1")
    for alt in names:
        port.add_altname("eth1", alt, "add")
    return port


def test_only_recorded_alternative_names_go_home() -> None:
    port = _nic(("rail0", "rnic1", "rnic0"))
    clean_altnames(port, "eth1", plan(["rail0", "gone0"]), lambda n: False)
    assert port.require("eth1").altnames == ("rail0",)
    restore_altnames(port, "eth1", plan(["rail0", "gone0"]))
    assert port.require("eth1").altnames == ("rail0", "gone0")


def test_a_record_without_alternative_names_loses_only_those_in_the_way() -> None:
    """A record of an earlier release: the NIC's own host name and names taken on the
    host go; any other may be the host's (kept)."""
    port = _nic(("rail0", "rnic1", "rnic0"))
    clean_altnames(port, "eth1", plan(None), lambda n: n == "rnic1")
    assert port.require("eth1").altnames == ("rail0",)
    restore_altnames(port, "eth1", plan(None))
    assert port.require("eth1").altnames == ("rail0",)


def test_a_recorded_name_taken_meanwhile_is_left_out(caplog: pytest.LogCaptureFixture
                                                     ) -> None:
    port = _nic(())
    port.kernel.add_nic(port.ns, "rail0")
    with caplog.at_level(logging.WARNING, "rdma_cni"):
        restore_altnames(port, "eth1", plan(["rail0"]))
    assert port.require("eth1").altnames == ()
    assert "restore the alternative name \"rail0\" of eth1" in caplog.text
