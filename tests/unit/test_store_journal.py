"""The reservations' change journal (rdma_cni.store.journal) and the view of a pool an
ADD keeps by it (rdma_cni.store.addrview): what another process changed is seen without
listing ``addrs/``, what the journal cannot tell is listed, and what changed behind its
back never gives one address to two owners nor a full pool with a free address in it."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.errors import AddressError
from rdma_cni.ipam.allocator import Pool, build_pool
from rdma_cni.ipam.reserve import allocate
from rdma_cni.store import boot, journal
from rdma_cni.store.core import Store
from rdma_cni.vocab.attachment import AttachmentKey

A = IPv4Address
POOL = "192.0.2.0/29"
NEW = AttachmentKey("rdma-net", "sandbox-new", "eth0")
ROOT = Path(__file__).resolve().parents[2]


def _key(i: int) -> AttachmentKey:
    return AttachmentKey("rdma-net", f"sandbox-{i}", "eth0")


def _pool() -> Pool:  # 192.0.2.2 - 192.0.2.6: five addresses
    return build_pool("eth1", [IPv4Interface("192.0.2.1/29")], None, [], {}, True)


@pytest.fixture
def lockfile(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    yield fd
    os.close(fd)


def test_the_names_noted_since_a_generation_are_told(lockfile: int) -> None:
    first, names = journal.since(lockfile, None)
    assert names is None and first[1] == 0  # started: nothing to tell from
    journal.note(lockfile, "192.0.2.2")
    journal.note(lockfile, "192.0.2.3")
    journal.note(lockfile, "192.0.2.2")
    now, names = journal.since(lockfile, first)
    assert names == {"192.0.2.2", "192.0.2.3"} and now == (first[0], 3)
    assert journal.since(lockfile, now) == (now, set())


def test_what_the_journal_cannot_tell_is_listed(lockfile: int) -> None:
    first, _ = journal.since(lockfile, None)
    assert first is not None
    for i in range(journal.RING):
        journal.note(lockfile, f"198.18.0.{i}")
    assert journal.since(lockfile, first)[1] is None  # behind by more than the ring holds
    behind = journal.head_of(os.getxattr(lockfile, journal.ATTR))
    assert behind is not None
    journal.note(lockfile, "198.18.1.1")
    raw = bytearray(os.getxattr(lockfile, journal.ATTR))
    at = len(raw) - 24 * journal.RING + 24 * ((behind[1] + 1) % journal.RING)
    raw[at:at + 24] = b"x" * 23 + b"\n"  # the slot overwritten
    os.setxattr(lockfile, journal.ATTR, bytes(raw))
    assert journal.since(lockfile, behind)[1] is None
    os.removexattr(lockfile, journal.ATTR)  # the store made again
    again, names = journal.since(lockfile, behind)
    assert names is None and again is not None and again[0] != behind[0]  # a new epoch
    journal.note(lockfile, "x" * 40)  # a name no slot holds: a new epoch again
    assert journal.since(lockfile, again)[1] is None


def test_the_lock_files_content_stays_the_boot_stamp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal is the lock file's extended attribute: what every release reads of the
    file, the boot stamp, is all it holds."""
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("0b7e5a2c-6a0d-4d0e-9a53-2a5b0e6f0a01\n")
    monkeypatch.setattr(boot, "BOOT_ID", str(boot_id))
    monkeypatch.setattr(boot, "_boot", [])
    monkeypatch.setattr(boot, "_checked", {})
    store = Store(str(tmp_path / "data"))
    assert store.reserve_ip(POOL, A("192.0.2.2"), _key(1), "eth1")
    assert store.release_ips(_key(1)) == 1
    assert Path(store.lock_path).read_bytes() == b"0b7e5a2c-6a0d-4d0e-9a53-2a5b0e6f0a01\n"
    assert os.getxattr(store.lock_path, journal.ATTR).count(b"192.0.2.2") == 2


def _counted(store: Store) -> tuple[Counter[str], pytest.MonkeyPatch]:
    """Calls on ``addrs/`` and its files, counted from now."""
    calls: Counter[str] = Counter()
    mp = pytest.MonkeyPatch()
    for name in ("lstat", "stat", "open", "listdir", "scandir"):
        real = getattr(os, name)

        def counted(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            if a and str(a[0]).startswith(store.addrs_dir):
                calls[_name] += 1
            return _real(*a, **kw)

        mp.setattr(os, name, counted)
    return calls, mp


def _other_process(root: str, code: str) -> None:
    """``code`` run by another interpreter with ``store`` opened on ``root``."""
    prog = ("import sys; from ipaddress import IPv4Address as A; "
            "from rdma_cni.store.core import Store; "
            "from rdma_cni.vocab.attachment import AttachmentKey as K; "
            f"store = Store({root!r}); {code}")
    subprocess.run([sys.executable, "-c", prog], check=True, cwd=ROOT, timeout=60)


def test_another_processs_changes_are_seen_without_a_listing(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "data"))
    for i in range(4):
        assert store.reserve_ip(POOL, A(f"192.0.2.{i + 2}"), _key(i), "eth1")
    assert len(store.ip_owners(POOL)) == 4
    _other_process(store.root, "store.release_ips(K('rdma-net', 'sandbox-1', 'eth0')); "
                   "store.reserve_ip('192.0.2.0/29', A('192.0.2.6'), "
                   "K('rdma-net', 'sandbox-9', 'eth0'), 'eth1')")
    calls, mp = _counted(store)
    try:
        owners = store.ip_owners(POOL)
    finally:
        mp.undo()
    assert owners == {A("192.0.2.2"): (_key(0), "eth1"), A("192.0.2.4"): (_key(2), "eth1"),
                      A("192.0.2.5"): (_key(3), "eth1"), A("192.0.2.6"): (_key(9), "eth1")}
    assert calls["listdir"] == calls["scandir"] == 0
    assert calls["open"] == 2  # the two names noted: read again, nothing else


def test_a_writer_that_died_after_noting_a_name_changed_nothing(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "data"))
    assert store.reserve_ip(POOL, A("192.0.2.2"), _key(1), "eth1")
    assert set(store.ip_owners(POOL)) == {A("192.0.2.2")}
    with store.lock():
        journal.note(store._journal_fd(), "192.0.2.3")  # and killed before its link
        journal.note(store._journal_fd(), "192.0.2.2")  # and killed before its unlink
    assert store.ip_owners(POOL) == {A("192.0.2.2"): (_key(1), "eth1")}
    with store.lock():
        assert allocate(store, _pool(), NEW, "eth1") == A("192.0.2.3")


def test_a_reservation_made_behind_the_journals_back_is_not_given_twice(
        tmp_path: Path) -> None:
    """An earlier release (during an upgrade) or a hand links an address the view holds
    free: the exclusive link refuses it and the ADD takes the next."""
    store = Store(str(tmp_path / "data"))
    assert store.reserve_ip(POOL, A("192.0.2.2"), _key(1), "eth1")
    store.ip_owners(POOL)
    Path(store.addrs_dir, "192.0.2.3").write_text(
        '{"key": {"network": "rdma-net", "containerID": "sandbox-2", "ifname": "eth0"}, '
        '"ifname": "eth1", "pool": "192.0.2.0/29"}')
    with store.lock():
        assert allocate(store, _pool(), NEW, "eth1") == A("192.0.2.4")
    assert store.ip_owners(POOL, fresh=True) == {
        A("192.0.2.2"): (_key(1), "eth1"), A("192.0.2.3"): (_key(2), "eth1"),
        A("192.0.2.4"): (NEW, "eth1")}


def test_a_pool_is_called_full_only_on_a_listing(tmp_path: Path) -> None:
    """A reservation removed behind the journal's back: the view holds the pool full, the
    listing finds the address free and the ADD gets it."""
    store = Store(str(tmp_path / "data"))
    for i in range(5):
        assert store.reserve_ip(POOL, A(f"192.0.2.{i + 2}"), _key(i), "eth1")
    store.ip_owners(POOL)
    os.unlink(os.path.join(store.addrs_dir, "192.0.2.4"))
    assert A("192.0.2.4") in store.ip_owners(POOL)  # the view does not know
    with store.lock():
        assert allocate(store, _pool(), NEW, "eth1") == A("192.0.2.4")
        with pytest.raises(AddressError, match="all 5 addresses"):
            allocate(store, _pool(), _key(7), "eth1")


def test_a_view_older_than_the_refresh_is_listed_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(str(tmp_path / "data"))
    assert store.reserve_ip(POOL, A("192.0.2.2"), _key(1), "eth1")
    store.ip_owners(POOL)
    os.unlink(os.path.join(store.addrs_dir, "192.0.2.2"))
    assert A("192.0.2.2") in store.ip_owners(POOL)
    monkeypatch.setattr(journal, "REFRESH", 0.0)
    assert store.ip_owners(POOL) == {}


def test_a_journal_that_fails_costs_a_listing_never_an_address(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    store = Store(str(tmp_path / "data"))
    assert store.reserve_ip(POOL, A("192.0.2.2"), _key(1), "eth1")
    store.ip_owners(POOL)

    def full(*a: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "setxattr", full)
    assert store.reserve_ip(POOL, A("192.0.2.3"), _key(2), "eth1")  # not noted
    assert "failed to note a change of 192.0.2.3 in the store's journal" in caplog.text
    with store.lock():
        assert allocate(store, _pool(), NEW, "eth1") == A("192.0.2.4")
    monkeypatch.setattr(os, "getxattr", full)
    assert store.ip_owners(POOL) == {A("192.0.2.2"): (_key(1), "eth1"),
                                     A("192.0.2.3"): (_key(2), "eth1"),
                                     A("192.0.2.4"): (NEW, "eth1")}  # listed
    assert "failed to read the store's journal" in caplog.text


def test_a_filesystem_without_the_attribute_lists_every_time_and_says_so_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A tmpfs before Linux 6.6 keeps no user extended attribute: no view is kept."""
    def unsupported(*a: Any) -> Any:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "getxattr", unsupported)
    monkeypatch.setattr(os, "setxattr", unsupported)
    monkeypatch.setattr(journal, "_said", [])
    caplog.set_level(logging.INFO)
    store = Store(str(tmp_path / "data"))
    for i in range(3):
        assert store.reserve_ip(POOL, A(f"192.0.2.{i + 2}"), _key(i), "eth1")
        assert len(store.ip_owners(POOL)) == i + 1
    os.unlink(os.path.join(store.addrs_dir, "192.0.2.2"))  # seen at once: listed
    assert set(store.ip_owners(POOL)) == {A("192.0.2.3"), A("192.0.2.4")}
    said = [r for r in caplog.records if "extended attributes" in r.getMessage()]
    assert len(said) == 1 and not [r for r in caplog.records if r.levelname == "WARNING"]
