"""The netlink fake (tests/support/fakes/netlink.py) is held to the kernel: the same sequence
of port operations runs through the real adapter in throwaway netns (a veth pair
stands in for the host's RDMA NIC, macvlan for the sub-link) and through the fake;
what each operation returns or refuses (errno) and the state both show after every
step must be the same."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from ipaddress import IPv4Interface
from typing import Any

import pytest
from support.fakes.netlink import FakeKernel, observe
from support.netns import ip

from rdma_cni.adapters import netns
from rdma_cni.adapters.netlink import Netlink
from rdma_cni.datapath.plan import SYSCTLS
from rdma_cni.errors import CniError
from rdma_cni.vocab.netlink import SCOPE_LINK, NetlinkFailure, Route
from rdma_cni.vocab.ports import NetlinkPort

pytestmark = pytest.mark.root
MARK = "rdma-cni:contract"
TABLE, PRIO = 100, 20000


@dataclass
class World:
    host: NetlinkPort
    pod: NetlinkPort
    pod_fd: int
    host_fd: int


def _state(w: World) -> dict[str, Any]:
    return {"host": observe(w.host, (254, TABLE), PRIO), "pod": observe(w.pod, (254, TABLE), PRIO),
            "altnames": [sorted((lk.name, lk.altnames) for lk in port.links())
                         for port in (w.host, w.pod)]}


def _ops() -> list[tuple[str, Callable[[World], object]]]:
    gw_route = Route(dst="198.19.0.0/16", gateway="198.51.100.62", oif=None, table=TABLE)

    def route(w: World, r: Route, name: str = "eth1") -> None:
        link = w.pod.require(name)
        w.pod.add_route(Route(dst=r.dst, gateway=r.gateway, oif=link.index, table=r.table,
                              onlink=r.onlink, scope=r.scope))

    def sub(name: str, mtu: int, mac: str | None = None) -> Callable[[World], object]:
        return lambda w: w.host.create_sublink("macvlan", name, w.host.require("rnic0"),
                                               w.pod_fd, mtu, mac)

    def defaults(w: World, oif: str | None = None) -> list[tuple[str, str | None, int]]:
        index = w.host.require(oif).index if oif else None
        return [(r.dst, r.gateway, r.priority) for r in w.host.default_routes(oif=index)]

    def match(w: World, dst: str) -> tuple[Any, ...] | None:
        r = w.host.route_match(dst)
        names = {lk.index: lk.name for lk in w.host.links()}
        return None if r is None else (r.dst, r.gateway, r.table, r.type,
                                       r.priority, [names[i] for i in r.devices])

    return [
        ("look up a missing link", lambda w: w.host.link("nope")),
        ("no default route", defaults),
        ("the route to a probe, without a default route", lambda w: match(w, "240.0.0.1")),
        ("a default route through rnic0",
         lambda w: w.host.add_route(Route("0.0.0.0/0", "198.51.100.62",
                                          w.host.require("rnic0").index, 254, onlink=True,
                                          priority=100))),
        ("the default routes", defaults),
        ("the default routes through rnic0", lambda w: defaults(w, "rnic0")),
        ("the default routes through rnic1", lambda w: defaults(w, "rnic1")),
        ("a route in a table of its own through rnic0",
         lambda w: w.host.add_route(Route("0.0.0.0/0", "198.51.100.61",
                                          w.host.require("rnic0").index, TABLE))),
        ("the routes through rnic0, every table", lambda w: sorted(
            (r.dst, r.gateway, r.table) for r in w.host.routes_through(
                w.host.require("rnic0").index) if r.gateway)),
        ("delete it", lambda w: w.host.del_route(Route("0.0.0.0/0", "198.51.100.61",
                                                       w.host.require("rnic0").index, TABLE))),
        ("the route to a probe", lambda w: match(w, "240.0.0.1")),
        ("the route to an address of rnic1", lambda w: match(w, "198.51.100.65")),
        ("the route into rnic0's subnet", lambda w: match(w, "198.51.100.9")),
        ("a rule on the host", lambda w: w.host.add_rule("198.51.100.1", TABLE, PRIO)),
        ("the route to an address of rnic1 (local table apart)",
         lambda w: match(w, "198.51.100.65")),
        ("delete the host's rule", lambda w: w.host.del_rule("198.51.100.1", TABLE, PRIO)),
        ("the route to an address of rnic1 (no rule left)",
         lambda w: match(w, "198.51.100.65")),
        ("create a macvlan into the pod", sub("rdtx0", 1400, "02:00:00:00:00:aa")),
        ("create it again", sub("rdtx0", 1400)),
        ("create one above the parent's MTU", sub("rdtx1", 9000)),
        ("create two more", lambda w: (sub("rdtx2", 1400)(w), sub("rdtx3", 1400)(w))),
        ("rename and mark it", lambda w: w.pod.rename("rdtx0", "eth1", MARK, "rename")),
        ("route through a link that is down",
         lambda w: route(w, Route("198.51.100.0/26", None, None, TABLE, scope=SCOPE_LINK))),
        ("bring it up with its MTU", lambda w: w.pod.set_up("eth1", "up", mtu=1300)),
        ("set its IPv4 settings", lambda w: w.pod.set_ipv4_conf("eth1", SYSCTLS, "conf")),
        ("set a missing link's IPv4 settings",
         lambda w: w.pod.set_ipv4_conf("nope", SYSCTLS, "conf")),
        ("rename a link that is up", lambda w: w.pod.rename("eth1", "eth9", MARK, "rename")),
        ("rename it back", lambda w: w.pod.rename("eth9", "eth1", MARK, "rename")),
        ("rename onto a taken name", lambda w: w.pod.rename("eth1", "lo", MARK, "rename")),
        ("add an address", lambda w: w.pod.add_address("eth1", IPv4Interface("198.51.100.10/26"))),
        ("add it again", lambda w: w.pod.add_address("eth1", IPv4Interface("198.51.100.10/26"))),
        ("connected route in the table",
         lambda w: route(w, Route("198.51.100.0/26", None, None, TABLE, scope=SCOPE_LINK))),
        ("gateway route in the table", lambda w: route(w, gw_route)),
        ("the same again", lambda w: route(w, gw_route)),
        ("unreachable gateway", lambda w: route(w, Route("198.18.0.0/16", "203.0.113.1", None,
                                                         TABLE))),
        ("onlink gateway", lambda w: route(w, Route("198.18.0.0/16", "203.0.113.1", None, TABLE,
                                                    onlink=True))),
        ("delete the connected route (link scope)",
         lambda w: w.pod.del_route(Route("198.51.100.0/26", None, None, TABLE))),
        ("source rule", lambda w: w.pod.add_rule("198.51.100.10", TABLE, PRIO)),
        ("the same rule", lambda w: w.pod.add_rule("198.51.100.10", TABLE, PRIO)),
        ("set the alias", lambda w: w.pod.set_alias("eth1", "other", "alias")),
        ("give it alternative names", lambda w: (w.pod.add_altname("eth1", "rdtalt", "alt"),
                                                 w.pod.add_altname("eth1", "rdtalt2", "alt"))),
        ("give it one again", lambda w: w.pod.add_altname("eth1", "rdtalt", "alt")),
        ("give another link the same", lambda w: w.pod.add_altname("rdtx2", "rdtalt", "alt")),
        ("rename a link onto an alternative name",
         lambda w: w.pod.rename("rdtx2", "rdtalt", MARK, "rename")),
        ("take one away", lambda w: w.pod.del_altname("eth1", "rdtalt", "alt")),
        ("take it away again", lambda w: w.pod.del_altname("eth1", "rdtalt", "alt")),
        ("take one from a missing link", lambda w: w.pod.del_altname("nope", "rdtalt", "alt")),
        ("set a smaller MTU", lambda w: w.pod.set_mtu("eth1", 1280, "mtu")),
        ("set down", lambda w: w.pod.set_down("eth1", "down")),
        ("set up a missing link", lambda w: w.pod.set_up("nope", "up")),
        ("move the NIC into the pod (down, unconfigured there)",
         lambda w: w.host.move_to_netns("rnic1", w.pod_fd, "move")),
        ("move a link onto a name taken there",
         lambda w: w.host.move_to_netns("rnic0", w.pod_fd, "move") if w.pod.rename(
             "rnic1", "rnic0", "", "rename") is None else None),
        ("delete the rule", lambda w: w.pod.del_rule("198.51.100.10", TABLE, PRIO)),
        ("delete it again", lambda w: w.pod.del_rule("198.51.100.10", TABLE, PRIO)),
        ("delete a route", lambda w: w.pod.del_route(Route("198.18.0.0/16", None, None, TABLE))),
        ("delete it again", lambda w: w.pod.del_route(Route("198.18.0.0/16", None, None, TABLE))),
        ("delete the address",
         lambda w: w.pod.del_address("eth1", IPv4Interface("198.51.100.10/26"))),
        ("delete it again",
         lambda w: w.pod.del_address("eth1", IPv4Interface("198.51.100.10/26"))),
        ("delete a link by its index", lambda w: w.pod.delete_link_at(
            w.pod.require("rdtx3").index)),
        ("delete a missing index", lambda w: w.pod.delete_link_at(9999)),
        ("delete links together, one of them missing",
         lambda w: w.pod.delete_links(["rdtx2", "nope", "rdtx3", "rdtx2"])),
        ("delete them together again", lambda w: w.pod.delete_links(["rdtx2", "rdtx3"])),
        ("delete the macvlan", lambda w: w.pod.delete_link("eth1")),
        ("delete it again", lambda w: w.pod.delete_link("eth1")),
    ]


NAMES = ("rnic0", "rnic1", "rdtx0", "rdtx1", "rdtx2", "rdtx3", "eth1", "eth9", "nope")


def _lookups_agree(w: World, what: str) -> None:
    """What a port answers by name (the adapter keeps what it looked up and changed itself
    during a request) is what a dump of the netns shows."""
    for port in (w.host, w.pod):
        dumped = {lk.name: lk for lk in port.links()}
        for name in NAMES:
            assert port.link(name) == dumped.get(name), f"{what}: {port.label} {name}"


def _run(w: World) -> list[tuple[str, object, dict[str, Any]]]:
    trace = []
    for what, op in _ops():
        try:
            outcome: object = op(w)
        except NetlinkFailure as exc:
            outcome = f"errno {exc.errno}"
        except CniError as exc:
            outcome = f"{type(exc).__name__}: {exc.msg}"
        _lookups_agree(w, what)
        trace.append((what, outcome, _state(w)))
    return trace


@pytest.fixture
def real() -> Iterator[World]:
    tag = uuid.uuid4().hex[:6]
    names = [f"rcct{tag}h", f"rcct{tag}p"]
    for n in names:
        ip(None, "netns", "add", n)
    try:
        ip(names[0], "link", "add", "rnic0", "type", "veth", "peer", "name", "rnic1")
        ip(names[0], "addr", "add", "198.51.100.1/26", "dev", "rnic0")
        ip(names[0], "addr", "add", "198.51.100.65/26", "dev", "rnic1")
        ip(names[0], "link", "set", "rnic0", "up")
        ip(names[0], "link", "set", "rnic1", "up")
        home = netns.host_fd()
        fds = [netns.open_netns(f"/run/netns/{n}") for n in names]
        labels = ("the host", "pod")
        ports = [Netlink.inside(fd, home, lb) for fd, lb in zip(fds, labels, strict=True)]
        yield World(ports[0], ports[1], fds[1], fds[0])
        for nl in ports:
            nl.close()
        for fd in [*fds, home]:
            os.close(fd)
    finally:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def _fake() -> World:
    kernel = FakeKernel()
    host, pod = kernel.host, kernel.netns("pod")
    hp = kernel.port(host)
    for name, addr in (("rnic0", "198.51.100.1/26"), ("rnic1", "198.51.100.65/26")):
        kernel.add_nic(host, name, 1500)
        hp.add_address(name, IPv4Interface(addr))
    return World(hp, kernel.port(pod), pod.fd, host.fd)


def test_the_fake_behaves_as_the_kernel(real: World) -> None:
    want, got = _run(real), _run(_fake())
    assert [t[0] for t in want] == [t[0] for t in got]
    for (what, out_real, st_real), (_, out_fake, st_fake) in zip(want, got, strict=True):
        assert out_fake == out_real, what
        assert st_fake == st_real, what


def _ipv4_settings(attrs: list[tuple[str, Any]]) -> bool:
    """A request setting IPv4 settings (IFLA_AF_SPEC's AF_INET): the one pyroute2 cannot
    pack (it maps AF_INET to the array an answer carries)."""
    return any(name == "IFLA_AF_SPEC" and any(af == "AF_INET" for af, _ in value["attrs"])
               for name, value in attrs)


def test_requests_and_answers_are_pyroute2s_own(real: World,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request the adapter sends in the sequence above is byte for byte what
    pyroute2 encodes (but the IPv4 settings', see :func:`_ipv4_settings`), and every
    attribute of every answer the kernel gives reads as pyroute2 decodes it (the codec
    packs and reads without pyroute2's objects)."""
    from support.rtnl_oracle import pyroute2_encoded

    from rdma_cni.adapters import rtnl

    sent: list[tuple[bytes | None, bytes]] = []
    answers: list[rtnl.Answer] = []
    encode, collect = rtnl.encode, rtnl.Channel._collect

    def checked_encode(cls: type, kind: int, flags: int, seq: int, fields: dict[str, Any],
                       attrs: list[tuple[str, Any]]) -> bytes | None:
        ours = encode(cls, kind, flags, seq, fields, attrs)
        if _ipv4_settings(attrs):
            return ours  # pyroute2 cannot pack them: see test_rtnl_codec.py
        sent.append((ours, pyroute2_encoded(cls, attrs, fields, kind, flags, seq)))
        return ours

    def kept(self: rtnl.Channel, seq: int) -> tuple[list[rtnl.Answer], bool]:
        out = collect(self, seq)
        answers.extend(out[0])
        return out

    monkeypatch.setattr(rtnl, "encode", checked_encode)
    monkeypatch.setattr(rtnl.Channel, "_collect", kept)
    _run(real)
    for port in (real.host, real.pod):  # and a dump of everything left
        port.links(), port.addresses(), port.routes(), port.routes(TABLE), port.rules()
    assert sent and answers
    packed = [ref for ours, ref in sent if ours is not None]
    assert len(packed) >= len(sent) - 2, "the codec packs all but the sub-link creations"
    assert [ours for ours, ref in sent if ours is not None] == packed
    read = 0
    for a in answers:
        full = a.full()
        for name, _value in full["attrs"]:
            if name != "UNKNOWN":
                assert a.attr(name) == full.get_attr(name), name
                read += 1
        for field in full:
            if field not in ("attrs", "header", "value", "state") and not field.startswith("__"):
                assert a[field] == full[field], field
    assert read > 100
