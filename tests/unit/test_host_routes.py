"""Exclusive NICs get their host routes back exactly (protocol, metric, onlink)."""

from __future__ import annotations

from rdma_cni.adapters.netlink import Link, Route
from rdma_cni.node.hostinfo import _facts
from rdma_cni.records import replace
from rdma_cni.store.records import plan_from_dict, plan_to_dict
from rdma_cni.vocab.plan import HostRoute, IfacePlan


def test_facts_keep_route_protocol_metric_and_onlink() -> None:
    link = Link(index=3, name="rnic0", mtu=1400, mac="02:00:00:00:00:01", kind="veth", up=True)
    via = [Route(dst="198.18.0.0/15", gateway="198.51.100.62", oif=3, table=254, proto=3),
           Route(dst="198.19.0.0/16", gateway="198.51.100.62", oif=3, table=254, proto=12,
                 priority=50, onlink=True)]
    facts = _facts(link, (), via, None)
    assert facts.routes == (("198.18.0.0/15", "198.51.100.62"), ("198.19.0.0/16", "198.51.100.62"))
    assert facts.host_routes == (HostRoute("198.18.0.0/15", "198.51.100.62", 3, 0, False),
                                 HostRoute("198.19.0.0/16", "198.51.100.62", 12, 50, True))
    assert str(facts.gateway) == "198.51.100.62"


def test_state_record_round_trips_host_routes() -> None:
    plan = IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1400,
                     table=100, routes=(("198.19.0.0/16", "198.51.100.62"),),
                     host_routes=(HostRoute("198.19.0.0/16", "198.51.100.62", 12, 50, True),))
    assert plan_from_dict(plan_to_dict(plan)) == plan


def test_old_state_without_host_routes_still_loads() -> None:
    plan = IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1400,
                     table=100, routes=(("198.19.0.0/16", "198.51.100.62"),))
    d = plan_to_dict(plan)
    del d["host_routes"]
    assert plan_from_dict(d).host_routes == ()


# every family ------------------------------------------------------------------------
def test_the_kernels_own_addresses_are_left_to_it() -> None:
    from rdma_cni.node.hostinfo import configured_addrs
    from rdma_cni.vocab.netlink import Addr

    primary, secondary = Addr("198.51.100.3/26", 0x80), Addr("198.51.100.1/26", 0x81)
    static6 = Addr("2001:db8:7::5/64", 0x80)
    temporary = Addr("2001:db8:7::99/64", 0x01)
    slaac = Addr("2001:db8:7::aa/64", 0, 100, 50, proto=2)
    kernel_ll, own_ll = Addr("fe80::1/64", 0x80, proto=3), Addr("fe80::5/64", 0x80)
    every = [primary, secondary, static6, temporary, slaac, kernel_ll, own_ll]
    # a kernel that says who made each address (6.3+): the admin's link-local stays
    assert configured_addrs(every, 0) == [primary, secondary, static6, own_ll]
    # one that says nothing: a link-local address is the kernel's unless its mode makes none
    old = [replace(a, proto=None) for a in (primary, static6, own_ll)]
    assert configured_addrs(old, 0) == old[:2]
    assert configured_addrs(old, 1) == old


def test_lifetimes_are_kept_as_the_times_they_end() -> None:
    from rdma_cni.datapath.hostconfig import addr_at
    from rdma_cni.node.hostinfo import host_addr
    from rdma_cni.vocab.netlink import FOREVER, Addr

    saved = host_addr(Addr("2001:db8:7::5/64", 0x202, 3600, 1800), now=1000.0)
    assert (saved.valid_until, saved.preferred_until) == (4600.0, 2800.0)
    later = addr_at(saved, 3000.0, None)
    assert later is not None and (later.valid, later.preferred, later.flags) == (1600, 0, 0x202)
    assert addr_at(saved, 4600.5, None) is None  # ran out while away: not put back
    forever = addr_at(host_addr(Addr("198.51.100.1/26", label="rnic0:s"), 1.0), 9e9, "eth1")
    assert forever is not None and (forever.valid, forever.label) == (FOREVER, "eth1:s")


def test_every_family_round_trips_through_the_record() -> None:
    from rdma_cni.vocab.plan import HostAddr

    plan = IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1400,
                     table=100, routes=(("198.19.0.0/16", "198.51.100.62"),),
                     host_routes=(HostRoute("198.19.0.0/16", "198.51.100.62", 3, 0, False),
                                  HostRoute("2001:db8:9::/48", "2001:db8:7::1", 3, 77, False),
                                  HostRoute("203.0.113.0/24", "198.51.100.62", 3, 0, False,
                                            123, "198.51.100.3")),
                     host_addrs=(HostAddr("198.51.100.3/26", 0x80, None, None, "rnic0"),
                                 HostAddr("2001:db8:7::5/64", 0x202, 4600.0, 2800.0)),
                     inet6_mode=1)
    d = plan_to_dict(plan)
    assert d["host_routes"][0] == ["198.19.0.0/16", "198.51.100.62", 3, 0, False]  # as before
    back = plan_from_dict(d)
    assert back == plan
    assert back.routes == (("198.19.0.0/16", "198.51.100.62"),)  # what the pod mirrors


# the NIC's own settings (flags, queue length, alias, IPv4 and IPv6 settings) --------
HOST_LINK = {"flags": 0x1080, "txqlen": 500, "alias": "uplink-A",
             "ipv4": {"arp_ignore": 2, "accept_local": 1, "rp_filter": 0},
             "ipv6": {"forwarding": 1, "disable_ipv6": 1}}


def test_settings_round_trip_and_an_old_record_has_none() -> None:
    plan = IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1400,
                     table=100, host_link=HOST_LINK)
    d = plan_to_dict(plan)
    assert d["host_link"] == HOST_LINK
    assert plan_from_dict(d) == plan
    del d["host_link"]
    assert plan_from_dict(d).host_link == {}


class _Host:
    """The settings a returning NIC shows (the node's defaults), and what is set."""

    label = "host"

    def __init__(self) -> None:
        from rdma_cni.vocab.netlink import LinkConf

        self.conf = LinkConf(flags=0x1302 | 0x80, txqlen=77, alias=None,
                             ipv4={"arp_ignore": 0, "accept_local": 0, "rp_filter": 0},
                             ipv6={"forwarding": 0, "disable_ipv6": 0})
        self.calls: list[tuple[object, ...]] = []

    def link_conf(self, name: str) -> object:
        return self.conf

    def __getattr__(self, method: str) -> object:
        return lambda *args: self.calls.append((method, *args[1:-1]))


def test_restore_sets_what_differs_disable_ipv6_first() -> None:
    from rdma_cni.datapath.hostconfig import restore_settings
    from rdma_cni.vocab.netlink import LINK_FLAGS

    host = _Host()
    plan = IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1400,
                     table=100, host_link=HOST_LINK)
    restore_settings(host, "rnic0", plan)  # type: ignore[arg-type]
    assert host.calls == [
        ("set_ipv4_conf", [("arp_ignore", 2), ("accept_local", 1)]),
        ("set_ipv6_conf", [("disable_ipv6", 1), ("forwarding", 1)]),
        ("set_flags", 0x1080, LINK_FLAGS),
        ("set_txqlen", 500),
        ("set_alias", "uplink-A"),
    ]
    host.calls.clear()
    restore_settings(host, "rnic0", replace(plan, host_link={}))  # type: ignore[arg-type]
    assert host.calls == []
