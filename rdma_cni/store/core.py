"""The durable state store: attachment state, address reservations, NIC claims.

Layout under ``data_dir`` (directories created 0700 on first write)::

    lock                      the flock file (see :meth:`Store.lock`)
    state/<key.digest()>.json {"schema": 1, "key": {...}, ...payload}
    addrs/<ip>                {"key": {...}, "ifname": "eth1", "pool": "<subnet>"} (O_EXCL)
    ips/<subnet with _>/<ip>  the same, as releases up to 0.1.0 wrote it (read, never written)
    nics/<netdev>             {"key": {...}, "ifname": "eth1"}   (O_EXCL)
    corrupt/                  unreadable state records moved aside

Runtime values (network name, container ID, CNI_IFNAME) never become path
components: state files are named by the key's digest, pool directories are
re-rendered from a parsed IPv4 network, netdev names are validated.

Crash safety: every file is written to a temp file (``.tmp-<pid>-...``) in the
same directory, fsynced, then renamed over (state) or hard-linked to its final
name (reservations and claims: ``link`` fails if the name exists, which gives
O_EXCL semantics with the full content in place). The directory is fsynced.
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

Corrupt records (not a JSON object with a valid key): a state record is moved to
``corrupt/<digest>.json.<time>`` and reads as absent, so ADD can rewrite it. Its
key's reservations and claims are kept and :meth:`Store.owners` leaves the key
out (nothing frees them on its own while its interfaces may exist); DEL of that
key tears down by the alias mark (:mod:`rdma_cni.datapath.salvage`) and then purges it.

A corrupt reservation or claim is kept and treated as held by
:data:`UNKNOWN_OWNER`: its address or NIC is never handed out again
automatically (a double assignment is worse than a leak); :meth:`Store.owners`
never lists it, so GC leaves it alone; ``doctor`` lists it through
:meth:`Store.corrupt_records`.

Concurrency: every method is atomic on its own; the releasing methods take the
store lock themselves. Callers hold :meth:`Store.lock` around multi-step
sequences (it is re-entrant per thread, so they may call the store inside it).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from ipaddress import AddressValueError, IPv4Address, IPv4Network, NetmaskValueError
from typing import Any

from rdma_cni import defaults
from rdma_cni.cni.attachment import AttachmentKey
from rdma_cni.errors import AddressError, ConfigError, IOFailure, shown
from rdma_cni.log import LazyLogger
from rdma_cni.store.lock import FileLock

log = LazyLogger(__name__)

DEFAULT_DATA_DIR = defaults.DATA_DIR
SCHEMA = 1
#: Owner reported for a reservation or claim whose record cannot be read.
UNKNOWN_OWNER = AttachmentKey("", "", "")

Owner = tuple[AttachmentKey, str]

_TMP = ".tmp-"
_ORPHAN_AGE = 60.0
#: the largest state record written (bytes)
MAX_RECORD = 1 << 20
#: the largest record read: releases up to 0.1.0 wrote state without a bound
MAX_READ = 16 << 20
_NETDEV_RE = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_held = threading.local()


class _Corrupt(Exception):
    pass


def valid_netdev(name: str) -> bool:
    return bool(_NETDEV_RE.fullmatch(name)) and name not in (".", "..")


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


def _ioerr(action: str, path: str, e: OSError) -> IOFailure:
    return IOFailure(f"failed to {action} {path}: {e.strerror or e}")


def _encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise _ioerr("sync directory", path, e) from e


def _entry_written(directory: str) -> None:
    """After a record's rename or link into ``directory``: its directory entry is left
    to the kernel's writeback (no fsync of the directory, which was half the fsyncs of
    an ADD). A process crash at any point cannot lose it: it is in the page cache. A
    power loss can, but only together with everything the record describes: pod
    netns, sub-interfaces, rules and routes do not survive a reboot and an exclusive NIC
    boots in the host netns, so a record lost that way names nothing that still exists.
    The record's data is still fsynced before the rename or link (``_write_temp``), so
    a record that does survive is whole. Removals keep their directory fsync: a removal
    lost by a power loss would bring back a stale record."""
    del directory


def _ensure_dir(path: str, parents: bool = False) -> None:
    try:
        if parents:
            os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    except OSError as e:
        raise _ioerr("create directory", path, e) from e
    _fsync_dir(os.path.dirname(path) or ".")


def _write_temp(directory: str, name: str, data: bytes) -> str:
    tmp = os.path.join(directory, f"{_TMP}{_writer_tag()}-{secrets.token_hex(4)}-{name}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(tmp, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held while writing: see _is_orphan
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        _unlink_quietly(tmp)
        raise _ioerr("write", os.path.join(directory, name), e) from e
    return tmp


def _unlink_quietly(path: str) -> None:
    with suppress(OSError):
        os.unlink(path)


def _write_atomic(directory: str, name: str, data: bytes) -> None:
    tmp = _write_temp(directory, name, data)
    final = os.path.join(directory, name)
    try:
        os.replace(tmp, final)
    except OSError as e:
        _unlink_quietly(tmp)
        raise _ioerr("rename into place", final, e) from e
    _entry_written(directory)


def _create_exclusive(directory: str, name: str, data: bytes) -> bool:
    """Create ``directory/name`` with ``data`` unless it exists; False if it does."""
    tmp = _write_temp(directory, name, data)
    final = os.path.join(directory, name)
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    except OSError as e:
        raise _ioerr("create", final, e) from e
    finally:
        _unlink_quietly(tmp)
    _entry_written(directory)
    return True


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise _ioerr("remove", path, e) from e
    return True


def _read_record(path: str) -> dict[str, Any] | None:
    """The JSON object at ``path``; None if missing; :class:`_Corrupt` if unparsable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR):
            raise _Corrupt(f"not a regular file: {e.strerror or e}") from e
        raise _ioerr("read", path, e) from e
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_READ + 1)
    except OSError as e:
        if e.errno == errno.EISDIR:
            raise _Corrupt("is a directory") from e
        raise _ioerr("read", path, e) from e
    if len(raw) > MAX_READ:
        raise _Corrupt(f"record larger than {MAX_READ >> 20} MiB")
    try:
        rec = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise _Corrupt(f"invalid JSON: {e}") from e
    if not isinstance(rec, dict):
        raise _Corrupt("not a JSON object")
    return rec


def _key_of(rec: dict[str, Any]) -> AttachmentKey:
    k = rec.get("key")
    fields = ("network", "containerID", "ifname")
    if not isinstance(k, dict) or not all(isinstance(k.get(f), str) for f in fields) or \
            not isinstance(k.get("instance", ""), str):
        raise _Corrupt("missing or invalid 'key'")
    return AttachmentKey.from_dict(k)


def _owner_of(rec: dict[str, Any]) -> Owner:
    ifname = rec.get("ifname")
    if not isinstance(ifname, str):
        raise _Corrupt("missing or invalid 'ifname'")
    return _key_of(rec), ifname


_pidns: list[str] = []  # a process's own PID namespace never changes: read it once


def _pid_namespace() -> str:
    """This process's PID namespace (the inode of /proc/self/ns/pid), "" if unknown."""
    if not _pidns:
        try:
            _pidns.append(str(os.stat("/proc/self/ns/pid").st_ino))
        except OSError:
            return ""
    return _pidns[0]


def _writer_tag() -> str:
    """``<pid namespace>.<pid>``: which process writes a temp file, and in which PID view."""
    return f"{_pid_namespace()}.{os.getpid()}"


def _dead_writer_in_our_view(name: str) -> bool:
    """True when the temp file's writer shares our PID namespace and no longer runs.

    A PID means something only in the namespace it was taken in: a reader in another
    one (the agent in its container) learns nothing from it and leaves the call to
    the lock and the age (:func:`_is_orphan`)."""
    tag = name[len(_TMP):].split("-", 1)[0]
    ns, _, pid = tag.partition(".")
    if not ns or not pid.isdigit() or ns != _pid_namespace():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # EPERM: alive, not ours
    return False


def _is_orphan(directory: str, name: str) -> bool:
    """A temp file no writer holds (its flock is free) whose writer is gone: dead in our
    own PID namespace, or, seen from another one, older than a minute.

    The flock is held on the file itself, so it holds across PID and mount namespaces
    sharing the data dir; the writer's PID counts only where we share its PID view."""
    path = os.path.join(directory, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        age = time.time() - os.fstat(fd).st_mtime
    except OSError:
        return False  # EWOULDBLOCK: a live writer holds it
    finally:
        os.close(fd)
    return _dead_writer_in_our_view(name) or age > _ORPHAN_AGE


def _scan(directory: str) -> list[str]:
    """Entry names of ``directory`` (missing: none), minus temp files; orphans are removed."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise _ioerr("list", directory, e) from e
    out = []
    for name in sorted(names):
        if not name.startswith(_TMP):
            out.append(name)
        elif _is_orphan(directory, name):
            log.info("removing orphaned temp file %s", os.path.join(directory, name))
            _unlink_quietly(os.path.join(directory, name))
    return out


class Store:
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
        with FileLock(self.lock_path, self.lock_timeout if timeout is None else timeout):
            depth[self.lock_path] = 1
            try:
                yield
            finally:
                depth[self.lock_path] = 0

    def usable(self) -> None:
        """Raise :class:`IOFailure` unless the data dir can be created and written."""
        self._ensure(None)
        tmp = _write_temp(self.root, "probe", b"{}")
        _unlink_quietly(tmp)
        try:
            os.close(os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        except OSError as e:
            raise _ioerr("open lock file", self.lock_path, e) from e

    def _ensure(self, sub: str | None) -> None:
        _ensure_dir(self.root, parents=True)
        if sub is not None:
            _ensure_dir(sub)

    # -- attachment state -----------------------------------------------
    def _state_path(self, key: AttachmentKey) -> str:
        return os.path.join(self.state_dir, key.digest() + ".json")

    def get_state(self, key: AttachmentKey) -> dict[str, Any] | None:
        path = self._state_path(key)
        rec = self._read_state(path)
        if rec is not None and rec["key"] != key.as_dict():
            self._quarantine(path, "record belongs to another key")
            return None
        return rec

    def put_state(self, key: AttachmentKey, payload: dict[str, Any]) -> None:
        rec = {**payload, "schema": SCHEMA, "key": key.as_dict()}
        data = _encode(rec)
        if len(data) > MAX_RECORD:
            raise IOFailure(
                f"failed to save the state of {key.container_id[:12]}: the record would be "
                f"{len(data)} bytes, over the {MAX_RECORD >> 10} KiB bound")
        self._ensure(self.state_dir)
        _write_atomic(self.state_dir, key.digest() + ".json", data)

    def delete_state(self, key: AttachmentKey) -> None:
        if _remove(self._state_path(key)):
            _fsync_dir(self.state_dir)

    def list_states(self) -> list[dict[str, Any]]:
        out = []
        for name in _scan(self.state_dir):
            path = os.path.join(self.state_dir, name)
            rec = self._read_state(path)
            if rec is None:
                continue
            if name != _key_of(rec).digest() + ".json":
                self._quarantine(path, "file name does not match its key")
                continue
            out.append(rec)
        return out

    def _read_state(self, path: str) -> dict[str, Any] | None:
        try:
            rec = _read_record(path)
            if rec is not None:
                _key_of(rec)
            return rec
        except _Corrupt as e:
            self._quarantine(path, str(e))
            return None

    def quarantine_state(self, key: AttachmentKey, why: str) -> None:
        """Move ``key``'s state record aside as unreadable (see :meth:`owners`)."""
        self._quarantine(self._state_path(key), why)

    def quarantined(self) -> set[str]:
        """Digests of keys whose state record was moved aside as unreadable."""
        return {n.split(".", 1)[0] for n in _scan(self.corrupt_dir) if ".json." in n}

    def forget_quarantined(self, key: AttachmentKey) -> None:
        """Drop the moved-aside records of ``key`` (its DEL has torn it down)."""
        prefix = key.digest() + ".json."
        for name in _scan(self.corrupt_dir):
            if name.startswith(prefix):
                _remove(os.path.join(self.corrupt_dir, name))

    def _quarantine(self, path: str, why: str) -> None:
        self._ensure(self.corrupt_dir)
        dest = os.path.join(self.corrupt_dir, f"{os.path.basename(path)}.{time.time_ns()}")
        log.warning("moving corrupt state record %s to %s: %s", path, dest, why)
        try:
            os.replace(path, dest)
        except FileNotFoundError:
            return
        except OSError as e:
            raise _ioerr("move aside corrupt record", path, e) from e

    # -- owned records (IP reservations and NIC claims) ------------------
    def _owner_at(self, path: str) -> Owner | None:
        entry = self._entry_at(path)
        return None if entry is None else entry[0]

    @staticmethod
    def _entry_at(path: str) -> tuple[Owner, str] | None:
        """(owner, recorded pool or "") of the record at ``path``; None if missing."""
        try:
            rec = _read_record(path)
            if rec is None:
                return None
            pool = rec.get("pool")
            return _owner_of(rec), pool if isinstance(pool, str) else ""
        except _Corrupt as e:
            log.warning("unreadable record %s treated as held by an unknown owner: %s", path, e)
            return (UNKNOWN_OWNER, ""), ""

    def _claim(self, directory: str, name: str, key: AttachmentKey, ifname: str,
               extra: dict[str, Any] | None = None) -> bool:
        self._ensure(None)
        _ensure_dir(directory)
        data = _encode({**(extra or {}), "key": key.as_dict(), "ifname": ifname})
        for _ in range(8):
            if _create_exclusive(directory, name, data):
                return True
            owner = self._owner_at(os.path.join(directory, name))
            if owner is not None:
                return owner == (key, ifname)
        raise IOFailure(f"failed to create {os.path.join(directory, name)}: keeps changing")

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
        for sub in _scan(self.ips_dir):
            owner = self._owner_at(os.path.join(self.ips_dir, sub, str(ip)))
            if owner is not None:
                return owner
        return None

    def ip_owners(self, pool: str) -> dict[IPv4Address, Owner]:
        """Every reserved address inside ``pool``'s network, whatever pool it was made in."""
        pool_dirname(pool)
        net = IPv4Network(pool)
        return {ip: owner for _, ip, owner, _ in self._ip_entries() if ip in net}

    def _dir_owners(self, directory: str) -> Iterator[tuple[str, IPv4Address, Owner, str]]:
        for name in _scan(directory):
            try:
                ip = IPv4Address(name)
            except ValueError:
                log.warning("ignoring stray file %s", os.path.join(directory, name))
                continue
            path = os.path.join(directory, name)
            entry = self._entry_at(path)
            if entry is not None:
                yield entry[1], ip, entry[0], path

    def _ip_entries(self) -> Iterator[tuple[str, IPv4Address, Owner, str]]:
        """(pool, address, owner, file) of every reservation, both layouts."""
        yield from self._dir_owners(self.addrs_dir)
        for sub in _scan(self.ips_dir):
            net = _pool_from_dirname(sub)
            if net is None:
                log.warning("ignoring stray entry %s", os.path.join(self.ips_dir, sub))
                continue
            for _, ip, owner, path in self._dir_owners(os.path.join(self.ips_dir, sub)):
                yield str(net), ip, owner, path

    def ips_of(self, key: AttachmentKey) -> list[tuple[str, IPv4Address, str]]:
        return [(pool, ip, o[1]) for pool, ip, o, _ in self._ip_entries() if o[0] == key]

    def release_ips(self, key: AttachmentKey, ifname: str | None = None) -> int:
        """Free the addresses held by exactly ``key`` (and ``ifname``); the count freed."""
        freed = 0
        if key == UNKNOWN_OWNER:
            return 0
        with self.lock():
            for _, _, owner, path in list(self._ip_entries()):
                mine = owner[0] == key and (ifname is None or owner[1] == ifname)
                if mine and _remove(path):
                    _fsync_dir(os.path.dirname(path))
                    freed += 1
        return freed

    # -- NIC claims --------------------------------------------------------
    def _nic_path(self, netdev: str) -> str:
        if not valid_netdev(netdev):
            raise ConfigError(f"invalid netdev name {shown(netdev)}: need 1-15 of [A-Za-z0-9_.-]")
        return os.path.join(self.nics_dir, netdev)

    def claim_nic(self, netdev: str, key: AttachmentKey, ifname: str) -> bool:
        """Claim ``netdev``; True if now (or already) claimed by (key, ifname)."""
        path = self._nic_path(netdev)
        return self._claim(self.nics_dir, os.path.basename(path), key, ifname)

    def nic_owner(self, netdev: str) -> Owner | None:
        return self._owner_at(self._nic_path(netdev))

    def nic_claims(self) -> dict[str, Owner]:
        out: dict[str, Owner] = {}
        for name in _scan(self.nics_dir):
            owner = self._owner_at(os.path.join(self.nics_dir, name))
            if owner is not None:
                out[name] = owner
        return out

    def release_nics(self, key: AttachmentKey, ifname: str | None = None) -> int:
        freed = 0
        if key == UNKNOWN_OWNER:
            return 0
        with self.lock():
            for netdev, (k, ifn) in self.nic_claims().items():
                if k == key and (ifname is None or ifn == ifname):
                    freed += _remove(os.path.join(self.nics_dir, netdev))
            if freed:
                _fsync_dir(self.nics_dir)
        return freed

    # -- whole keys --------------------------------------------------------
    def owners(self) -> set[AttachmentKey]:
        """Keys with state, reservations or claims; a key whose state record was found
        unreadable is left out unless it has a readable one again (only its own DEL
        may free what it holds: its interfaces may still exist)."""
        with_state = {_key_of(rec) for rec in self.list_states()}
        held = {owner[0] for _, _, owner, _ in self._ip_entries()}
        held.update(owner[0] for owner in self.nic_claims().values())
        held.discard(UNKNOWN_OWNER)
        unreadable = self.quarantined()
        return with_state | {k for k in held if k.digest() not in unreadable}

    def purge(self, key: AttachmentKey) -> None:
        with self.lock():
            self.release_ips(key)
            self.release_nics(key)
            self.delete_state(key)

    def corrupt_records(self) -> list[str]:
        """Paths of unreadable reservations/claims, and of state records moved aside."""
        paths = [os.path.join(self.corrupt_dir, n) for n in _scan(self.corrupt_dir)]
        for _, _, owner, path in self._ip_entries():
            if owner[0] == UNKNOWN_OWNER:
                paths.append(path)
        for netdev, owner in self.nic_claims().items():
            if owner[0] == UNKNOWN_OWNER:
                paths.append(os.path.join(self.nics_dir, netdev))
        return paths
