"""An ADD's reservation scan on a busy node (figure 7): it looks only at its pool's
addresses, however many the node's other NICs hold, and what it leaves of the others is
still checked by the scan that uses it."""

from __future__ import annotations

import os
from collections import Counter
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.ipam.allocator import Pool, build_pool
from rdma_cni.ipam.reserve import allocate
from rdma_cni.store import addrnames, claims, journal
from rdma_cni.store.core import Store
from rdma_cni.vocab.attachment import AttachmentKey

A = IPv4Address
NEW = AttachmentKey("rdma-net", "sandbox-new", "eth0")
NICS = 8  # figure 7's stand-in NICs, one /24 each


def _pool(k: int) -> Pool:
    return build_pool(f"rdma{k}", [IPv4Interface(f"198.18.{k}.1/24")], None, [], {}, True)


def _key(i: int) -> AttachmentKey:
    return AttachmentKey("rdma-net", f"sandbox-{i}", "eth0")


def _busy(root: str, per_nic: int) -> Store:
    """A store with ``per_nic`` reservations in each NIC's pool, read once by this
    process, and one released since (a DEL before the ADD)."""
    store = Store(root)
    for k in range(NICS):
        for i in range(per_nic + (k == 0)):
            key = _key(k * 1000 + i)
            assert store.reserve_ip(_pool(k).name, A(f"198.18.{k}.{i + 2}"), key, "eth1")
    for k in range(NICS):
        store.ip_owners(_pool(k).name)
    assert store.release_ips(_key(per_nic)) == 1
    return store


def _add_syscalls(store: Store) -> Counter[str]:
    """The lstat/stat/open/listdir calls of an ADD's address choice in pool 0, under the
    lock, and (``<call> addrs``) those on ``addrs/`` and its files."""
    calls: Counter[str] = Counter()
    with pytest.MonkeyPatch.context() as mp:
        for name in ("lstat", "stat", "open", "listdir", "scandir"):
            real = getattr(os, name)

            def counted(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                calls[_name] += 1
                if a and str(a[0]).startswith(store.addrs_dir):
                    calls[f"{_name} addrs"] += 1
                return _real(*a, **kw)

            mp.setattr(os, name, counted)
        with store.lock():
            allocate(store, _pool(0), NEW, "eth1")
    return calls


def test_an_adds_scan_does_not_grow_with_the_reservations(tmp_path: Path) -> None:
    """The pools were read once: an ADD reads what the journal says changed since (the
    DEL's address), whether the node holds none or 512 reservations."""
    quiet = _busy(str(tmp_path / "quiet"), 0)
    busy = _busy(str(tmp_path / "busy"), 64)  # figure 7: 512 over 8 NICs
    assert len(os.listdir(busy.addrs_dir)) == NICS * 64
    few, many = _add_syscalls(quiet), _add_syscalls(busy)
    assert many == few
    assert many["listdir addrs"] == 0 and many["lstat addrs"] <= 2


def test_a_listing_looks_only_at_its_pools_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the pool is listed again (the view expired), its own 64 files are checked,
    none of the other NICs' 448."""
    quiet = _busy(str(tmp_path / "quiet"), 0)
    busy = _busy(str(tmp_path / "busy"), 64)
    monkeypatch.setattr(journal, "REFRESH", 0.0)
    few, many = _add_syscalls(quiet), _add_syscalls(busy)
    assert many["lstat"] - few["lstat"] == 64  # pool 0's own 64, none of the other 448
    assert (many["stat"], many["open"]) == (few["stat"], few["open"])
    assert many["listdir addrs"] == few["listdir addrs"] == 1


def test_what_a_scan_left_unlooked_at_is_checked_when_used(tmp_path: Path) -> None:
    """A reservation of another pool, replaced while pool 0's scans kept their earlier
    reading of it, is read again by the scan that covers it."""
    store = _busy(str(tmp_path / "data"), 2)
    other = _pool(1).name
    ip = A("198.18.1.2")
    assert store.ip_owners(other)[ip] == (_key(1000), "eth1")
    assert store.release_ips(_key(1000)) == 1
    assert store.reserve_ip(other, ip, NEW, "eth1")
    store.ip_owners(_pool(0).name)
    # pool 1's earlier reading is kept (pool 0's scan did not look at it)
    assert claims._seen[store.addrs_dir][str(ip)][1][0] == (_key(1000), "eth1")
    assert store.ip_owners(other)[ip] == (NEW, "eth1")
    with store.lock():
        assert allocate(store, _pool(1), NEW, "eth1") == ip  # already held: no second
    assert store.ips_of(NEW) == [(other, ip, "eth1")]


def test_stray_names_are_skipped_and_names_parsed_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    store = _busy(str(tmp_path / "data"), 1)
    Path(store.addrs_dir, "not-an-address").write_text("{}")
    parsed: list[str] = []
    real = addrnames.IPv4Address

    def counted(name: str) -> IPv4Address:
        parsed.append(name)
        return real(name)

    monkeypatch.setattr(addrnames, "IPv4Address", counted)
    for fresh in (True, False, True):
        caplog.clear()
        assert set(store.ip_owners(_pool(0).name, fresh=fresh)) == {A("198.18.0.2")}
        # the stray is said whenever the directory is listed, whichever pool it looks at
        # (a view brought up to date by the journal lists nothing)
        said = [f"ignoring stray file {store.addrs_dir}/not-an-address"] if fresh else []
        assert [r.getMessage() for r in caplog.records if "stray" in r.getMessage()] == said
    assert parsed == ["not-an-address"]  # every other name was parsed by earlier scans


def test_a_scan_of_all_pools_and_of_one_see_the_same_records(tmp_path: Path) -> None:
    """Each network scanned keeps its own reading: an owner changed after one pool's scan
    shows in every scan that covers its address, with or without a network."""
    store = _busy(str(tmp_path / "data"), 3)
    assert len(store.ip_owners(_pool(2).name)) == 3
    ip = A("198.18.2.3")
    assert store.release_ips(_key(2001)) == 1
    assert store.reserve_ip(_pool(2).name, ip, NEW, "eth1")
    assert store.ip_owners(_pool(2).name)[ip] == (NEW, "eth1")
    assert store.ips_of(NEW) == [(_pool(2).name, ip, "eth1")]
    assert {o for _, _, o, _ in store._ip_entries()} >= {(NEW, "eth1")}
    wide = store.ip_owners("198.18.0.0/21")  # every NIC's pool at once
    assert len(wide) == NICS * 3 + 1 - 1 and wide[ip] == (NEW, "eth1")


@pytest.mark.parametrize("pool", ["198.18.1.0/24", "198.18.1.128/25", "198.18.1.4/30",
                                  "198.18.0.0/23", "198.18.0.0/20", "198.18.10.0/24",
                                  "198.16.0.0/14", "198.0.0.0/8", "192.0.0.0/4", "0.0.0.0/0"])
def test_a_pools_scan_finds_exactly_its_addresses_among_their_neighbours(
        tmp_path: Path, pool: str) -> None:
    """Names that share leading text with the pool's ("198.18.1" and "198.18.10", "198.18.100")
    are told apart; every pool size finds what a check of every address finds."""
    store = Store(str(tmp_path / "data"))
    held = [A(f"198.18.{c}.{d}") for c in (0, 1, 10, 11, 15, 16, 100, 200)
            for d in (0, 1, 5, 6, 7, 128, 200, 255)] + [A("198.19.1.1"), A("10.1.1.1")]
    for i, ip in enumerate(held):
        assert store.reserve_ip("0.0.0.0/0", ip, _key(i), "eth1")
    Path(store.addrs_dir, "198.18.1.x").write_text("{}")  # a stray among the pool's names
    net = IPv4Network(pool)
    want = {ip: (_key(i), "eth1") for i, ip in enumerate(held) if ip in net}
    assert store.ip_owners(pool) == want
    assert store.ip_owners(pool, mine=_key(0)) == want
