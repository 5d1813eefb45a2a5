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
from typing import Any

from rdma_cni.errors import IOFailure
from rdma_cni.records import field, record

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
#: RTM_SETLINK sets through IFLA_AF_SPEC and RTM_GETLINK shows (IFLA_INET_CONF). The
#: kernel's own ``mc_forwarding`` (2, read-only) and ``tag`` (12, in no file) are left out.
IPV4_DEVCONF = {name: i for i, name in enumerate((
    "", "forwarding", "", "proxy_arp", "accept_redirects", "secure_redirects",
    "send_redirects", "shared_media", "rp_filter", "accept_source_route", "bootp_relay",
    "log_martians", "", "arp_filter", "medium_id", "disable_xfrm", "disable_policy",
    "force_igmp_version", "arp_announce", "arp_ignore", "promote_secondaries", "arp_accept",
    "arp_notify", "accept_local", "src_valid_mark", "proxy_arp_pvlan", "route_localnet",
    "igmpv2_unsolicited_report_interval", "igmpv3_unsolicited_report_interval",
    "ignore_routes_with_linkdown", "drop_unicast_in_l2_multicast", "drop_gratuitous_arp",
    "bc_forwarding", "arp_evict_nocarrier")) if name}
#: the IPv6 settings of an interface an exclusive NIC gets back
#: (``/proc/sys/net/ipv6/conf/<name>/<key>``), by their index in IFLA_INET6_CONF
#: (``DEVCONF_*``, include/uapi/linux/ipv6.h); RTM_SETLINK sets none of them
IPV6_DEVCONF = {"forwarding": 0, "hop_limit": 1, "mtu": 2, "accept_ra": 3,
                "accept_redirects": 4, "autoconf": 5, "dad_transmits": 6, "use_tempaddr": 10,
                "accept_ra_defrtr": 17, "accept_ra_pinfo": 18, "proxy_ndp": 22,
                "disable_ipv6": 26, "accept_dad": 27, "ndisc_notify": 29}
#: the link flags (ifi_flags) a NIC gets back: NOARP, PROMISC, ALLMULTI, MULTICAST
#: (PROMISC and ALLMULTI as set by a user, not by a packet socket's count)
LINK_FLAGS = 0x80 | 0x100 | 0x200 | 0x1000


@record
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


@record
class LinkConf:
    """A link's own settings that a move to another netns resets (its IPv4 and IPv6
    settings: the kernel makes them again from the new netns's ``default``) or that its
    user may change (flags, queue length, alias)."""

    flags: int  # ifi_flags
    txqlen: int
    alias: str | None
    ipv4: dict[str, int] = field(default_factory=dict)  # IPV4_DEVCONF keys
    ipv6: dict[str, int] = field(default_factory=dict)  # IPV6_DEVCONF keys (none: no IPv6)
    inet6_mode: int | None = None  # IFLA_INET6_ADDR_GEN_MODE

    def saved(self) -> dict[str, object]:
        """The state record's form (:attr:`rdma_cni.vocab.plan.IfacePlan.host_link`)."""
        return {"flags": self.flags & LINK_FLAGS, "txqlen": self.txqlen, "alias": self.alias,
                "ipv4": dict(self.ipv4), "ipv6": dict(self.ipv6)}


@record
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


@record
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


@record
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
