"""Address reservations: "owned records", one file per address (``addrs/<ip>``, and
``ips/<subnet>/<ip>`` of releases up to 0.1.0, read and released, never written), each
created exclusively and holding its owner (attachment key and our interface name). NIC
claims are owned records too (:mod:`rdma_cni.store.nics`). See
:mod:`rdma_cni.store.core` for the layout, corrupt records and concurrency."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager
from ipaddress import AddressValueError, IPv4Address, IPv4Network, NetmaskValueError
from typing import Any

from rdma_cni.errors import AddressError, ConfigError, IOFailure, shown
from rdma_cni.log import LazyLogger
from rdma_cni.store.addrnames import addresses
from rdma_cni.store.addrview import Owner, pool_owners
from rdma_cni.store.atomic import (
    create_exclusive,
    link_exclusive,
    unlink_quietly,
    write_temp,
)
from rdma_cni.store.files import (
    Corrupt,
    Identity,
    encode,
    identity_of,
    read_identified,
    remove,
    scan,
)
from rdma_cni.store.journal import note
from rdma_cni.vocab.attachment import AttachmentKey

log = LazyLogger(__name__)

#: Owner reported for a reservation or claim whose record cannot be read.
UNKNOWN_OWNER = AttachmentKey("", "", "")

Entry = tuple[Owner, str]  # owner, and the pool recorded with it ("" when none)

#: This process's reading of each reservation file a scan went through, by directory and
#: file name: the file's identity then and what it held. A record is never rewritten in
#: place (created by linking a complete file, removed whole), so while a file shows the
#: same identity it holds the same owner, and a scan reads only the files it has not
#: seen; an ADD's scan looks only at its pool's addresses (``ip_owners``: a node with
#: hundreds of reservations over several NICs). A decision about the caller's own
#: records (its address is already held, these are its to free) reads the file again
#: all the same.
_seen: dict[str, dict[str, tuple[Identity, Entry]]] = {}


def pool_dirname(pool: str) -> str:
    """``192.0.2.0/28`` -> ``192.0.2.0_28``; anything but a real IPv4 network is refused."""
    try:
        net = IPv4Network(pool, strict=True)
    except (AddressValueError, NetmaskValueError, ValueError) as e:
        raise ConfigError(f"invalid address pool name {shown(pool)}: {e}") from e
    return str(net).replace("/", "_")


def _pool_from_dirname(name: str) -> IPv4Network | None:
    try:
        net = IPv4Network(name.replace("_", "/"), strict=True)
    except ValueError:
        return None
    return net if str(net).replace("/", "_") == name else None


def key_of(rec: dict[str, Any]) -> AttachmentKey:
    k = rec.get("key")
    fields = ("network", "containerID", "ifname")
    if not isinstance(k, dict) or not all(isinstance(k.get(f), str) for f in fields) or \
            not isinstance(k.get("instance", ""), str):
        raise Corrupt("missing or invalid 'key'")
    return AttachmentKey.from_dict(k)


def _owner_of(rec: dict[str, Any]) -> Owner:
    ifname = rec.get("ifname")
    if not isinstance(ifname, str):
        raise Corrupt("missing or invalid 'ifname'")
    return key_of(rec), ifname


class Claims:
    """The owned records of :class:`rdma_cni.store.core.Store` and its address
    reservations (its NIC claims: :class:`rdma_cni.store.nics.NicClaims`)."""

    root: str
    ips_dir: str
    addrs_dir: str

    #: (directory, record) -> its temp file written ahead of the lock (:meth:`prepare_ip`)
    _prepared: dict[tuple[str, bytes], str]

    def lock(self, timeout: float | None = None) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _ensure(self, sub: str | None) -> None:
        raise NotImplementedError

    def _journal_fd(self) -> int:
        """The held store lock's file descriptor (:mod:`rdma_cni.store.journal`)."""
        raise NotImplementedError

    # -- owned records (IP reservations and NIC claims) ------------------
    def _owner_at(self, path: str) -> Owner | None:
        entry = self._entry_at(path)
        return None if entry is None else entry[0]

    @classmethod
    def _entry_at(cls, path: str) -> Entry | None:
        """(owner, recorded pool or "") of the record at ``path``; None if missing."""
        return cls._read_entry(path)[0]

    @staticmethod
    def _read_entry(path: str) -> tuple[Entry | None, Identity | None]:
        """:meth:`_entry_at`, and the identity of the file read (None when it must not be
        remembered: unreadable, or see :func:`rdma_cni.store.files.read_identified`)."""
        try:
            rec, ident = read_identified(path)
            if rec is None:
                return None, None
            pool = rec.get("pool")
            return (_owner_of(rec), pool if isinstance(pool, str) else ""), ident
        except Corrupt as e:
            log.warning("unreadable record %s treated as held by an unknown owner: %s", path, e)
            return ((UNKNOWN_OWNER, ""), ""), None

    def _claim(self, directory: str, name: str, key: AttachmentKey, ifname: str,
               extra: dict[str, Any] | None = None) -> bool:
        self._ensure(directory)
        data = _claim_record(key, ifname, extra)
        prepared = self._prepared.get((directory, data))
        if directory == self.addrs_dir:
            note(self._journal_fd(), name)
        for _ in range(8):
            if link_exclusive(directory, name, prepared) if prepared else \
                    create_exclusive(directory, name, data, sync=False):
                return True
            owner = self._owner_at(os.path.join(directory, name))
            if owner is not None:
                return owner == (key, ifname)
        raise IOFailure(f"failed to create {os.path.join(directory, name)}: keeps changing")

    # -- records written ahead of the lock --------------------------------
    def prepare_ip(self, pool: str, key: AttachmentKey, ifname: str) -> None:
        """Write the record a reservation in ``pool`` for (key, ifname) links
        into place, before the caller takes the lock: under it, :meth:`reserve_ip` only
        links that file to the address's name. :meth:`drop_prepared` removes it."""
        self._ensure(self.addrs_dir)
        data = _claim_record(key, ifname, {"pool": pool})
        if (self.addrs_dir, data) not in self._prepared:
            self._prepared[(self.addrs_dir, data)] = write_temp(self.addrs_dir, "claim", data,
                                                                sync=False)

    def drop_prepared(self) -> None:
        for tmp in self._prepared.values():
            unlink_quietly(tmp)
        self._prepared.clear()

    # -- IP reservations (by address; see the module docstring) ----------
    def reserve_ip(self, pool: str, ip: IPv4Address, key: AttachmentKey, ifname: str) -> bool:
        """Reserve ``ip`` (of ``pool``); True if now (or already) held by (key, ifname).

        Exclusive by address, whatever subnet an earlier reservation was made under.
        """
        pool_dirname(pool)
        if ip not in IPv4Network(pool):
            raise AddressError(f"failed to reserve {ip}: outside the pool {pool}")
        with self.lock():
            legacy = self._legacy_owner(ip)
            if legacy is not None:
                return legacy == (key, ifname)
            return self._claim(self.addrs_dir, str(ip), key, ifname, {"pool": pool})

    def _legacy_owner(self, ip: IPv4Address) -> Owner | None:
        for _, pool_dir in self._legacy_pools():
            owner = self._owner_at(os.path.join(pool_dir, str(ip)))
            if owner is not None:
                return owner
        return None

    def _legacy_pools(self) -> Iterator[tuple[IPv4Network, str]]:
        """(pool, its directory) of the layout up to 0.1.0 (``ips/<subnet>``); anything
        else there is ignored (a warning): no release wrote it, and no reservation is in it."""
        for sub in scan(self.ips_dir):
            path = os.path.join(self.ips_dir, sub)
            net = _pool_from_dirname(sub)
            if net is None or not os.path.isdir(path):
                log.warning("ignoring stray entry %s", path)
                continue
            yield net, path

    def ip_owners(self, pool: str, mine: AttachmentKey | None = None, fresh: bool = False
                  ) -> dict[IPv4Address, Owner]:
        """Every reserved address inside ``pool``'s network, whatever pool it was made in;
        those held by ``mine`` read from their files (see ``_dir_owners``). Under the
        lock, ``addrs/`` is read as the journal says it changed since this process last
        looked (:mod:`rdma_cni.store.addrview`), or listed when ``fresh``."""
        pool_dirname(pool)
        net = IPv4Network(pool)
        d = self.addrs_dir

        def listing() -> Iterator[tuple[str, IPv4Address, Owner]]:
            for _, ip, owner, path in self._dir_owners(d, mine, net):
                yield path[len(d) + 1:], ip, owner
        with self.lock():
            out = pool_owners(self._journal_fd(), d, net, mine, listing, self._owner_at, fresh)
            out.update((ip, owner) for _, ip, owner, _ in self._legacy_entries(mine, net))
        return out

    def _dir_owners(self, directory: str, mine: AttachmentKey | None = None,
                    within: IPv4Network | None = None
                    ) -> Iterator[tuple[str, IPv4Address, Owner, str]]:
        """(pool, address, owner, file) of the reservations in ``directory`` (inside
        ``within``: the others are not looked at, their earlier reading kept). Files read
        by an earlier scan and unchanged since are not read again, except those that the
        earlier reading gave to ``mine``: the caller acts on its own (see ``_seen``)."""
        before = _seen.get(directory, {})
        names = scan(directory)
        listed = set(names)
        now = dict(before)
        for gone in before.keys() - listed:
            del now[gone]
        prefix = os.path.join(directory, "")
        for name, ip in addresses(prefix, names, listed, within):
            path = prefix + name
            found = self._scanned(path, before.get(name), mine)
            if found is None:
                now.pop(name, None)
                continue
            entry, ident = found
            if ident is None:
                now.pop(name, None)
            else:
                now[name] = (ident, entry)
            owner, pool = entry
            yield pool, ip, owner, path
        _seen[directory] = now

    @classmethod
    def _scanned(cls, path: str, known: tuple[Identity, Entry] | None,
                 mine: AttachmentKey | None) -> tuple[Entry, Identity | None] | None:
        """The record at ``path`` and the identity to remember it by (None: not to be
        remembered), from ``known`` while the file is unchanged; None when missing."""
        if known is not None and known[1][0][0] != mine and identity_of(path) == known[0]:
            return known[1], known[0]
        entry, ident = cls._read_entry(path)
        return None if entry is None else (entry, ident)

    def _ip_entries(self, mine: AttachmentKey | None = None,
                    within: IPv4Network | None = None
                    ) -> Iterator[tuple[str, IPv4Address, Owner, str]]:
        """(pool, address, owner, file) of every reservation (inside ``within``)."""
        yield from self._dir_owners(self.addrs_dir, mine, within)
        yield from self._legacy_entries(mine, within)

    def _legacy_entries(self, mine: AttachmentKey | None = None,
                        within: IPv4Network | None = None
                        ) -> Iterator[tuple[str, IPv4Address, Owner, str]]:
        """:meth:`_ip_entries` of the layout up to 0.1.0 (``ips/<subnet>/<ip>``)."""
        for net, pool_dir in self._legacy_pools():
            for _, ip, owner, path in self._dir_owners(pool_dir, mine, within):
                yield str(net), ip, owner, path

    def ips_of(self, key: AttachmentKey) -> list[tuple[str, IPv4Address, str]]:
        return [(pool, ip, o[1]) for pool, ip, o, _ in self._ip_entries(key) if o[0] == key]

    def release_ips(self, key: AttachmentKey, ifname: str | None = None) -> int:
        """Free the addresses held by exactly ``key`` (and ``ifname``); the count freed."""
        freed = 0
        if key == UNKNOWN_OWNER:
            return 0
        with self.lock():
            for _, _, owner, path in list(self._ip_entries(key)):
                mine = owner[0] == key and (ifname is None or owner[1] == ifname)
                if mine and os.path.dirname(path) == self.addrs_dir:
                    note(self._journal_fd(), os.path.basename(path))
                if mine and remove(path):  # no fsync: rdma_cni.store.boot
                    freed += 1
        return freed


def _claim_record(key: AttachmentKey, ifname: str, extra: dict[str, Any] | None) -> bytes:
    return encode({**(extra or {}), "key": key.as_dict(), "ifname": ifname})
