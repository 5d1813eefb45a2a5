"""Reserve an address of a pool in the store: the one non-pure IPAM helper."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Protocol

from rdma_cni.errors import AddressError
from rdma_cni.ipam.allocator import Pool, choose
from rdma_cni.vocab.attachment import AttachmentKey


class IpStore(Protocol):
    """What IPAM needs of a store (:class:`rdma_cni.store.core.Store` implements it)."""

    def ip_owners(self, pool: str, mine: AttachmentKey | None = None, fresh: bool = False
                  ) -> dict[IPv4Address, tuple[AttachmentKey, str]]: ...

    def reserve_ip(self, pool: str, ip: IPv4Address, key: AttachmentKey, ifname: str) -> bool: ...


def held_by(
    owners: dict[IPv4Address, tuple[AttachmentKey, str]], key: AttachmentKey, ifname: str
) -> IPv4Address | None:
    """The lowest address of the pool already held by (key, ifname), if any."""
    mine = sorted(ip for ip, owner in owners.items() if owner == (key, ifname))
    return mine[0] if mine else None


def allocate(
    store: IpStore,
    pool: Pool,
    key: AttachmentKey,
    ifname: str,
    requested: IPv4Address | None = None,
) -> IPv4Address:
    """Reserve an address of ``pool`` for (key, ifname); idempotent. Caller holds the lock.

    A repeated call returns the address already held. A reservation lost to a
    concurrent writer moves on to the next free address (or fails for a
    requested one). The store's view of its reservations may be kept from earlier
    calls: an address refused on it (the pool full, the requested one taken) is looked
    for again on a listing before the refusal stands.
    """
    try:
        return _allocate(store, pool, key, ifname, requested, fresh=False)
    except AddressError:
        return _allocate(store, pool, key, ifname, requested, fresh=True)


def _allocate(store: IpStore, pool: Pool, key: AttachmentKey, ifname: str,
              requested: IPv4Address | None, fresh: bool) -> IPv4Address:
    owners = store.ip_owners(pool.name, mine=key, fresh=fresh)  # ``key``'s read from files
    current = held_by(owners, key, ifname)
    if current is not None:
        if requested is not None and requested != current:
            raise AddressError(
                f"failed to reserve requested address {requested} for {ifname}: "
                f"it already holds {current} in {pool.name}"
            )
        return current
    taken = set(owners)
    while True:  # each lost race grows ``taken``: choose() raises once all are gone
        ip = choose(pool, taken, requested)
        if store.reserve_ip(pool.name, ip, key, ifname):
            return ip
        taken.add(ip)
