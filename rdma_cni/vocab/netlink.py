"""The records of the netlink port (links, addresses, routes, rules, counters), its
constants and its errors. Stdlib only; the protocols are in :mod:`rdma_cni.vocab.ports`.

No pyroute2 name crosses the port. Errors are of the project's family:
:class:`NetlinkFailure` (an ``IOFailure`` with the kernel's errno) names the action and
the object; what is already absent on a delete, or already present on an add of an
address, route or rule, is success.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from typing import Any

from rdma_cni.errors import IOFailure

RT_TABLE_MAIN = 254
RT_TABLE_LOCAL = 255
SCOPE_UNIVERSE = 0
SCOPE_LINK = 253
RTN_UNICAST = 1
RTN_LOCAL = 2
#: the routes the kernel learns from IPv6 router advertisements (one per NIC that hears
#: them, all of the same metric)
RTPROT_RA = 9
#: an address lifetime that never runs out (``forever``)
FOREVER = 0xFFFFFFFF
#: the destinations of a default route, IPv4 and IPv6
DEFAULT_DSTS = ("0.0.0.0/0", "::/0")
#: an interface's IPv4 settings (``/proc/sys/net/ipv4/conf/<name>/<key>``) by their index
#: in the kernel's ``ipv4_devconf`` (``IPV4_DEVCONF_*``, include/uapi/linux/ip.h): what
#: RTM_SETLINK sets through IFLA_AF_SPEC (the ones the plugin sets)
IPV4_DEVCONF = {"rp_filter": 8, "arp_announce": 18, "arp_ignore": 19, "arp_notify": 22}


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    mtu: int
    mac: str
    kind: str | None
    up: bool
    perm_mac: str | None = None
    parent_dev: str | None = None  # the parent device's name on its bus
    parent_bus: str | None = None  # that bus: "pci" (a PCI address), "virtio", ...
    alias: str | None = None
    #: IFLA_LINK: a veth's peer, a sub-link's lower device (its index in the netns
    #: ``link_netnsid`` names: the id the reading netns gives it; None: the link's own)
    iflink: int | None = None
    link_netnsid: int | None = None
    #: its alternative names (IFLA_PROP_LIST's IFLA_ALT_IFNAME), in the kernel's order
    altnames: tuple[str, ...] = ()


@dataclass(frozen=True)
class Addr:
    """An address of any family as the kernel shows it: ``flags`` are its IFA_F_* bits,
    ``valid``/``preferred`` its remaining lifetimes in seconds (:data:`FOREVER`: none),
    ``proto`` who made it (IFA_PROTO; None when the kernel does not say)."""

    cidr: str  # "198.51.100.1/26", "2001:db8::5/64"
    flags: int = 0
    valid: int = FOREVER
    preferred: int = FOREVER
    label: str | None = None  # IPv4 only
    broadcast: str | None = None  # IPv4 only
    proto: int | None = None

    @property
    def version(self) -> int:
        return 6 if ":" in self.cidr else 4


@dataclass(frozen=True)
class Route:
    dst: str  # CIDR
    gateway: str | None
    oif: int | None
    table: int
    onlink: bool = False
    scope: int = 0
    proto: int = 0  # 0: the default (static)
    priority: int = 0  # the metric
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    prefsrc: str | None = None
    type: int = RTN_UNICAST
    #: the links of a multipath route's nexthops (its ``oif`` is None then)
    nexthops: tuple[int, ...] = ()
    #: each nexthop's IPv4 gateway (or None), in the order of ``nexthops``
    via: tuple[str | None, ...] = ()

    @property
    def version(self) -> int:
        return 6 if ":" in self.dst else 4

    @property
    def devices(self) -> tuple[int, ...]:
        """Every link the route leads through: its ``oif``, or each nexthop's."""
        return (self.oif,) if self.oif else self.nexthops

    def gateways_via(self, oif: int) -> list[str]:
        """The gateways the route reaches through link ``oif`` (a multipath route's
        nexthops on it, or its own gateway)."""
        if self.oif:
            return [self.gateway] if self.oif == oif and self.gateway else []
        return [g for i, g in zip(self.nexthops, self.via, strict=False) if i == oif and g]


@dataclass(frozen=True)
class LinkStats:
    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int


#: (priority, table, source CIDR or None) of an IPv4 policy rule
Rule = tuple[int, int, str | None]


class NetlinkFailure(IOFailure):
    def __init__(self, msg: str, err: int) -> None:
        super().__init__(msg)
        self.errno = err


def failure(action: str, err: int) -> NetlinkFailure:
    """The error of a kernel refusal: "failed to <action>: <strerror>"."""
    try:
        reason = os.strerror(err).lower()
    except (ValueError, OverflowError):
        reason = f"error {err}"
    return NetlinkFailure(f"failed to {action}: {reason}", err)


def not_found(action: str, name: str, label: str) -> NetlinkFailure:
    return NetlinkFailure(f"failed to {action}: {name} not found in {label}", errno.ENODEV)
