"""Every rule of the pure planner (rdma_cni.datapath.plan), called directly: link kind
per mode, interface naming (eth{p+1}, ifName, shared-host expansion, duplicates),
temporary names, MTU, tables, MACs, requested IPs, exclusive vs sub-link facts."""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Interface
from typing import Any

import pytest

from rdma_cni.datapath.plan import plan_interfaces, pod_routes, with_address
from rdma_cni.errors import ConfigError, IfNameInUse, UnsupportedField
from rdma_cni.models.blocks import Block, parse_block
from rdma_cni.models.netconf import NetConf, load_netconf
from rdma_cni.vocab.plan import HostRoute, IfacePlan, NicFacts

DIGEST = "0123456789abcdef"
NIC = NicFacts(name="rnic0", index=3, mtu=9000, mac="02:00:00:00:00:01", up=True,
               addresses=(IPv4Interface("198.51.100.1/26"),),
               gateway=IPv4Address("198.51.100.62"),
               routes=(("198.19.0.0/16", "198.51.100.62"),),
               host_routes=(HostRoute("198.19.0.0/16", "198.51.100.62", 3, 0, False),),
               pci="0000:03:00.0", parent_dev="0000:03:00.0", perm_mac="02:00:00:00:00:01",
               ibdev="mlx5_0", altnames=("enp3s0f0np0",))
NIC1 = NicFacts(name="rnic1", index=4, mtu=4200, mac="02:00:00:00:00:02")


def conf(mode: str, **kw: Any) -> NetConf:
    return load_netconf({"cniVersion": "1.0.0", "name": "rdma", "mode": mode, **kw})


def block(**dc: Any) -> Block:
    return parse_block({"cniConf": {"name": "rdma"}, **({"deviceConf": dc} if dc else {})})


def plan(mode: str, blocks: list[tuple[int, Block]], nics: list[NicFacts], **kw: Any
         ) -> list[IfacePlan]:
    return plan_interfaces(conf(mode, **kw), blocks, nics, DIGEST)


@pytest.mark.parametrize(("mode", "kind"), [("shared", "ipvlan"), ("shared-multi", "macvlan"),
                                            ("shared-host", "ipvlan"),
                                            ("exclusive", "physical")])
def test_each_mode_has_its_link_kind(mode: str, kind: str) -> None:
    assert [p.kind for p in plan(mode, [(0, block())], [NIC])] == [kind]


def test_block_at_position_p_is_eth_p_plus_1_with_its_own_table_and_tmp_name() -> None:
    plans = plan("shared-multi", [(0, block()), (2, block())], [NIC, NIC1])
    assert [p.name for p in plans] == ["eth1", "eth3"]
    assert [p.k for p in plans] == [0, 1]
    assert [p.table for p in plans] == [100, 101]
    assert [p.tmp for p in plans] == ["rdt0123456780", "rdt0123456781"]
    assert [p.nic for p in plans] == ["rnic0", "rnic1"]


def test_table_base_comes_from_the_routing_config() -> None:
    plans = plan("shared-multi", [(0, block()), (1, block())], [NIC, NIC1],
                 routing={"tableBase": 500})
    assert [p.table for p in plans] == [500, 501]


def test_ifname_overrides_the_default_name() -> None:
    assert plan("shared", [(0, block(ifName="rdma0"))], [NIC])[0].name == "rdma0"


def test_shared_host_expands_one_block_to_one_interface_per_nic() -> None:
    plans = plan("shared-host", [(0, block())], [NIC, NIC1])
    assert [(p.name, p.nic) for p in plans] == [("eth1", "rnic0"), ("eth2", "rnic1")]
    named = plan("shared-host", [(0, block(ifName="hpc"))], [NIC, NIC1])
    assert [p.name for p in named] == ["hpc0", "hpc1"]


def test_shared_host_suffix_must_keep_the_name_valid() -> None:
    with pytest.raises(ConfigError, match="invalid pod annotation"):
        plan("shared-host", [(0, block(ifName="a" * 15))], [NIC, NIC1])


def test_a_name_asked_twice_is_refused() -> None:
    with pytest.raises(IfNameInUse, match="rdma0 more than once"):
        plan("shared-multi", [(0, block(ifName="rdma0")), (1, block(ifName="rdma0"))],
             [NIC, NIC1])
    with pytest.raises(IfNameInUse, match="eth1"):  # a default name taken by an ifName
        plan("shared-multi", [(0, block()), (1, block(ifName="eth1"))], [NIC, NIC1])


def test_names_and_nics_must_match_in_number() -> None:
    with pytest.raises(ConfigError, match="internal"):
        plan("shared", [(0, block())], [NIC, NIC1])


def test_mtu_is_the_nics_unless_the_config_lowers_it() -> None:
    assert plan("shared", [(0, block())], [NIC])[0].mtu == 9000
    assert plan("shared", [(0, block())], [NIC], mtu=1500)[0].mtu == 1500
    with pytest.raises(ConfigError, match="mtu 9001 is larger than the MTU 9000 of RDMA NIC rnic0"):
        plan("shared", [(0, block())], [NIC], mtu=9001)


def test_mac_only_in_shared_multi_and_only_unicast() -> None:
    assert plan("shared-multi", [(0, block(mac="02:00:00:00:00:aa"))], [NIC])[0].mac == \
        "02:00:00:00:00:aa"
    with pytest.raises(UnsupportedField, match="only supported in shared-multi"):
        plan("shared", [(0, block(mac="02:00:00:00:00:aa"))], [NIC])
    for bad in ("03:00:00:00:00:aa", "00:00:00:00:00:00"):
        with pytest.raises(ConfigError, match="not a unicast MAC"):
            plan("shared-multi", [(0, block(mac=bad))], [NIC])


def test_requested_ips_per_interface() -> None:
    plans = plan("shared-host", [(0, block(ips=["198.51.100.9"]))], [NIC, NIC1])
    assert [p.requested_ip for p in plans] == [IPv4Address("198.51.100.9"), None]
    with pytest.raises(UnsupportedField, match=re.escape(
            '"198.51.100.9, 198.51.100.10" lists 2 addresses for 1 interface')):
        plan("shared", [(0, block(ips=["198.51.100.9", "198.51.100.10"]))], [NIC])
    with pytest.raises(UnsupportedField,
                       match=re.escape('ips "198.51.100.9" is not supported in exclusive')):
        plan("exclusive", [(0, block(ips=["198.51.100.9"]))], [NIC])


def test_exclusive_takes_the_nics_own_configuration() -> None:
    p = plan("exclusive", [(0, block())], [NIC])[0]
    assert p.addresses == NIC.addresses and p.address == NIC.addresses[0]
    assert p.host_mtu == 9000 and p.host_up and p.host_routes == NIC.host_routes
    assert p.identity == {"pci": "0000:03:00.0", "parentDev": "0000:03:00.0",
                          "parentBus": None, "permMac": "02:00:00:00:00:01",
                          "mac": "02:00:00:00:00:01", "kind": None, "ifindex": NIC.index,
                          "ifindexNetns": "host", "altnames": ["enp3s0f0np0"]}
    assert p.ibdev == "mlx5_0" and not p.rdma_move


def test_sub_links_get_no_address_from_the_nic_but_its_routes() -> None:
    p = plan("shared", [(0, block())], [NIC])[0]
    assert p.addresses == () and p.address is None
    assert p.routes == NIC.routes and p.gateway == NIC.gateway


def test_with_address_and_the_pod_routes_of_the_table() -> None:
    p = with_address(plan("shared", [(0, block())], [NIC])[0], IPv4Address("198.51.100.7"), 26)
    assert p.address == IPv4Interface("198.51.100.7/26")
    assert pod_routes(p) == [("198.51.100.0/26", None, False),
                             ("198.19.0.0/16", "198.51.100.62", True)]
    default = IfacePlan(k=0, name="eth1", tmp="t", nic="n", kind="ipvlan", mtu=1500, table=100,
                        routes=(("0.0.0.0/0", "198.51.100.62"), ("198.18.0.0/15", None)))
    assert pod_routes(default) == [("198.18.0.0/15", None, False)]  # never a default route
