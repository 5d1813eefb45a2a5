"""Reservation files' names as addresses (``addrs/<ip>``): each name parsed once per
process, and a network's names found by their text in a directory's sorted listing, so
that a scan of one pool on a node with hundreds of reservations over several NICs looks
at that pool's names alone (:meth:`rdma_cni.store.claims.Claims.ip_owners`)."""

from __future__ import annotations

import bisect
from ipaddress import IPv4Address, IPv4Network

from rdma_cni.log import LazyLogger

log = LazyLogger(__name__)

#: file names already parsed: the address and its integer (None for a stray name)
_parsed: dict[str, tuple[IPv4Address, int] | None] = {}
_strays: set[str] = set()  # the names in ``_parsed`` that are not addresses
_EVERY = IPv4Network("0.0.0.0/0")  # what a scan of no particular network looks at


def addresses(prefix: str, names: list[str], listed: set[str],
              within: IPv4Network | None) -> list[tuple[str, IPv4Address]]:
    """(name, address) of the reservation files ``names`` (sorted; ``listed``: the same
    as a set) of the directory ``prefix`` whose address is inside ``within`` (every one
    when None); a stray name is logged and skipped. Each name is parsed once per process,
    and a network's names are found by their text (a /24's all start with its first
    three numbers): a scan of one pool on a node with hundreds of reservations over
    several NICs looks at that pool's names alone."""
    new = listed.difference(_parsed)
    if len(_parsed) + len(new) > 1 << 16:
        _parsed.clear()
        _strays.clear()
        new = listed
    for name in new:
        try:
            ip = IPv4Address(name)
        except ValueError:
            _parsed[name] = None
            _strays.add(name)
        else:
            _parsed[name] = ip, int(ip)
    for name in sorted(listed & _strays):
        log.warning("ignoring stray file %s", prefix + name)
    net = within or _EVERY
    lo, hi = int(net.network_address), int(net.broadcast_address)
    text = _text_of(net)
    first = bisect.bisect_left(names, text) if text else 0
    end = bisect.bisect_left(names, text[:-1] + "/") if text else len(names)
    return [(name, known[0]) for name in names[first:end]
            if (known := _parsed[name]) is not None and lo <= known[1] <= hi]


def _text_of(net: IPv4Network) -> str:
    """What the text of every address of ``net`` starts with: its whole leading numbers
    and their dots ("198.51.100." for a /24 or longer, "" for a /7 or shorter). The
    sorted names of these addresses lie together, between this and the same with "/",
    the character after ".", in its place."""
    whole = net.prefixlen // 8
    if whole == 0:
        return ""
    return ".".join(str(net.network_address).split(".")[:min(whole, 3)]) + "."
