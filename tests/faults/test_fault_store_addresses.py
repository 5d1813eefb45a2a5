"""Issue 14 item 3: reservations are checked by address, whatever subnet they were
made under. Widening a NIC's netmask while a pod holds an address, or two NICs
with overlapping subnets, must never give that address to a second pod.

Oracle: the addresses the kernel shows in each pod (``ip -j addr``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cnirunner import HPC_NET, rdma_blocks, sh

pytestmark = pytest.mark.root


def _readdress(rig, nic: str, old: str, new: str, gw: str = "198.51.100.62") -> None:  # type: ignore[no-untyped-def]
    ns = rig.node.ns
    sh("ip", "-n", ns, "addr", "del", old, "dev", nic)
    sh("ip", "-n", ns, "addr", "add", new, "dev", nic)
    sh("ip", "-n", ns, "route", "replace", HPC_NET, "via", gw, "dev", nic)


def test_widening_the_netmask_keeps_the_held_address(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain("shared-multi")
    a, b = rig.pod(), rig.pod()
    assert chain.add("cid-a", a.path, rdma_blocks(1)).rc == 0
    assert a.addrs("eth1") == ["198.51.100.2/26"]
    _readdress(rig, "rnic0", "198.51.100.1/26", "198.51.100.1/25")
    try:
        run = chain.add("cid-b", b.path, rdma_blocks(1))
        assert run.rc == 0, run
        assert b.addrs("eth1") == ["198.51.100.3/25"], "the held .2 was handed out again"
        assert a.addrs("eth1") == ["198.51.100.2/26"]
        assert chain.delete("cid-b").rc == 0
        assert chain.delete("cid-a").rc == 0
        faults.expect_served("ADD", 2)
    finally:
        _readdress(rig, "rnic0", "198.51.100.1/25", "198.51.100.1/26")


def test_overlapping_subnets_on_two_nics_share_their_addresses(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0", "198.51.100.33/26", gw="198.51.100.62")   # 198.51.100.0/26: .34-.62
    rig.nic("rnic1", "198.51.100.1/25", routes=[])  # 198.51.100.0/25: .2-.126
    a, b = rig.pod(), rig.pod()
    on0 = faults.chain("shared-multi", ("rnic0",))
    on1 = faults.chain("shared-multi", ("rnic1",))
    assert on0.add("cid-a", a.path, rdma_blocks(1)).rc == 0
    assert a.addrs("eth1") == ["198.51.100.34/26"]
    taken = on1.add("cid-b", b.path, rdma_blocks(1, ips=["198.51.100.34"]))
    assert taken.code == 102, taken
    assert "198.51.100.34" in taken.out["msg"] and "reserved" in taken.out["msg"]
    assert b.links().keys() == {"lo", "eth0"}
    free = on1.add("cid-b", b.path, rdma_blocks(1))
    assert free.rc == 0, free
    assert b.addrs("eth1") == ["198.51.100.2/25"]
    assert on1.delete("cid-b").rc == 0
    assert on0.delete("cid-a").rc == 0


def test_reservations_of_the_previous_layout_are_honoured_and_released(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """A reservation written by release 0.1.0 (``ips/<subnet>/<ip>``) holds its address
    against the new by-address layout and is released by its pod's DEL."""
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain("shared-multi")
    a, b = rig.pod(), rig.pod()
    assert chain.add("cid-a", a.path, rdma_blocks(1)).rc == 0
    data = Path(rig.data_dir)
    new = data / "addrs" / "198.51.100.2"
    rec = json.loads(new.read_text())
    legacy = data / "ips" / "198.51.100.0_26" / "198.51.100.2"
    legacy.parent.mkdir(parents=True, mode=0o700)
    legacy.write_text(json.dumps({"key": rec["key"], "ifname": rec["ifname"]}))
    new.unlink()  # exactly what 0.1.0 left on disk
    _readdress(rig, "rnic0", "198.51.100.1/26", "198.51.100.1/25")
    try:
        assert chain.add("cid-b", b.path, rdma_blocks(1)).rc == 0
        assert b.addrs("eth1") == ["198.51.100.3/25"]
        assert chain.delete("cid-a").rc == 0
        assert not legacy.exists()
        assert chain.delete("cid-b").rc == 0
    finally:
        _readdress(rig, "rnic0", "198.51.100.1/25", "198.51.100.1/26")
