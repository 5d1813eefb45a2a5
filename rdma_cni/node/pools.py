"""The node's address pools as the plugin's IPAM sees them, for everything that
must agree with it: ADD, the device plugin's slot capacity, the exporter.

A pool is built from the NIC's own addresses and gateway, every IPv4 address of
the host, and ``ipam.ranges`` (:func:`rdma_cni.ipam.allocator.build_pool`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from ipaddress import IPv4Address, IPv4Network
from typing import Any

from rdma_cni.errors import CniError
from rdma_cni.ipam.allocator import Pool, RangeLimits, build_pool
from rdma_cni.records import field, record
from rdma_cni.vocab.modes import Capacity, Mode
from rdma_cni.vocab.nic import HostNic

log = logging.getLogger("rdma_cni")


@record
class NodeSettings:
    """What the device plugin and the exporter need of the node's config (a mode
    given as its string becomes the :class:`Mode`; an unknown one is a ConfigError)."""

    mode: Mode
    resource: str
    pinned: Sequence[str] | None = None
    slots_per_nic: int = 16
    host_slots: int = 16
    ranges: Mapping[str, RangeLimits] = field(default_factory=dict)
    node_ips: Sequence[str] = ()  # nodeIPs: the NIC holding one is the node's own

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode.of(self.mode))

    @property
    def capacity(self) -> Capacity:
        return self.mode.traits.capacity

    @classmethod
    def from_netconf(cls, conf: Any) -> NodeSettings:
        return cls(conf.mode, conf.resource, conf.devices, conf.slotsPerNic, conf.hostSlots,
                   ranges_of(conf), tuple(conf.nodeIPs))


def nic_slots(settings: NodeSettings, pool_size: int) -> int:
    """shared-multi: device-plugin slots one NIC offers (never more than its addresses)."""
    return min(settings.slots_per_nic, max(pool_size, 0))


def host_slots(settings: NodeSettings, pool_sizes: Sequence[int]) -> int:
    """shared-host: pods the node takes (every pod needs an address on every NIC)."""
    return min(settings.host_slots, *pool_sizes) if pool_sizes else 0


def slot_capacity(settings: NodeSettings, pool_sizes: Sequence[int]) -> int:
    """The node's capacity of ``settings.resource``, one pool size per NIC."""
    if settings.capacity is Capacity.PER_NIC:
        return len(pool_sizes)
    if settings.capacity is Capacity.SLOTS_PER_NIC:
        return sum(nic_slots(settings, s) for s in pool_sizes)
    return host_slots(settings, pool_sizes)


#: NIC names -> (the NICs present on the host, every IPv4 address of the host)
HostReader = Callable[[Sequence[str]], tuple[dict[str, HostNic], set[IPv4Address]]]


def ranges_of(conf: Any) -> dict[str, RangeLimits]:
    """``ipam.ranges`` of a NetConf (``IpamRangeConf`` entries) as the allocator's RangeLimits."""
    return {
        subnet: RangeLimits(r.rangeStart, r.rangeEnd,
                          tuple(IPv4Network(x, strict=False) for x in r.exclude))
        for subnet, r in conf.ipam.ranges.items()
    }


def host_nics(names: Sequence[str]) -> tuple[dict[str, HostNic], set[IPv4Address]]:
    """Addresses and gateway of the named NICs present here, and all host IPv4 addresses.
    Each is looked up by its name: one not found (renamed or removed, as a poll reads
    it) is not present."""
    from rdma_cni.adapters.netlink import Netlink
    from rdma_cni.node.hostinfo import nic_facts

    nl = Netlink.here()
    try:
        facts, host_addrs = nic_facts(nl, names, {}, present_only=True)
        return {n: HostNic(f.addresses, f.gateway, f.gateways)
                for n, f in facts.items()}, host_addrs
    finally:
        nl.close()


def build_pools(facts: Mapping[str, HostNic], host_addrs: set[IPv4Address],
                ranges: Mapping[str, RangeLimits]) -> dict[str, Pool]:
    """The shared-mode pool of every NIC that has one (a NIC refused by IPAM has none)."""
    pools = {}
    for nic, f in facts.items():
        try:
            pools[nic] = build_pool(nic, f.addresses, f.gateway, host_addrs, ranges, True,
                                     f.gateways)
        except CniError as exc:
            log.info("no address pool for RDMA NIC %s: %s", nic, exc.msg)
    return pools


def shares(pools: Mapping[str, Pool]) -> dict[str, int]:
    """nic -> its share of its pool's addresses. NICs on one subnet draw from one pool
    (a reservation is exclusive by address): its size is split evenly between them, the
    remainder to the first by name, so that the slots the node offers never count one
    address twice (shared-host: every pod takes one on each of them)."""
    groups: dict[IPv4Network, list[str]] = {}
    for nic, pool in pools.items():
        groups.setdefault(pool.network, []).append(nic)
    out: dict[str, int] = {}
    for nics in groups.values():
        q, r = divmod(max(min(pools[n].size() for n in nics), 0), len(nics))
        out |= {n: q + (i < r) for i, n in enumerate(sorted(nics))}
    return out


class PoolSizes:
    """``nic -> its share of assignable addresses`` (0 without a pool: :func:`shares`),
    read at most every ``ttl`` s."""

    def __init__(self, ranges: Mapping[str, RangeLimits], reader: HostReader = host_nics,
                 ttl: float = 30.0) -> None:
        self.ranges, self.reader, self.ttl = ranges, reader, ttl
        self._at = -1e18
        self._sizes: dict[str, int] = {}
        self._names: tuple[str, ...] = ()

    def know(self, names: Sequence[str]) -> None:
        """The NICs asked about next: read together, so that NICs sharing a pool are
        known to share it from the first answer."""
        if not set(names) <= set(self._names):
            self._names = tuple(sorted({*self._names, *names}))
            self._at = -1e18

    def __call__(self, nic: Any) -> int:
        name = getattr(nic, "netdev", nic)
        now = time.monotonic()
        if now - self._at > self.ttl or name not in self._names:
            self._names = tuple(sorted({*self._names, name}))
            try:
                facts, host_addrs = self.reader(self._names)
            except CniError as exc:  # not read this time: the last sizes stand
                log.warning("NIC pools not read again: %s", exc.msg)
                return max(self._sizes.get(name, 0), 0)
            self._sizes = shares(build_pools(facts, host_addrs, self.ranges))
            self._at = now
        return max(self._sizes.get(name, 0), 0)
