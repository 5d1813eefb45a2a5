"""The rtnetlink codec (rdma_cni/adapters/rtnlcodec.py) against pyroute2 itself: every
request shape the adapter sends packs to pyroute2's bytes (but the IPv4 settings', which
pyroute2 cannot pack: held to the kernel's format here, and to the kernel itself by
tests/integration/test_procsys_readonly.py), and answers read as pyroute2 decodes them.
(Against the kernel: tests/integration/test_netlink_contract.py.)"""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest
from support.rtnl_oracle import pyroute2_encoded

from rdma_cni.adapters import rtnl
from rdma_cni.adapters.rtnlanswer import Answer
from rdma_cni.adapters.rtnlcodec import Unsupported, encode
from rdma_cni.adapters.rtnlmsg import (
    addr_request,
    address_of,
    inet6_mode_attrs,
    ipv4_conf_attrs,
    link_of,
    nsid_of,
    route_of,
    route_request,
    rule_of,
)
from rdma_cni.records import replace
from rdma_cni.vocab.netlink import Addr, Route

MACVLAN = {"attrs": [("IFLA_INFO_KIND", "macvlan"),
                     ("IFLA_INFO_DATA", {"attrs": [("IFLA_MACVLAN_MODE", 4)]})]}
IPVLAN = {"attrs": [("IFLA_INFO_KIND", "ipvlan"),
                    ("IFLA_INFO_DATA", {"attrs": [("IFLA_IPVLAN_MODE", 0)]})]}
ROUTES = [Route("198.51.100.0/26", "198.51.100.1", 5, 100),
          Route("0.0.0.0/0", "198.51.100.1", 5, 1001, onlink=True),
          Route("198.51.100.0/26", None, 5, 1001, scope=253, proto=2, priority=7)]
ADDRS = [Addr("198.51.100.3/26", label="va:p", broadcast="198.51.100.63"),
         Addr("2001:db8:8::5/64", flags=0x202),
         Addr("2001:db8:7::5/64", valid=3600, preferred=1800)]


#: (class, fixed fields, attributes) of every request shape of rdma_cni/adapters/netlink.py
REQUESTS: list[tuple[Any, dict[str, Any], list[tuple[str, Any]]]] = [
    (rtnl.ifinfmsg, {}, []),
    (rtnl.ifinfmsg, {}, [("IFLA_IFNAME", "eth1")]),
    (rtnl.ifinfmsg, {"flags": 1, "change": 1}, [("IFLA_IFNAME", "eth1"), ("IFLA_MTU", 9000)]),
    (rtnl.ifinfmsg, {"flags": 0, "change": 1}, [("IFLA_IFNAME", "eth1")]),
    (rtnl.ifinfmsg, {"index": 7}, [("IFLA_IFNAME", "net1"), ("IFLA_IFALIAS", "rdma-cni:ab")]),
    (rtnl.ifinfmsg, {"index": 7}, [("IFLA_IFNAME", "net1"), ("IFLA_IFALIAS", "")]),
    (rtnl.ifinfmsg, {}, [("IFLA_IFNAME", "eth1"), ("IFLA_NET_NS_FD", 5)]),
    (rtnl.ifinfmsg, {}, [("IFLA_IFNAME", "eth1"), ("IFLA_GROUP", 0x7FFFFFFF)]),
    (rtnl.ifinfmsg, {}, [("IFLA_GROUP", 12345)]),
    (rtnl.ifinfmsg, {"index": 7}, []),
    (rtnl.ifinfmsg, {"index": 7}, [("IFLA_IF_NETNSID", 3)]),
    (rtnl.nsidmsg, {}, [("NETNSA_FD", 5)]),
    (rtnl.ifinfmsg, {}, [("IFLA_IFNAME", "rdtx0"), ("IFLA_LINK", 3), ("IFLA_NET_NS_FD", 5),
                         ("IFLA_MTU", 1500), ("IFLA_ADDRESS", "02:AA:bb:cc:dd:ee"),
                         ("IFLA_LINKINFO", MACVLAN)]),
    (rtnl.ifinfmsg, {}, [("IFLA_IFNAME", "rdtx0"), ("IFLA_LINK", 3), ("IFLA_NET_NS_FD", 5),
                         ("IFLA_MTU", 4200), ("IFLA_LINKINFO", IPVLAN)]),
    (rtnl.ifaddrmsg, {"family": 2, "index": 0}, []),
    (rtnl.ifaddrmsg, {"family": 2, "prefixlen": 26, "index": 9},
     [("IFA_ADDRESS", "192.0.2.7"), ("IFA_LOCAL", "192.0.2.7")]),
    (rtnl.rtmsg, {"family": 2, "table": 254}, [("RTA_TABLE", 254), ("RTA_OIF", 4)]),
    (rtnl.rtmsg, {"family": 2, "table": 252}, [("RTA_TABLE", 1001)]),
    (rtnl.fibmsg, {"family": 2}, []),
    (rtnl.fibmsg, {"family": 2, "src_len": 32, "table": 252, "action": 1},
     [("FRA_SRC", "192.0.2.7"), ("FRA_TABLE", 1001), ("FRA_PRIORITY", 32000)]),
    *[(rtnl.rtmsg, *route_request(r, delete=d)) for r in ROUTES for d in (False, True)],
    *[(rtnl.ifaddrmsg, *addr_request(a, 9)) for a in ADDRS],
    (rtnl.ifinfmsg, {}, [("IFLA_IFNAME", "eth1"), *inet6_mode_attrs(1)]),
    (rtnl.rtmsg, {"family": 2, "dst_len": 32, "src_len": 32},
     [("RTA_DST", "198.51.100.9"), ("RTA_SRC", "198.51.100.1")]),
    (rtnl.rtmsg, {"family": 10}, [("RTA_OIF", 4)]),
]


def pyroute2_bytes(cls: Any, fields: dict[str, Any], attrs: list[tuple[str, Any]],
                   kind: int = 16, flags: int = 0x605, seq: int = 77) -> bytes:
    return pyroute2_encoded(cls, attrs, fields, kind, flags, seq)


@pytest.mark.parametrize(("cls", "fields", "attrs"), REQUESTS)
def test_every_request_packs_to_pyroute2s_bytes(cls: Any, fields: dict[str, Any],
                                                attrs: list[tuple[str, Any]]) -> None:
    assert encode(cls, 16, 0x605, 77, fields, attrs) == pyroute2_bytes(cls, fields, attrs)


@pytest.mark.parametrize("attrs", [
    [("IFLA_NET_NS_FD", "/run/netns/x")],  # a path: pyroute2 opens it
    [("IFLA_NO_SUCH_ATTRIBUTE", 1)],
    [("IFLA_MTU", "1500")],
    [("IFLA_MTU", 1 << 40)],
    [("IFLA_ADDRESS", "not a mac")],
    [("IFLA_LINKINFO", {"attrs": [("IFLA_INFO_KIND", "macvlan"),
                                  ("IFLA_INFO_DATA", {"attrs": [("IFLA_MACVLAN_MODE",
                                                                 "bridge")]})]})],
])
def test_what_the_codec_cannot_pack_is_refused(attrs: list[tuple[str, Any]]) -> None:
    with pytest.raises(Unsupported):
        encode(rtnl.ifinfmsg, 16, 5, 1, {}, attrs)


def _nla(kind: int, payload: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(payload), kind) + payload


def test_ipv4_settings_pack_as_the_kernel_reads_them() -> None:
    """IFLA_AF_SPEC holds AF_INET holds IFLA_INET_CONF (nested), one u32 attribute per
    setting of type its IPV4_DEVCONF_* index (net/ipv4/devinet.c, inet_set_link_af)."""
    name = [("IFLA_IFNAME", "eth1")]
    got = encode(rtnl.ifinfmsg, rtnl.RTM_SETLINK, 5, 3, {}, [*name, *ipv4_conf_attrs(
        [(19, 1), (18, 2), (8, 2), (22, 1)])])
    settings = b"".join(_nla(index, struct.pack("=I", value))
                        for index, value in ((19, 1), (18, 2), (8, 2), (22, 1)))
    spec = _nla(26, _nla(socket.AF_INET, _nla(1 | 0x8000, settings)))
    plain = encode(rtnl.ifinfmsg, rtnl.RTM_SETLINK, 5, 3, {}, name)
    assert got == struct.pack("=I", len(plain) + len(spec)) + plain[4:] + spec


@pytest.mark.parametrize("conf", [[], [(0, 1)], [("arp_ignore", 1)], [(19, "1")],
                                  [(19, 1 << 32)]])
def test_ipv4_settings_the_kernel_would_refuse_are_not_packed(conf: list[Any]) -> None:
    with pytest.raises(Unsupported):
        encode(rtnl.ifinfmsg, rtnl.RTM_SETLINK, 5, 3, {}, ipv4_conf_attrs(conf))


def answer(cls: Any, fields: dict[str, Any], attrs: list[tuple[str, Any]]) -> Answer:
    data = pyroute2_bytes(cls, fields, attrs, kind=16, flags=2, seq=9)
    return Answer(cls, data, 0, len(data))


def reads_as_pyroute2(a: Answer) -> None:
    full = a.full()
    assert full["attrs"]
    for name, _value in full["attrs"]:
        assert a.attr(name) == full.get_attr(name), name
    for field in full:
        if field not in ("attrs", "header", "value", "state") and not field.startswith("__"):
            assert a[field] == full[field], field


LINK = [("IFLA_IFNAME", "rdtx0"), ("IFLA_MTU", 4200), ("IFLA_LINK", 3),
        ("IFLA_ADDRESS", "02:aa:bb:cc:dd:ee"), ("IFLA_IFALIAS", "rdma-cni:ab"),
        ("IFLA_PERM_ADDRESS", bytes.fromhex("02aabbccddef")),
        ("IFLA_PARENT_DEV_NAME", "0000:3b:00.0"),
        ("IFLA_PARENT_DEV_BUS_NAME", "pci"), ("IFLA_GROUP", 7), ("IFLA_LINKINFO", MACVLAN)]


def test_a_link_reads_as_pyroute2_reads_it() -> None:
    a = answer(rtnl.ifinfmsg, {"index": 12, "flags": 0x1003}, LINK)
    reads_as_pyroute2(a)
    link = link_of(a)
    assert (link.index, link.name, link.mtu, link.mac, link.kind, link.up, link.alias) == \
        (12, "rdtx0", 4200, "02:aa:bb:cc:dd:ee", "macvlan", True, "rdma-cni:ab")
    assert (link.perm_mac, link.parent_dev, link.parent_bus) == \
        ("02:aa:bb:cc:dd:ef", "0000:3b:00.0", "pci")
    assert a.attr("IFLA_OPERSTATE") is None  # absent
    assert (link.iflink, link.link_netnsid) == (3, None)


def test_a_veths_peer_and_a_netns_id_read_as_pyroute2_reads_them() -> None:
    veth = answer(rtnl.ifinfmsg, {"index": 4}, [("IFLA_IFNAME", "rnic0"), ("IFLA_LINK", 9),
                                                ("IFLA_LINK_NETNSID", 2)])
    reads_as_pyroute2(veth)
    assert (link_of(veth).iflink, link_of(veth).link_netnsid) == (9, 2)
    for sent, want in ((5, 5), (0, 0), (0xFFFFFFFF, None)):  # -1: no id assigned
        nsid = answer(rtnl.nsidmsg, {}, [("NETNSA_NSID", sent)])
        reads_as_pyroute2(nsid)
        assert nsid_of(nsid) == want


def test_addresses_routes_and_rules_read_as_pyroute2_reads_them() -> None:
    addr = answer(rtnl.ifaddrmsg, {"family": 2, "prefixlen": 26, "index": 9},
                  [("IFA_ADDRESS", "198.51.100.9"), ("IFA_LOCAL", "198.51.100.9"),
                   ("IFA_LABEL", "rnic0")])
    reads_as_pyroute2(addr)
    assert address_of(addr) == (9, "198.51.100.9/26")
    fields, attrs = route_request(ROUTES[1])
    route = answer(rtnl.rtmsg, fields, attrs)
    reads_as_pyroute2(route)
    assert route_of(route) == replace(ROUTES[1], proto=4)  # the request sets RTPROT_STATIC
    rule = answer(rtnl.fibmsg, {"family": 2, "src_len": 32, "table": 252},
                  [("FRA_SRC", "198.51.100.9"), ("FRA_TABLE", 1001), ("FRA_PRIORITY", 32000)])
    reads_as_pyroute2(rule)
    assert rule_of(rule) == (32000, 1001, "198.51.100.9/32")


def test_an_attribute_of_the_wrong_size_reads_as_pyroute2_reads_it() -> None:
    data = bytearray(pyroute2_bytes(rtnl.ifinfmsg, {}, [("IFLA_IFNAME", "eth1")]))
    # append an IFLA_MTU (4) of 2 bytes and a MAC of 3: pyroute2 cannot decode them
    for kind, payload in ((4, b"\x05\xdc"), (1, b"\x02\xaa\xbb")):
        data += struct.pack("=HH", 4 + len(payload), kind) + payload + b"\0" * (-len(payload) % 4)
    struct.pack_into("=I", data, 0, len(data))
    a = Answer(rtnl.ifinfmsg, bytes(data), 0, len(data))
    full = a.full()
    for name in ("IFLA_IFNAME", "IFLA_MTU", "IFLA_ADDRESS"):
        assert a.attr(name) == full.get_attr(name), name


def test_a_message_is_read_within_its_own_length() -> None:
    one = pyroute2_bytes(rtnl.ifinfmsg, {"index": 1}, [("IFLA_IFNAME", "lo")])
    two = pyroute2_bytes(rtnl.ifinfmsg, {"index": 2}, [("IFLA_IFNAME", "eth1"),
                                                       ("IFLA_MTU", 1500)])
    data = one + two
    first, second = Answer(rtnl.ifinfmsg, data, 0, len(one)), \
        Answer(rtnl.ifinfmsg, data, len(one), len(two))
    assert (first["index"], first.attr("IFLA_IFNAME"), first.attr("IFLA_MTU")) == (1, "lo", None)
    assert (second["index"], second.attr("IFLA_IFNAME"), second.attr("IFLA_MTU")) == \
        (2, "eth1", 1500)


def test_a_third_item_of_an_attribute_is_refused() -> None:
    with pytest.raises(Unsupported):
        encode(rtnl.ifinfmsg, 16, 5, 1, {}, [("IFLA_IFNAME", "eth1", 0x8000)])


def test_the_netlink_adapter_imports_pyroute2_without_its_package_init() -> None:
    """pyroute2's package __init__ imports every netlink family it has (IPRoute, NDB, ...),
    about half the in-process plugin's start-up; rdma_cni/adapters/pyroute2pkg.py keeps it
    out, however the imports of the adapter's modules are ordered."""
    import subprocess
    import sys

    probe = ("import sys; import rdma_cni.adapters.rtnlanswer, rdma_cni.adapters.netlink; "
             "print(sorted(m for m in ('pyroute2.iproute', 'pyroute2.ndb', 'pyroute2.ipset') "
             "if m in sys.modules))")
    for first in ("rdma_cni.adapters.rtnlcodec", "rdma_cni.adapters.rtnlanswer",
                  "rdma_cni.adapters.netlink"):
        proc = subprocess.run([sys.executable, "-c", f"import {first}; {probe}"],
                              capture_output=True, text=True, timeout=60, check=True)
        assert proc.stdout.strip() == "[]", (first, proc.stdout, proc.stderr)
