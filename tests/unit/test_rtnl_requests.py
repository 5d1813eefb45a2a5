"""Every request the kernel adapter (rdma_cni/adapters/netlink.py, netlink_l3.py) sends
is packed by the codec (rdma_cni/adapters/rtnlcodec.py), in every process, to pyroute2's
own bytes (but the IPv4 settings', which pyroute2 cannot pack: their names here, their
bytes in test_rtnl_codec.py): no request is left to pyroute2. And the nested and struct
attributes the adapter reads (IFLA_LINKINFO, IFLA_AF_SPEC, IFLA_STATS64, IFA_CACHEINFO)
are read without pyroute2's attribute classes. The socket is a stand-in that answers as
the kernel would."""

from __future__ import annotations

import socket
from ipaddress import IPv4Interface
from typing import Any

import pytest
from support.rtnl_oracle import pyroute2_encoded
from support.rtnl_standin import StandIn

from rdma_cni.adapters import rtnl
from rdma_cni.adapters.netlink import Netlink
from rdma_cni.adapters.rtnlanswer import Answer
from rdma_cni.adapters.rtnlmsg import addr_of, inet6_mode_of, link_of, stats_of
from rdma_cni.vocab.netlink import Addr, Link, Route

STATS = {"rx_bytes": 10, "tx_bytes": 20, "rx_packets": 3, "tx_packets": 4}
ETH1 = [("IFLA_IFNAME", "eth1"), ("IFLA_MTU", 1500), ("IFLA_ADDRESS", "02:aa:bb:cc:dd:ee"),
        ("IFLA_LINKINFO", {"attrs": [("IFLA_INFO_KIND", "veth")]}),
        ("IFLA_STATS64", STATS),
        ("IFLA_AF_SPEC", {"attrs": [("AF_INET6", {"attrs": [
            ("IFLA_INET6_ADDR_GEN_MODE", 1)]})]})]


def _link_answer(seq: int) -> bytes:
    return pyroute2_encoded(rtnl.ifinfmsg, ETH1, {"index": 7, "flags": 1}, rtnl.RTM_NEWLINK,
                            0, seq)


class KernelStandIn(StandIn):
    """A netlink socket that records each request and answers it: a link for a lookup,
    nothing for a dump, an ACK for a change."""

    def answer(self, data: bytes, kind: int, seq: int, dump: bool) -> None:
        if not dump and kind == rtnl.RTM_GETLINK:
            self.queue.append(_link_answer(seq))


def _every_request(nl: Netlink) -> None:
    parent = Link(index=3, name="eth0", mtu=1500, mac="02:00:00:00:00:01", kind=None, up=True)
    nl.links(), nl.link("eth1"), nl.link_at(7), nl.link_at(7, 3), nl.netnsid(5)
    nl.link_stats(["eth1"])
    nl.create_sublink("macvlan", "rdtx0", parent, 5, 1500, "02:AA:bb:cc:dd:ee")
    nl.create_sublink("macvlan", "rdtx1", parent, 5, 1500, None)
    nl.create_sublink("ipvlan", "rdtx2", parent, 5, 4200, None)
    nl.move_to_netns("eth1", 5, "move"), nl.rename("eth1", "net1", "rdma-cni:ab", "rename")
    nl.set_up("eth1", "up"), nl.set_up("eth1", "up", 9000), nl.set_down("eth1", "down")
    nl.set_mtu("eth1", 4200, "mtu"), nl.set_alias("eth1", "", "alias")
    nl.delete_link("eth1"), nl.delete_links(["a", "b"])
    nl.link_conf("eth1"), nl.set_inet6_mode("eth1", 1, "mode")
    nl.addresses(), nl.addresses(7), nl.addrs(7)
    nl.add_address("eth1", IPv4Interface("198.51.100.9/26"))
    nl.del_address("eth1", IPv4Interface("198.51.100.9/26"))
    for addr in (Addr("198.51.100.3/26", label="eth1:p", broadcast="198.51.100.63"),
                 Addr("2001:db8:8::5/64", flags=0x202),
                 Addr("2001:db8:7::5/64", valid=3600, preferred=1800)):
        nl.put_addr("eth1", addr)
    nl.routes_via(7), nl.routes(), nl.routes(1001, 7), nl.default_routes()
    nl.default_routes(7), nl.route_oif("198.51.100.9", "198.51.100.1")
    nl.route_match("240.0.0.1"), nl.route_match("2001:db8:ffff:ffff::1")
    for route in (Route("198.51.100.0/26", "198.51.100.1", 7, 100),
                  Route("0.0.0.0/0", "198.51.100.1", 7, 1001, onlink=True),
                  Route("2001:db8::/64", None, 7, 1001, scope=253, proto=2, priority=7)):
        nl.add_route(route), nl.del_route(route)
    nl.rules(), nl.add_rule("198.51.100.9", 1001, 32000)
    nl.del_rule("198.51.100.9", 1001, 32000)


def _pyroute2_decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the classes pyroute2 decodes from here on (none is refused: a
    failed decode would be caught and read as bytes)."""
    from pyroute2.netlink import nla, nlmsg_base

    seen: list[str] = []
    for base in (nla, nlmsg_base):
        def recorded(self: Any, *args: Any, _was: Any = base.decode, **kwargs: Any) -> Any:
            seen.append(type(self).__name__)
            return _was(self, *args, **kwargs)

        monkeypatch.setattr(base, "decode", recorded)
    return seen


def test_every_request_of_the_adapter_is_packed_by_the_codec(
        monkeypatch: pytest.MonkeyPatch) -> None:
    packed: list[tuple[bytes | None, bytes]] = []
    encode = rtnl.encode

    def checked(cls: type, kind: int, flags: int, seq: int, fields: dict[str, Any],
                attrs: list[tuple[str, Any]]) -> Any:
        ours = encode(cls, kind, flags, seq, fields, attrs)
        packed.append((ours, pyroute2_encoded(cls, attrs, fields, kind, flags, seq)))
        return ours if ours is not None else packed[-1][1]

    monkeypatch.setattr(rtnl, "encode", checked)
    kernel = KernelStandIn()
    _every_request(Netlink(rtnl.Channel(kernel), "stand-in"))  # type: ignore[arg-type]
    assert len(packed) == len(kernel.sent) > 40
    for ours, theirs in packed:
        assert ours is not None
        assert ours == theirs


def test_ipv4_settings_are_sent_by_their_kernel_index_in_one_request() -> None:
    from rdma_cni.adapters.rtnlmsg import ipv4_conf_attrs
    from rdma_cni.datapath.plan import SYSCTLS

    kernel = KernelStandIn()
    Netlink(rtnl.Channel(kernel), "stand-in").set_ipv4_conf(  # type: ignore[arg-type]
        "eth1", SYSCTLS, "set")
    (sent,) = kernel.sent
    by_index = [(19, 1), (18, 2), (8, 2), (22, 1)]  # include/uapi/linux/ip.h: IPV4_DEVCONF_*
    assert sent == rtnl.encode(rtnl.ifinfmsg, rtnl.RTM_SETLINK, 5, 1, {},
                               [("IFLA_IFNAME", "eth1"), *ipv4_conf_attrs(by_index)])


def test_a_link_stays_known_through_its_ipv4_settings() -> None:
    """ADD's steps on a new link (rename, IPv4 settings, address): one look-up, before the
    rename; the address finds the link's index without asking again."""
    from rdma_cni.datapath.plan import SYSCTLS

    kernel = KernelStandIn()
    nl = Netlink(rtnl.Channel(kernel), "stand-in")  # type: ignore[arg-type]
    nl.rename("rdtmp", "eth1", "rdma-cni:ab", "rename")
    nl.set_ipv4_conf("eth1", SYSCTLS, "set")
    nl.add_address("eth1", IPv4Interface("198.51.100.9/26"))
    kinds = [int.from_bytes(m[4:6], "little") for m in kernel.sent]
    assert kinds == [rtnl.RTM_GETLINK, rtnl.RTM_SETLINK, rtnl.RTM_SETLINK, rtnl.RTM_NEWADDR]
    nl.set_up("eth1", "up")
    nl.move_to_netns("eth1", 5, "move")  # what it is known by changes: asked again
    nl.add_address("eth1", IPv4Interface("198.51.100.9/26"))
    assert int.from_bytes(kernel.sent[-2][4:6], "little") == rtnl.RTM_GETLINK


def test_nested_and_struct_attributes_are_read_without_pyroute2s_classes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    link = _link_answer(1)
    cache = {"ifa_preferred": 1800, "ifa_valid": 3600, "cstamp": 0, "tstamp": 0}
    addr = pyroute2_encoded(rtnl.ifaddrmsg, [("IFA_ADDRESS", "2001:db8:7::5"),
                                             ("IFA_CACHEINFO", cache)],
                            {"family": socket.AF_INET6, "prefixlen": 64, "index": 7},
                            rtnl.RTM_NEWADDR, 0, 1)
    decoded = _pyroute2_decodes(monkeypatch)
    a = Answer(rtnl.ifinfmsg, link, 0, len(link))
    assert (link_of(a).kind, inet6_mode_of(a)) == ("veth", 1)
    assert stats_of(a) is not None and stats_of(a).rx_bytes == 10  # type: ignore[union-attr]
    b = Answer(rtnl.ifaddrmsg, addr, 0, len(addr))
    assert addr_of(b)[1] == Addr("2001:db8:7::5/64", valid=3600, preferred=1800)
    assert decoded == []


def test_a_class_picked_by_pyroute2s_function_reads_only_what_the_function_asks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """IFLA_AF_SPEC's class is picked by the message's family: reading it decodes none
    of the attributes before it (IFLA_OPERSTATE has a decoder of pyroute2's own)."""
    data = pyroute2_encoded(rtnl.ifinfmsg, [("IFLA_OPERSTATE", "UP"), *ETH1],
                            {"index": 7}, rtnl.RTM_NEWLINK, 0, 1)
    decoded = _pyroute2_decodes(monkeypatch)
    a = Answer(rtnl.ifinfmsg, data, 0, len(data))
    assert inet6_mode_of(a) == 1
    assert link_of(a).kind == "veth"
    assert decoded == []
