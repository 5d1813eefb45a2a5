"""The call sites that read the table of modes: what each mode makes of the same
input (planner, allocation, device list, RDMA netns check, settings, CHECK, doctor,
install). Pure logic, no root."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.cni.commands.check import _reserved
from rdma_cni.datapath.plan import plan_interfaces
from rdma_cni.errors import Code, ConfigError, NicUnavailable, UnsupportedField
from rdma_cni.kube.deviceplugin.devices import build_devices
from rdma_cni.models.blocks import validate_blocks
from rdma_cni.models.netconf import load_netconf
from rdma_cni.node.allocation import assign
from rdma_cni.node.pools import NodeSettings, slot_capacity
from rdma_cni.node.rdma_mode import check_mode
from rdma_cni.tools import doctor, install
from rdma_cni.vocab.modes import Mode
from rdma_cni.vocab.nic import Nic
from rdma_cni.vocab.plan import IfacePlan, NicFacts

NAMES = ("shared", "shared-multi", "shared-host", "exclusive")
FACTS = [NicFacts(name=f"ens{i}", index=10 + i, mtu=9000, mac=f"02:00:00:00:00:0{i}",
                  addresses=(IPv4Interface(f"198.51.100.{1 + 16 * i}/28"),))
         for i in range(3)]


def plans(mode: str, *blocks: dict[str, Any], nics: int = 1) -> list[IfacePlan]:
    nc = load_netconf({"cniVersion": "1.0.0", "name": "vpc", "mode": mode})
    raw = [(p, {"cniConf": {"name": "rdma"}, **b}) for p, b in enumerate(blocks, start=1)]
    return plan_interfaces(nc, validate_blocks(raw), FACTS[:nics], "0123456789abcdef")


@pytest.mark.parametrize(("mode", "kind"), [("shared", "ipvlan"), ("shared-multi", "macvlan"),
                                            ("shared-host", "ipvlan"),
                                            ("exclusive", "physical")])
def test_the_planner_takes_the_link_kind_from_the_table(mode: str, kind: str) -> None:
    got = plans(mode, {})
    assert [(p.name, p.kind, p.nic) for p in got] == [("eth2", kind, "ens0")]
    assert type(got[0].kind) is str  # saved state keeps plain strings


def test_only_exclusive_plans_the_nics_own_address() -> None:
    for mode in NAMES:
        want = FACTS[0].addresses if mode == "exclusive" else ()
        assert plans(mode, {})[0].addresses == want, mode


def test_shared_host_expands_its_block_over_every_nic() -> None:
    got = plans("shared-host", {}, nics=3)
    assert [(p.name, p.nic, p.table) for p in got] == [
        ("eth2", "ens0", 100), ("eth3", "ens1", 101), ("eth4", "ens2", 102)]
    named = plans("shared-host", {"deviceConf": {"ifName": "rdma"}}, nics=2)
    assert [p.name for p in named] == ["rdma0", "rdma1"]
    assert [p.name for p in plans("shared", {}, {}, nics=2)] == ["eth2", "eth3"]


def test_a_mac_only_where_the_table_allows_it() -> None:
    mac = {"deviceConf": {"mac": "02:aa:bb:cc:dd:ee"}}
    assert plans("shared-multi", mac)[0].mac == "02:aa:bb:cc:dd:ee"
    for mode in ("shared", "shared-host", "exclusive"):
        with pytest.raises(UnsupportedField) as info:
            plans(mode, mac)
        assert info.value.code == Code.UNSUPPORTED_FIELD
        assert info.value.msg.endswith(  # the spec: code 2 names the key and the value
            f'deviceConf.mac "02:aa:bb:cc:dd:ee" is only supported in shared-multi mode '
            f"(this node runs {mode})")


def test_requested_ips_only_in_the_modes_of_pod_ipam() -> None:
    ips = {"deviceConf": {"ips": ["198.51.100.9"]}}
    for mode in ("shared", "shared-multi", "shared-host"):
        assert plans(mode, ips)[0].requested_ip == IPv4Address("198.51.100.9")
    with pytest.raises(UnsupportedField, match="not supported in exclusive mode"):
        plans("exclusive", ips)


@dataclass(frozen=True)
class N:
    netdev: str


def test_assign_refuses_an_unknown_mode_naming_the_modes() -> None:
    with pytest.raises(ConfigError, match='invalid mode "ipvlan": expected one of shared, '
                       "shared-multi, shared-host, exclusive"):
        assign("ipvlan", [N("eth1")], None, 1, resolve=N)


def test_assign_one_spreading_rule_for_allocated_and_unallocated() -> None:
    nics = [N("eth1"), N("eth2"), N("eth3")]
    allocated = assign("shared-multi", nics, ["eth3", "eth1"], 4, resolve=N)
    assert allocated == ["eth1", "eth3", "eth1", "eth3"]  # sorted IDs, round-robin
    assert assign("shared-multi", nics, None, 4, resolve=N) == ["eth1", "eth2", "eth3", "eth1"]


def _nic(i: int) -> Nic:
    return Nic(f"ens{i}", pci=f"0000:3b:00.{i}", numa=0)


@pytest.mark.parametrize(("mode", "ids"), [
    ("shared", ["0000:3b:00.0", "0000:3b:00.1"]),
    ("exclusive", ["0000:3b:00.0", "0000:3b:00.1"]),
    ("shared-multi", ["0000:3b:00.0@0", "0000:3b:00.0@1", "0000:3b:00.1@0", "0000:3b:00.1@1"]),
    ("shared-host", ["host-0", "host-1", "host-2"]),
])
def test_device_ids_follow_the_capacity_rule(mode: str, ids: list[str]) -> None:
    nics = [_nic(0), _nic(1)]
    devices = build_devices(mode, nics, {"ens0": True, "ens1": True}, lambda n: 2, 3)
    assert [d.id for d in devices] == ids
    if mode == "shared-host":
        assert all(d.nics == tuple(nics) for d in devices)


def test_slot_capacity_per_rule() -> None:
    sizes = [13, 5]
    got = {m: slot_capacity(NodeSettings(m, "r", slots_per_nic=8, host_slots=16), sizes)
           for m in NAMES}
    assert got == {"shared": 2, "exclusive": 2, "shared-multi": 8 + 5, "shared-host": 5}


def test_node_settings_hold_the_mode_enum() -> None:
    settings = NodeSettings("shared-multi", "r")
    assert settings.mode is Mode.SHARED_MULTI and settings.mode == "shared-multi"
    with pytest.raises(ConfigError, match='invalid mode "multi"'):
        NodeSettings("multi", "r")


def test_rdma_netns_mode_check_reads_the_table() -> None:
    for mode in NAMES:
        check_mode(mode, "shared")
        check_mode(mode, None)  # unknown: the CNI proceeds
    check_mode("exclusive", "exclusive")
    check_mode("not-a-mode", "exclusive")  # config validation names that, not this check
    for mode in ("shared", "shared-multi", "shared-host"):
        with pytest.raises(NicUnavailable) as info:
            check_mode(mode, "exclusive")
        assert info.value.code == 104
        assert info.value.msg == (
            f"failed to use RDMA in mode {mode}: the RDMA subsystem netns mode is exclusive, "
            f"mode {mode} needs it shared (rdma system set netns shared, at boot)")


def test_check_verifies_reservations_except_where_the_nic_keeps_its_address() -> None:
    assert [_reserved(m) for m in NAMES] == [True, True, True, False]
    assert _reserved(None) and _reserved("garbled")  # an odd record is checked, not skipped


def test_doctor_netmask_rule_from_the_table() -> None:
    nics = [Nic("ens0")]
    narrow = doctor.check_netmasks("shared-host", nics, lambda n: [IPv4Interface("192.0.2.1/30")])
    assert (narrow.status, narrow.fix) == ("fail", "give each RDMA NIC an IPv4 subnet "
                                                   "shorter than /30")
    wide = doctor.check_netmasks("shared", nics, lambda n: [IPv4Interface("192.0.2.1/29")])
    assert (wide.status, wide.detail) == ("ok", "every NIC subnet is shorter than /30")
    for mode in ("exclusive", "", "bogus"):
        assert doctor.check_netmasks(mode, nics, lambda n: []).status == "ok"


def test_doctor_topology_policy_from_the_table(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-kubelet-config.yaml")
    status = {m: doctor.check_kubelet(m, missing).status for m in (*NAMES, "bogus")}
    assert status == {"shared": "warn", "shared-multi": "warn", "shared-host": "ok",
                      "exclusive": "warn", "bogus": "ok"}


def test_doctor_names_the_modes_for_a_bad_one() -> None:
    first = doctor.run_checks({"mode": "ipvlan"})[0]
    assert (first.name, first.status) == ("config", "fail")
    assert first.fix == "set mode to shared, shared-multi, shared-host or exclusive"
    netns = doctor.check_netns("shared", "exclusive")
    assert netns.fix.endswith("or use mode exclusive")


def test_install_names_the_modes_and_the_source() -> None:
    with pytest.raises(ConfigError) as info:
        install.resolve_mode(None, {}, lambda: "Shared")
    assert info.value.msg == ('invalid mode "Shared" from vke.node.rdma.mode: expected one of '
                              "shared, shared-multi, shared-host, exclusive")
    assert install.make_entry({}, "shared-multi")["mode"] == "shared-multi"
    assert type(install.make_entry({}, "exclusive")["mode"]) is str
