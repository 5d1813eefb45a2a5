"""The store across a node's crash: records are written without an fsync, and the first
locked open in another boot removes the records a power loss cut (empty or unparsable),
never a whole one; a store an earlier release wrote is adopted as it is. The boot is
the kernel's boot ID, read from a file the test points ``boot.BOOT_ID`` at."""

from __future__ import annotations

import os
from collections.abc import Iterator
from ipaddress import IPv4Address
from pathlib import Path

import pytest

from rdma_cni.store import atomic, boot
from rdma_cni.store.core import UNKNOWN_OWNER, Store
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.attachment import AttachmentKey

POOL = "192.0.2.0/28"
LIVE = AttachmentKey("rdma-net", "sandbox-live", "eth0")
CUT = AttachmentKey("rdma-net", "sandbox-cut", "eth0")
BOOT_A = "0b7e5a2c-6a0d-4d0e-9a53-2a5b0e6f0a01"
BOOT_B = "5c1d2e3f-7b8a-4c9d-8e0f-1a2b3c4d5e02"


@pytest.fixture
def boot_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "boot_id"
    path.write_text(BOOT_A + "\n")
    monkeypatch.setattr(boot, "BOOT_ID", str(path))
    monkeypatch.setattr(boot, "_checked", {})
    monkeypatch.setattr(boot, "_boot", [])
    yield path


def reboot(boot_id: Path, to: str = BOOT_B) -> None:
    boot_id.write_text(to + "\n")
    boot._checked.clear()  # a new boot is a new process too
    boot._boot.clear()


def records(store: Store) -> set[str]:
    root = Path(store.root)
    return {str(p.relative_to(root)) for sub in ("state", "addrs", "ips", "nics")
            for p in (root / sub).rglob("*") if p.is_file()}


def populate(store: Store) -> None:
    """A live attachment, and one whose three records a power loss cut (left empty)."""
    for key, ip, nic in ((LIVE, "192.0.2.2", "rnic0"), (CUT, "192.0.2.3", "rnic1")):
        store.put_state(key, AttachmentState.from_json({"ifaces": ["eth1"]}))
        assert store.reserve_ip(POOL, IPv4Address(ip), key, "eth1")
        assert store.claim_nic(nic, key, "eth1")
    cut = [Path(store.state_dir) / f"{CUT.digest()}.json", Path(store.addrs_dir) / "192.0.2.3",
           Path(store.nics_dir) / "rnic1"]
    for path in cut:
        path.write_bytes(b"")
    old_layout = Path(store.ips_dir) / "192.0.2.0_28"
    old_layout.mkdir(parents=True)
    (old_layout / "192.0.2.4").write_bytes(b'{"key": {"network": "rdma-')  # cut mid-write


def owner(store: Store, ip: str) -> tuple[AttachmentKey, str] | None:
    return store.ip_owners(POOL).get(IPv4Address(ip))


def stamp(store: Store) -> str:
    return Path(store.lock_path).read_text().strip()


def test_records_are_written_without_an_fsync(tmp_path: Path, boot_id: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    store = Store(str(tmp_path / "data"))
    for d in (store.root, store.state_dir, store.addrs_dir, store.nics_dir):
        os.makedirs(d, 0o700, exist_ok=True)  # a directory's creation is synced: not counted
    with store.lock():
        pass
    assert len(synced) == 1  # the boot's stamp, once
    synced.clear()
    store.prepare_ip(POOL, LIVE, "eth1")
    with store.lock():
        store.put_state(LIVE, AttachmentState.from_json({"ifaces": ["eth1"]}))
        assert store.reserve_ip(POOL, IPv4Address("192.0.2.2"), LIVE, "eth1")
        assert store.claim_nic("rnic0", LIVE, "eth1")
    store.drop_prepared()
    store.purge(LIVE)
    assert synced == []
    assert records(store) == set()
    atomic.write_atomic(str(tmp_path), "conf", b"{}", sync_dir=True)  # not the store's: synced
    assert len(synced) == 2


def test_a_new_store_is_stamped_with_this_boot(tmp_path: Path, boot_id: Path) -> None:
    store = Store(str(tmp_path / "data"))
    with store.lock():
        pass
    assert stamp(store) == BOOT_A


def test_another_boot_removes_the_cut_records_and_keeps_the_whole_ones(
        tmp_path: Path, boot_id: Path) -> None:
    store = Store(str(tmp_path / "data"))
    populate(store)
    with store.lock():
        pass
    assert stamp(store) == BOOT_A
    before = records(store)
    assert len(before) == 7
    assert owner(store, "192.0.2.3") == (UNKNOWN_OWNER, "")  # same boot: held

    reboot(boot_id)
    store = Store(store.root)
    with store.lock():
        pass
    assert stamp(store) == BOOT_B
    assert records(store) == {f"state/{LIVE.digest()}.json", "addrs/192.0.2.2", "nics/rnic0"}
    assert owner(store, "192.0.2.3") is None
    assert owner(store, "192.0.2.2") == (LIVE, "eth1")
    assert store.nic_owner("rnic1") is None
    assert store.owners() == {LIVE}


def populated_and_opened(tmp_path: Path) -> tuple[Store, set[str]]:
    """A populated store opened once in this boot, and its records."""
    store = Store(str(tmp_path / "data"))
    populate(store)
    with store.lock():
        pass
    return store, records(store)


def open_again(store: Store) -> None:
    boot._checked.clear()  # another process
    with Store(store.root).lock():
        pass


def test_the_same_boot_sweeps_nothing(tmp_path: Path, boot_id: Path) -> None:
    store, before = populated_and_opened(tmp_path)
    open_again(store)
    assert records(store) == before


def test_a_store_of_an_earlier_release_is_adopted_as_it_is(tmp_path: Path,
                                                           boot_id: Path) -> None:
    store = Store(str(tmp_path / "data"))
    populate(store)
    Path(store.lock_path).write_bytes(b"")  # earlier releases leave the lock file empty
    before = records(store)
    reboot(boot_id)
    with Store(store.root).lock():
        pass
    assert records(store) == before  # no stamp: nothing is known of its boots
    assert stamp(store) == BOOT_B


def test_no_boot_id_sweeps_nothing_and_stamps_nothing(tmp_path: Path, boot_id: Path) -> None:
    store, before = populated_and_opened(tmp_path)
    boot_id.unlink()
    boot._boot.clear()
    open_again(store)
    assert records(store) == before and stamp(store) == BOOT_A


ODD = AttachmentKey("rdma-net", "sandbox-odd", "eth0")


def _no_file(path: Path, what: str) -> None:
    if what == "fifo":
        os.mkfifo(path)
    elif what == "directory":
        path.mkdir()
    else:
        path.symlink_to(path.parent.parent.parent / "elsewhere")


@pytest.mark.parametrize("what", ["fifo", "directory", "symlink"])
def test_another_boot_handles_what_no_power_loss_makes_as_a_corrupt_record(
        tmp_path: Path, boot_id: Path, what: str) -> None:
    """A FIFO, a directory or a symlink where a record belongs is nothing a power loss
    cut: the boot's sweep removed a FIFO or a symlink, and a directory failed every
    command that took the lock in that boot (code 5). It is a corrupt record, as at any
    other time: a state record is moved aside to corrupt/ (its key's reservation stays
    held, its DEL salvages), a reservation stays, held by no one known."""
    (tmp_path / "elsewhere").write_text("{}")
    store = Store(str(tmp_path / "data"))
    store.put_state(ODD, AttachmentState.from_json({"ifaces": ["eth1"]}))
    assert store.reserve_ip(POOL, IPv4Address("192.0.2.5"), ODD, "eth1")
    with store.lock():
        pass
    record = Path(store.state_dir) / f"{ODD.digest()}.json"
    record.unlink()
    _no_file(record, what)
    held = Path(store.addrs_dir) / "192.0.2.6"
    _no_file(held, what)

    reboot(boot_id)
    store = Store(store.root)
    with store.lock():
        pass
    assert stamp(store) == BOOT_B
    assert not os.path.lexists(record)
    assert [p.name.startswith(record.name + ".")
            for p in (Path(store.root) / "corrupt").iterdir()] == [True]
    assert store.quarantined() == {ODD.digest()} and store.owners() == set()
    assert os.path.lexists(held) and owner(store, "192.0.2.6") == (UNKNOWN_OWNER, "")
    assert owner(store, "192.0.2.5") == (ODD, "eth1")
    assert (tmp_path / "elsewhere").read_text() == "{}"
