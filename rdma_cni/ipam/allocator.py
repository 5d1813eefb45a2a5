"""Built-in IPAM, pure part: the address pool of a NIC and the choice of an address.

A NIC's pool is its IPv4 subnet (that of its lowest address), from that address
+ 1 to broadcast - 1, minus every address the host holds in the subnet, the
gateway and configured exclusions; ``ipam.ranges[<subnet>]`` may narrow it.
Pools are named (and stored) by subnet, so NICs sharing a subnet share a pool.
No I/O here: :mod:`rdma_cni.ipam.reserve` ties this to the store.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

from rdma_cni.errors import AddressError, ConfigError, NetmaskError, NicUnavailable, shown
from rdma_cni.records import field, record
from rdma_cni.vocab.modes import SHARED_MAX_PREFIX  # shared modes refuse NIC prefixes this long

_MAX_IP = (1 << 32) - 1


@record
class RangeLimits:
    """What one ``ipam.ranges`` entry (``models.netconf.IpamRangeConf``) puts on a pool,
    parsed: the first and last address and the excluded networks."""

    range_start: IPv4Address | None = None
    range_end: IPv4Address | None = None
    exclude: tuple[IPv4Network, ...] = ()


@record
class Pool:
    """The addresses ``first``..``last`` of ``network`` minus ``excluded``.

    ``excluded`` only holds addresses inside ``first``..``last``; the pool is empty
    when ``first > last`` (then the bounds need not lie in ``network``).
    """

    name: str
    network: IPv4Network
    first: IPv4Address
    last: IPv4Address
    excluded: frozenset[IPv4Address]
    gateway: IPv4Address | None
    nic: str = field(default="", compare=False)

    def in_range(self, ip: IPv4Address) -> bool:
        return self.first <= ip <= self.last

    def candidates(self) -> Iterator[IPv4Address]:
        for n in range(int(self.first), int(self.last) + 1):
            ip = IPv4Address(n)
            if ip not in self.excluded:
                yield ip

    def size(self) -> int:
        span = int(self.last) - int(self.first) + 1
        return max(span, 0) - len(self.excluded)


def _lowest(nic: str, nic_addrs: Sequence[IPv4Interface]) -> IPv4Interface:
    v4 = [a for a in nic_addrs if a.version == 4]
    if not v4:
        raise NicUnavailable(
            f"failed to build the address pool of RDMA NIC {nic}: it has no IPv4 address"
        )
    return min(v4, key=lambda a: a.ip)


def _check_mask(nic: str, addr: IPv4Interface, shared: bool) -> None:
    if shared and addr.network.prefixlen >= SHARED_MAX_PREFIX:
        raise NetmaskError(
            f"RDMA NIC {nic} has netmask /{addr.network.prefixlen} ({addr.with_prefixlen}): "
            "the RDMA NIC mask needs to be shorter than /30, e.g. /29 or /28"
        )


def _limits_of(net: IPv4Network, ranges: Mapping[str, RangeLimits]
               ) -> tuple[RangeLimits | None, bool]:
    """The ``ipam.ranges`` entry of ``net``, and whether it names ``net`` itself. An entry
    of another subnet that overlaps it (the NIC's netmask changed since the entry was
    written) still holds, as the addresses it names: its range and exclusions are kept
    where they fall inside ``net`` (they were dropped, and a node's slice of a shared
    subnet with them); two such entries are refused, as neither is clearly the NIC's."""
    near: list[tuple[IPv4Network, RangeLimits]] = []
    for cidr, conf in ranges.items():
        try:
            key = IPv4Network(cidr, strict=False)
        except ValueError as e:
            raise ConfigError(f"invalid ipam.ranges key {shown(cidr)}: {e}") from e
        if key == net:
            return conf, True
        if key.overlaps(net):
            near.append((key, conf))
    if len(near) > 1:
        raise ConfigError(f"invalid ipam.ranges: {', '.join(str(k) for k, _ in near)} each "
                          f"overlap the subnet {net} of an RDMA NIC: name it once")
    return (near[0][1], False) if near else (None, True)


def _narrow(
    nic: str, net: IPv4Network, first: int, last: int, conf: RangeLimits, exact: bool = True
) -> tuple[int, int]:
    """``first`` and ``last`` within the entry's range (``exact``: an entry of ``net``
    itself, checked to lie inside it; else one of an overlapping subnet, clipped to it)."""
    where = f"ipam.ranges[{net}] for RDMA NIC {nic}"
    for label, ip in (("rangeStart", conf.range_start), ("rangeEnd", conf.range_end)):
        if exact and ip is not None and ip not in net:
            raise ConfigError(f"invalid {where}: {label} {ip} is outside the subnet {net}")
    if conf.range_start and conf.range_end and conf.range_start > conf.range_end:
        raise ConfigError(
            f"invalid {where}: rangeStart {conf.range_start} is after rangeEnd {conf.range_end}"
        )
    for ex in conf.exclude:
        if exact and not ex.overlaps(net):
            raise ConfigError(f"invalid {where}: exclude {ex} is outside the subnet {net}")
    if conf.range_start is not None:
        first = max(first, int(conf.range_start))
    if conf.range_end is not None:
        last = min(last, int(conf.range_end))
    return first, last


def _excluded(
    first: int, last: int, singles: Iterable[IPv4Address], nets: Iterable[IPv4Network]
) -> frozenset[IPv4Address]:
    out = {ip for ip in singles if first <= int(ip) <= last}
    for ex in nets:
        lo, hi = max(first, int(ex.network_address)), min(last, int(ex.broadcast_address))
        out.update(IPv4Address(n) for n in range(lo, hi + 1))
    return frozenset(out)


def build_pool(
    nic: str,
    nic_addrs: Sequence[IPv4Interface],
    gateway: IPv4Address | None,
    host_addrs: Iterable[IPv4Address],
    ranges: Mapping[str, RangeLimits],
    shared: bool,
    routers: Iterable[IPv4Address] = (),
) -> Pool:
    """The pool of ``nic``; ``host_addrs`` are all IPv4 addresses on any host interface,
    ``routers`` every gateway reached through the NIC (kept out, as the gateway is)."""
    addr = _lowest(nic, nic_addrs)
    _check_mask(nic, addr, shared)
    net = addr.network
    first, last = int(addr.ip) + 1, int(net.broadcast_address) - 1
    entry, exact = _limits_of(net, ranges)
    conf = entry or RangeLimits()
    first, last = _narrow(nic, net, first, last, conf, exact)
    # an empty pool (/31, /32) has first > last; keep both valid IPv4 addresses
    first, last = min(first, _MAX_IP), max(last, 0)
    singles = [*host_addrs, *(a.ip for a in nic_addrs if a.version == 4), *routers]
    if gateway is not None:
        singles.append(gateway)
    return Pool(
        name=str(net),
        network=net,
        first=IPv4Address(first),
        last=IPv4Address(last),
        excluded=_excluded(first, last, singles, conf.exclude),
        gateway=gateway,
        nic=nic,
    )


def _check_requested(pool: Pool, taken: Collection[IPv4Address], ip: IPv4Address) -> None:
    what = f"requested address {ip} for RDMA NIC {pool.nic or pool.name}"
    if ip not in pool.network:
        raise AddressError(f"{what} is outside its subnet {pool.name}")
    if not pool.in_range(ip):
        raise AddressError(f"{what} is outside the range {pool.first}-{pool.last}")
    if ip in pool.excluded:
        cause = "the gateway" if ip == pool.gateway else "a host address or an ipam exclusion"
        raise AddressError(f"{what} is not assignable: it is {cause}")
    if ip in taken:
        raise AddressError(f"{what} is already reserved")


def choose(
    pool: Pool, taken: Collection[IPv4Address], requested: IPv4Address | None = None
) -> IPv4Address:
    """The requested address if it is assignable and free, else the first free one."""
    if requested is not None:
        _check_requested(pool, taken, requested)
        return requested
    used = taken if isinstance(taken, set | frozenset | dict) else set(taken)
    for ip in pool.candidates():
        if ip not in used:
            return ip
    raise AddressError(
        f"no free address in {pool.name} for {pool.nic or 'the RDMA NIC'}: all {pool.size()} "
        f"addresses of {pool.first}-{pool.last} are reserved"
    )
