"""The kernel adapter's every-family methods (an exclusive NIC's own configuration),
against the kernel in a throwaway netns, through the one rtnetlink codec: an address
put with flags, lifetimes, label and broadcast reads back as put; the routes through a
link are those of both families in every table but ``local``; the IPv6 address
generation mode reads back as set. Oracle: the adapter's reads and ``ip -j``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from cnirunner import ip_json, sh

from rdma_cni.adapters import netns
from rdma_cni.adapters.netlink import Netlink
from rdma_cni.vocab.netlink import FOREVER, Addr

pytestmark = pytest.mark.root


@pytest.fixture
def port() -> Iterator[tuple[Netlink, str]]:
    ns = f"nlf{uuid.uuid4().hex[:8]}"
    sh("ip", "netns", "add", ns)
    fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    home = netns.host_fd()
    try:
        sh("ip", "-n", ns, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb")
        for dev in ("va", "vb"):
            sh("ip", "-n", ns, "link", "set", "dev", dev, "up")
        nl = Netlink.inside(fd, home, ns)
        try:
            yield nl, ns
        finally:
            nl.close()
    finally:
        os.close(fd)
        os.close(home)
        sh("ip", "netns", "del", ns)


def test_an_address_reads_back_as_it_was_put(port: tuple[Netlink, str]) -> None:
    nl, ns = port
    put = [Addr("198.51.100.3/26", label="va:p", broadcast="198.51.100.63"),
           Addr("198.51.100.1/26", label="va"),
           Addr("2001:db8:8::5/64", flags=0x202),  # nodad noprefixroute
           Addr("2001:db8:7::5/64", valid=3600, preferred=1800)]
    for a in put:
        nl.put_addr("va", a)
        nl.put_addr("va", a)  # present already: success
    got = nl.addrs(nl.require("va").index)
    v4 = [a for a in got if a.version == 4]
    assert [(a.cidr, a.label, a.broadcast) for a in v4] == \
        [("198.51.100.3/26", "va:p", "198.51.100.63"), ("198.51.100.1/26", "va", None)]
    assert v4[1].flags & 0x01  # the second of the subnet is its secondary
    nodad = next(a for a in got if a.cidr == "2001:db8:8::5/64")
    assert nodad.flags & 0x202 == 0x202 and nodad.valid == FOREVER
    timed = next(a for a in got if a.cidr == "2001:db8:7::5/64")
    assert 3590 < timed.valid <= 3600 and 1790 < timed.preferred <= 1800
    shown = {a["local"]: a for lk in ip_json(ns, "addr", "show", "dev", "va")
             for a in lk["addr_info"]}
    assert shown["2001:db8:8::5"].get("nodad") and shown["2001:db8:8::5"].get("noprefixroute")


def test_routes_through_a_link_are_every_familys_in_every_table(
        port: tuple[Netlink, str]) -> None:
    nl, ns = port
    nl.put_addr("va", Addr("198.51.100.1/26"))
    nl.put_addr("va", Addr("2001:db8:7::5/64", flags=0x02))
    for argv in (["route", "add", "198.18.0.0/15", "via", "198.51.100.62", "dev", "va"],
                 ["route", "add", "203.0.113.0/24", "dev", "va", "table", "123"],
                 ["-6", "route", "add", "2001:db8:9::/48", "via", "2001:db8:7::1", "dev", "va",
                  "metric", "77", "table", "123"]):
        sh("ip", "-n", ns, *argv)
    via = nl.routes_via(nl.require("va").index)
    mine = {(r.dst, r.gateway, r.table, r.priority) for r in via if r.proto != 2}
    assert mine == {("198.18.0.0/15", "198.51.100.62", 254, 0),
                    ("203.0.113.0/24", None, 123, 0),
                    ("2001:db8:9::/48", "2001:db8:7::1", 123, 77)}
    assert not [r for r in via if r.table == 255]  # the kernel's local table is not listed
    assert not [r for r in via if r.oif != nl.require("va").index]


def test_the_ipv6_address_generation_mode_reads_back_as_set(port: tuple[Netlink, str]) -> None:
    nl, ns = port
    assert nl.link_conf("va").inet6_mode == 0  # type: ignore[union-attr]  # eui64, the default
    nl.set_inet6_mode("vb", 1, "set mode")
    assert nl.link_conf("vb").inet6_mode == 1  # type: ignore[union-attr]
    assert ip_json(ns, "-d", "link", "show", "dev", "vb")[0]["inet6_addr_gen_mode"] == "none"
    assert nl.link_conf("nope") is None
