"""The durable state store: attachment state, address reservations, NIC claims.
The records' files are written by :mod:`rdma_cni.store.atomic` and read by
:mod:`rdma_cni.store.files`, reservations kept by :mod:`rdma_cni.store.claims` and NIC
claims by :mod:`rdma_cni.store.nics` (the :class:`Store` inherits both), and a state
record is an :class:`rdma_cni.store.state.AttachmentState`.

Layout under ``data_dir`` (directories created 0700 on first write)::

    lock                      the flock file (see :meth:`Store.lock`): the boot stamp
                              (:mod:`.boot`); the reservations' journal (:mod:`.journal`)
                              in its extended attribute ``user.rdma-cni.journal``
    state/<key.digest()>.json {"schema": 1, "key": {...}, ...payload}
    addrs/<ip>                {"key": {...}, "ifname": "eth1", "pool": "<subnet>"} (O_EXCL)
    ips/<subnet with _>/<ip>  the same, as releases up to 0.1.0 wrote it (read, never written)
    nics/<netdev>             {"key": {...}, "ifname": "eth1"}   (O_EXCL)
    corrupt/                  unreadable state records moved aside

Runtime values (network name, container ID, CNI_IFNAME) never become path
components: state files are named by the key's digest, pool directories are
re-rendered from a parsed IPv4 network, netdev names are validated.

Crash safety: every file is written to a temp file (``.tmp-<pidns>.<pid>-...``) in the
same directory, then put in place (state: renamed, or swapped with the record it
replaces and that one removed, :func:`~rdma_cni.store.atomic.swap_in_place`) or
hard-linked to its final name (reservations and claims: ``link`` fails if the name
exists, which gives O_EXCL semantics with the full content in place). Nothing is
fsynced: a crash of a process cannot lose what is in the page cache, and what a crash of
the node can do to records of pods that died with it is handled by
:mod:`rdma_cni.store.boot`.
Readers skip temp files and delete orphans: no writer holds the temp file's
flock (the writer holds it while writing) and it is older than a minute.

Reservations are keyed by the address alone, whatever subnet they were made
under: widening a NIC's netmask, or two NICs with overlapping subnets, can never
hand out an address a pod still holds. Reservations of the old per-subnet layout
are honoured (checked by address under the lock before any new one is created)
and released in place; nothing is migrated, so no crash can lose one.

Size: a state record is bounded (:data:`MAX_RECORD`, checked before it is
written); records up to :data:`MAX_READ` still load (releases up to 0.1.0 wrote
them without a bound).

Corrupt records (not a JSON object with a valid key, or interfaces teardown cannot
use: :class:`rdma_cni.store.state.StateError`): a state record is moved to
``corrupt/<digest>.json.<time>`` and reads as absent, so ADD can rewrite it. Its
key's reservations and claims are kept and :meth:`Store.owners` leaves the key
out (nothing frees them on its own while its interfaces may exist); DEL of that
key tears down by the alias mark (:mod:`rdma_cni.datapath.salvage`) and then purges it.
A record that cannot be moved (``corrupt`` is no directory) stays, read the same way
(:mod:`.quarantine`).

A corrupt reservation or claim is kept and treated as held by
:data:`UNKNOWN_OWNER`: its address or NIC is never handed out again
automatically (a double assignment is worse than a leak); :meth:`Store.owners`
never lists it, so GC leaves it alone; ``doctor`` lists it through
:meth:`Store.corrupt_records`.

Concurrency: every method is atomic on its own; the releasing methods take the
store lock themselves. Callers hold :meth:`Store.lock` around multi-step sequences (it
is re-entrant per thread). A state record has a lock of its own (:meth:`record_lock`,
taken after the store lock, never before it): :meth:`purge` holds it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from rdma_cni import defaults
from rdma_cni.errors import IOFailure
from rdma_cni.log import LazyLogger
from rdma_cni.store.atomic import swap_in_place, unlink_quietly, write_temp
from rdma_cni.store.boot import check_boot
from rdma_cni.store.claims import UNKNOWN_OWNER, Owner, key_of, pool_dirname
from rdma_cni.store.files import (
    MAX_READ,
    Corrupt,
    Identity,
    encode,
    ensure_dir,
    identity_of,
    read_record,
    remove,
    scan,
)
from rdma_cni.store.lock import FileLock, open_lock
from rdma_cni.store.nics import NicClaims
from rdma_cni.store.orphans import remove_orphans_of
from rdma_cni.store.quarantine import move_aside
from rdma_cni.store.recordlock import record_locked
from rdma_cni.store.state import SCHEMA, AttachmentState, StateError
from rdma_cni.vocab.attachment import AttachmentKey

__all__ = ["DEFAULT_DATA_DIR", "MAX_READ", "MAX_RECORD", "SCHEMA", "UNKNOWN_OWNER", "Owner",
           "Store", "pool_dirname"]

log = LazyLogger(__name__)

DEFAULT_DATA_DIR = defaults.DATA_DIR
#: the largest state record written (bytes)
MAX_RECORD = 1 << 20
_held = threading.local()


class Store(NicClaims):
    """The on-disk store under ``data_dir``; see the module docstring."""

    def __init__(self, data_dir: str = DEFAULT_DATA_DIR, lock_timeout: float = 10.0) -> None:
        self.root = os.path.abspath(data_dir)
        self.lock_timeout = lock_timeout
        self.lock_path = os.path.join(self.root, "lock")
        self.state_dir = os.path.join(self.root, "state")
        self.ips_dir = os.path.join(self.root, "ips")  # the layout up to 0.1.0
        self.addrs_dir = os.path.join(self.root, "addrs")
        self.nics_dir = os.path.join(self.root, "nics")
        self.corrupt_dir = os.path.join(self.root, "corrupt")
        #: directories this instance (one request) made sure of: the store never removes one
        self._made: set[str] = set()
        self._prepared: dict[tuple[str, bytes], str] = {}
        self._unmoved: set[str] = set()  # corrupt state records that stay in place

    # -- locking ---------------------------------------------------------
    @contextmanager
    def lock(self, timeout: float | None = None) -> Iterator[None]:
        """Hold the store's flock; re-entrant within a thread (inner calls are no-ops)."""
        depth: dict[str, int] = _held.__dict__.setdefault("depth", {})
        if depth.get(self.lock_path, 0) > 0:
            depth[self.lock_path] += 1
            try:
                yield
            finally:
                depth[self.lock_path] -= 1
            return
        self._ensure(None)
        fds: dict[str, int] = _held.__dict__.setdefault("fds", {})
        with FileLock(self.lock_path, self.lock_timeout if timeout is None else timeout) as fl:
            depth[self.lock_path], fds[self.lock_path] = 1, fl.fd
            try:
                check_boot(self.root, fl.fd, self._quarantine)
                yield
            finally:
                depth[self.lock_path] = 0
                del fds[self.lock_path]

    def record_lock(self, key: AttachmentKey) -> AbstractContextManager[Identity | None]:
        """``key``'s state record locked, its identity (:mod:`.recordlock`; None: none)."""
        return record_locked(self._state_path(key), self.lock_timeout)

    def _journal_fd(self) -> int:
        fd: int | None = _held.__dict__.get("fds", {}).get(self.lock_path)
        if fd is None:
            raise IOFailure(f"failed to use {self.lock_path}: the store's lock is not held")
        return fd

    def usable(self) -> None:
        """Raise :class:`IOFailure` unless the data dir can be created and written."""
        self._ensure(None)
        tmp = write_temp(self.root, "probe", b"{}", sync=False)
        unlink_quietly(tmp)
        os.close(open_lock(self.lock_path))  # as the lock opens it: a FIFO there is refused

    def _ensure(self, sub: str | None) -> None:
        if self.root not in self._made:
            ensure_dir(self.root, parents=True)
            self._made.add(self.root)
        if sub is not None and sub not in self._made:
            ensure_dir(sub)
            self._made.add(sub)

    # -- attachment state -----------------------------------------------
    def _state_path(self, key: AttachmentKey) -> str:
        return os.path.join(self.state_dir, key.digest() + ".json")

    def get_state(self, key: AttachmentKey) -> AttachmentState | None:
        path = self._state_path(key)
        state = self._read_state(path)
        if state is not None and state.key != key:
            self._quarantine(path, "record belongs to another key")
            return None
        return state

    def put_state(self, key: AttachmentKey, state: AttachmentState) -> Identity | None:
        """Save ``state``; the identity of the record now in place (:meth:`state_identity`)."""
        self.commit_state(key, self.prepare_state(key, state))
        return self.state_identity(key)

    def state_identity(self, key: AttachmentKey) -> Identity | None:
        """The identity of ``key``'s record (one ``lstat``): while it equals what
        :meth:`put_state` gave, the record is the one it put there (a record is only ever
        replaced whole, by a rename or a swap); None when unknown."""
        return identity_of(self._state_path(key))

    def prepare_state(self, key: AttachmentKey, state: AttachmentState) -> str:
        """The record of ``state`` written beside its place (no lock needed): the first half
        of :meth:`put_state`; then :meth:`commit_state` or :meth:`discard`."""
        rec = {**state.to_json(), "schema": SCHEMA, "key": key.as_dict()}
        data = encode(rec)
        if len(data) > MAX_RECORD:
            raise IOFailure(
                f"failed to save the state of {key.container_id[:12]}: the record would be "
                f"{len(data)} bytes, over the {MAX_RECORD >> 10} KiB bound")
        self._ensure(self.state_dir)
        return write_temp(self.state_dir, key.digest() + ".json", data, sync=False)

    def commit_state(self, key: AttachmentKey, prepared: str) -> None:
        swap_in_place(self.state_dir, key.digest() + ".json", prepared)

    @staticmethod
    def discard(prepared: str) -> None:
        unlink_quietly(prepared)

    def delete_state(self, key: AttachmentKey) -> None:
        remove(self._state_path(key))  # no fsync: rdma_cni.store.boot

    def list_states(self) -> list[AttachmentState]:
        out = []
        for name in scan(self.state_dir):
            path = os.path.join(self.state_dir, name)
            state = self._read_state(path)
            if state is None:
                continue
            assert state.key is not None
            if name != state.key.digest() + ".json":
                self._quarantine(path, "file name does not match its key")
                continue
            out.append(state)
        return out

    def _read_state(self, path: str) -> AttachmentState | None:
        """The record at ``path`` (with its key); one that is unreadable, or whose
        interfaces teardown could not use, is moved aside and reads as absent."""
        try:
            rec = read_record(path)
            if rec is None:
                return None
            key = key_of(rec)
            return AttachmentState.from_json(rec).with_(key=key)
        except (Corrupt, StateError) as e:
            self._quarantine(path, str(e))
            return None

    def quarantine_state(self, key: AttachmentKey, why: str) -> None:
        """Move ``key``'s state record aside as unreadable (see :meth:`owners`)."""
        self._quarantine(self._state_path(key), why)

    def quarantined(self) -> set[str]:
        """Digests of keys whose state record was moved aside as unreadable, or found so
        by this instance and left in place (:mod:`.quarantine`)."""
        aside = {n.split(".", 1)[0] for n in scan(self.corrupt_dir) if ".json." in n}
        return aside | {os.path.basename(p).split(".", 1)[0] for p in self._unmoved}

    def forget_quarantined(self, key: AttachmentKey) -> None:
        """Drop the moved-aside records of ``key`` (its DEL has torn it down)."""
        prefix = key.digest() + ".json."
        self._unmoved.discard(self._state_path(key))
        for name in scan(self.corrupt_dir):
            if name.startswith(prefix):
                remove(os.path.join(self.corrupt_dir, name))

    def _quarantine(self, path: str, why: str) -> None:
        if not move_aside(path, self.corrupt_dir, why):
            self._unmoved.add(path)

    # -- whole keys --------------------------------------------------------
    def owners(self) -> set[AttachmentKey]:
        """Keys with state, reservations or claims; a key whose state record was found
        unreadable is left out unless it has a readable one again (only its own DEL may
        free what it holds: its interfaces may still exist)."""
        with_state = {st.key for st in self.list_states() if st.key is not None}
        held = {owner[0] for _, _, owner, _ in self._ip_entries()}
        held.update(owner[0] for owner in self.nic_claims().values())
        held.discard(UNKNOWN_OWNER)
        unreadable = self.quarantined()
        return with_state | {k for k in held if k.digest() not in unreadable}

    def purge(self, key: AttachmentKey) -> None:
        """Everything of ``key``'s, with the temp files its dead writers left (an ADD
        killed while it wrote its pending or ready state); never during an ADD's step."""
        with self.lock(), self.record_lock(key):
            self.release_ips(key)
            self.release_nics(key)
            self.delete_state(key)
            remove_orphans_of(self.state_dir, key.digest() + ".json")

    def corrupt_records(self) -> list[str]:
        """Paths of unreadable reservations/claims, and of state records moved aside."""
        paths = [os.path.join(self.corrupt_dir, n) for n in scan(self.corrupt_dir)]
        paths += sorted(self._unmoved)
        for _, _, owner, path in self._ip_entries():
            if owner[0] == UNKNOWN_OWNER:
                paths.append(path)
        for netdev, owner in self.nic_claims().items():
            if owner[0] == UNKNOWN_OWNER:
                paths.append(os.path.join(self.nics_dir, netdev))
        return paths
