"""An exclusive NIC's own configuration, put on a link: on the host when the NIC comes
back (:func:`restore_host`), in the pod when it goes in (:mod:`rdma_cni.datapath.podconfig`).

Addresses go on so that the kernel lists them in the order the host had them (the
first of an IPv4 subnet becomes its primary again), with their flags, broadcast and
label (renamed with the link) and what is left of their lifetimes (an address whose
valid lifetime ran out meanwhile is not put back). IPv6 addresses go on once the link
is up: the kernel gives an address with a finite lifetime that was added to a down
link no prefix route when the link comes up. They start tentative, as the kernel makes
every new one (``nodad`` only where the host's had it); a route whose IPv6 source
address is still tentative waits, bounded, for its duplicate address detection. The
IPv6 address generation mode and the NIC's IPv4 and IPv6 settings
(:func:`restore_settings`) are set before the link comes up, so the kernel makes the
link-local address the host had (or none)."""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from rdma_cni.datapath.altnames import restore_altnames
from rdma_cni.vocab.netlink import (
    FOREVER,
    IPV4_DEVCONF,
    IPV6_DEVCONF,
    LINK_FLAGS,
    SCOPE_LINK,
    SCOPE_UNIVERSE,
    Addr,
    LinkConf,
    NetlinkFailure,
    Route,
)
from rdma_cni.vocab.plan import HostAddr, HostRoute, IfacePlan
from rdma_cni.vocab.ports import L3Changes, NetlinkPort

log = logging.getLogger("rdma_cni")
IFA_F_TENTATIVE = 0x40
#: how long a route waits for the IPv6 source address it names to leave DAD
DAD_WAIT = 3.0
#: what the kernel answers a request with one setting it refuses
REFUSED = (errno.EINVAL, errno.EOPNOTSUPP, errno.ERANGE)


def restore_host(host: NetlinkPort, name: str, p: IfacePlan) -> None:
    restore_altnames(host, name, p)
    restore_mac(host, name, p)
    if p.host_mtu:
        host.set_mtu(name, p.host_mtu, f"restore MTU of {name}")
    set_mode(host, name, p.inet6_mode)
    restore_settings(host, name, p)
    # a record of an earlier release has IPv4 addresses only
    addrs = p.host_addrs or tuple(HostAddr(str(a)) for a in p.addresses)
    put_addrs(host, name, addrs, relabel=name != p.nic, family=4 if p.host_up else None)
    if p.host_up:
        host.set_up(name, f"bring {name} up")
        put_addrs(host, name, addrs, family=6)
    link = host.require(name)
    saved = p.host_routes or tuple(HostRoute(dst, gw, 0, 0, False) for dst, gw in p.routes)
    add_routes(host, name, [route_of(HostRoute(*r), link.index) for r in saved])


def restore_mac(host: NetlinkPort, name: str, p: IfacePlan) -> None:
    """The MAC the NIC had on the host (ADD records it), if the pod changed it: the host
    must not answer the fabric with an address a pod chose. Set while the link is down
    (a move takes it down), as most drivers require; a driver that refuses leaves a
    warning, never a DEL that fails at every retry."""
    mac = p.identity.get("mac")
    link = host.link(name)
    if not isinstance(mac, str) or not mac or link is None or link.mac == mac:
        return
    try:
        host.set_mac(name, mac, f"restore the MAC address of {name}")
    except NetlinkFailure as exc:
        log.warning("%s (the pod changed it to %s)", exc.msg, link.mac)


def restore_settings(host: NetlinkPort, name: str, p: IfacePlan) -> None:
    """The NIC's own settings ADD recorded (``host_link``), where they differ now: its
    IPv4 and IPv6 settings (the kernel made them again from the host's ``default`` when
    the NIC came back), before its addresses and its link come up (``disable_ipv6``
    first: no link-local address the host never had); its link flags, queue length and
    alias (the pod's to change). One that fails is a warning: the NIC is back."""
    saved, now = p.host_link, host.link_conf(name) if p.host_link else None
    if now is None:
        return
    for what, change in _changes(host, name, saved, now):
        try:
            change()
        except NetlinkFailure as exc:
            log.warning("%s: its %s not restored", exc.msg, what)


def _changes(host: NetlinkPort, name: str, saved: dict[str, Any], now: LinkConf
             ) -> list[tuple[str, Callable[[], object]]]:
    """(what, the change) of each setting ``saved`` that ``now`` differs from."""
    v4 = [(k, v) for k, v in saved["ipv4"].items() if k in IPV4_DEVCONF and now.ipv4.get(k) != v]
    v6 = sorted(((k, v) for k, v in saved["ipv6"].items()
                 if k in IPV6_DEVCONF and k in now.ipv6 and now.ipv6[k] != v),
                key=lambda kv: kv[0] != "disable_ipv6")
    flags, alias = saved["flags"] & LINK_FLAGS, saved["alias"] or None
    out: list[tuple[str, Callable[[], object]]] = []
    if v4:
        out.append(("IPv4 settings", lambda: _keywise(host.set_ipv4_conf, name, v4, "IPv4")))
    if v6:
        out.append(("IPv6 settings", lambda: _keywise(host.set_ipv6_conf, name, v6, "IPv6")))
    if flags != now.flags & LINK_FLAGS:
        out.append(("link flags", lambda: host.set_flags(
            name, flags, LINK_FLAGS, f"restore the link flags of {name}")))
    if saved["txqlen"] and saved["txqlen"] != now.txqlen:
        out.append(("queue length", lambda: host.set_txqlen(
            name, saved["txqlen"], f"restore the queue length of {name}")))
    if alias != now.alias:
        out.append(("alias", lambda: host.set_alias(
            name, alias or "", f"restore the alias of {name}")))
    return out


def _keywise(set_conf: Callable[[str, Sequence[tuple[str, int]], str], None], name: str,
             values: Sequence[tuple[str, int]], family: str) -> None:
    """Set ``values`` in one request; when the kernel refuses one of them (a key it does
    not have: a record of another kernel's; a value out of its range), which refuses the
    whole request, one request per key: a refusal costs only its own (a warning)."""
    try:
        set_conf(name, values, f"restore {_listed(values)} of {name}")
        return
    except NetlinkFailure as exc:
        if len(values) < 2 or exc.errno not in REFUSED:
            raise
    for kv in values:
        try:
            set_conf(name, [kv], f"restore {_listed([kv])} of {name}")
        except NetlinkFailure as exc:
            log.warning("%s: its %s setting %s not restored", exc.msg, family, kv[0])


def _listed(values: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values)


def set_mode(nl: L3Changes, name: str, mode: int | None) -> None:
    if mode is None:
        return
    try:
        nl.set_inet6_mode(name, mode, f"set the IPv6 address mode of {name} in {nl.label}")
    except NetlinkFailure as exc:  # IPv6 off there: nothing to generate addresses for
        log.warning("%s", exc.msg)


def put_addrs(nl: L3Changes, name: str, addrs: Sequence[HostAddr], relabel: bool = True,
              family: int | None = None) -> None:
    """Put ``addrs`` (of ``family``: 4, 6 or both) on ``name`` (see the module doc);
    ``relabel``: IPv4 labels take the link's name (the kernel renames them with the
    link, but not across a move)."""
    now = time.clock_gettime(time.CLOCK_BOOTTIME)
    v4 = [h for h in addrs if ":" not in h.cidr and family in (None, 4)]
    v6 = [h for h in addrs if ":" in h.cidr and family in (None, 6)]
    # the kernel lists an IPv4 address after those before it, an IPv6 one before those
    # of its scope before it: the order it had comes back from the same adds, reversed
    for h in v4 + v6[::-1]:
        addr = addr_at(h, now, name if relabel else None)
        if addr is None:
            log.warning("%s: the valid lifetime of %s ran out while it was away: not put back",
                        name, h.cidr)
            continue
        try:
            nl.put_addr(name, addr)
        except NetlinkFailure as exc:
            if addr.version == 4 or exc.errno not in (errno.EACCES, errno.EAFNOSUPPORT):
                raise
            log.warning("%s in %s: IPv6 is disabled there: %s not added", name, nl.label,
                        h.cidr)


def addr_at(h: HostAddr, now: float, name: str | None) -> Addr | None:
    """The address to add at ``now`` (None: its valid lifetime ended)."""
    def left(until: float | None) -> int:
        return FOREVER if until is None else max(0, min(int(until - now), FOREVER - 1))

    valid, preferred = left(h.valid_until), left(h.preferred_until)
    if valid == 0:
        return None
    label = h.label
    if label and name is not None:
        suffix = label.partition(":")[2]
        label = f"{name}:{suffix}" if suffix else name
    return Addr(h.cidr, h.flags, valid, min(preferred, valid), label, h.broadcast)


def route_of(r: HostRoute, index: int, table: int | None = None) -> Route:
    v4 = ":" not in r.dst
    scope = SCOPE_LINK if v4 and not r.gateway else SCOPE_UNIVERSE  # a v4 device route: link
    return Route(dst=r.dst, gateway=r.gateway, oif=index, table=r.table if table is None
                 else table, onlink=r.onlink, proto=r.proto, priority=r.metric, scope=scope,
                 prefsrc=r.prefsrc)


def add_routes(nl: NetlinkPort, name: str, routes: Sequence[Route]) -> None:
    """Add ``routes``; one whose IPv6 source address is still tentative (EINVAL) is added
    again once that address has left DAD (bounded by :data:`DAD_WAIT`)."""
    later = []
    for route in routes:
        try:
            nl.add_route(route)
        except NetlinkFailure as exc:
            if not (route.version == 6 and route.prefsrc and exc.errno == errno.EINVAL):
                raise
            later.append(route)
    if later:
        _wait_dad(nl, name, {r.prefsrc for r in later})
        for route in later:
            nl.add_route(route)


def _wait_dad(nl: NetlinkPort, name: str, sources: set[str | None]) -> None:
    index = nl.require(name).index
    deadline = time.monotonic() + DAD_WAIT
    while time.monotonic() < deadline:
        if not any(a.cidr.split("/")[0] in sources and a.flags & IFA_F_TENTATIVE
                   for a in nl.addrs(index)):
            return
        time.sleep(0.05)
