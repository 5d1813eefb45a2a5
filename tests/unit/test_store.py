"""The disk store: layout, atomicity, O_EXCL ownership, path safety, concurrency."""

from __future__ import annotations

import fcntl
import json
import multiprocessing as mp
import os
import stat
import threading
import time
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path

import pytest

from rdma_cni.errors import AddressError, Code, ConfigError, IOFailure, TryAgain
from rdma_cni.ipam.allocator import Pool, RangeLimits, build_pool
from rdma_cni.ipam.reserve import allocate
from rdma_cni.store import addrview, claims, files
from rdma_cni.store.core import UNKNOWN_OWNER, Store
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.attachment import AttachmentKey

S = AttachmentState.from_json  # a record from its JSON form

A = IPv4Address
POOL = "192.0.2.0/28"
OLD = AttachmentKey("rdma-net", "sandbox-old", "eth0")
NEW = AttachmentKey("rdma-net", "sandbox-new", "eth0")
SPAWN = mp.get_context("spawn")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "data"))


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


# -- state --------------------------------------------------------------------

def test_state_roundtrip_layout_and_modes(store: Store) -> None:
    assert store.get_state(OLD) is None
    assert not os.path.exists(store.root)  # reads create nothing
    store.put_state(OLD, S({"ifaces": ["eth1"], "key": "spoof", "schema": 9}))
    rec = store.get_state(OLD)
    assert rec is not None and (rec.schema, rec.key, rec.extra) == (1, OLD, {"ifaces": ["eth1"]})
    path = Path(store.state_dir) / f"{OLD.digest()}.json"
    assert json.loads(path.read_text()) == rec.to_json()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for d in (store.root, store.state_dir):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    store.put_state(OLD, S({"ifaces": []}))
    assert store.get_state(OLD).extra["ifaces"] == []  # type: ignore[union-attr]
    assert store.list_states() == [S({"schema": 1, "key": OLD.as_dict(), "ifaces": []})]
    assert store.list_states()[0].extra == {"ifaces": []}
    store.delete_state(OLD)
    store.delete_state(OLD)  # missing is fine
    assert store.get_state(OLD) is None and store.list_states() == []


@pytest.mark.parametrize("content", [b'{"schema": 1, "key": {"netw', b"", b"[1,2]", b"\xff\xfe",
                                     b'{"schema": 1, "key": {"network": 1}}'])
def test_corrupt_or_truncated_state_is_moved_aside(store: Store, content: bytes) -> None:
    store.put_state(NEW, S({"n": 1}))
    path = Path(store.state_dir) / f"{OLD.digest()}.json"
    path.write_bytes(content)  # a torn write / disk corruption
    assert store.get_state(OLD) is None
    assert not path.exists()
    assert len(store.corrupt_records()) == 1
    store.put_state(OLD, S({"n": 2}))  # the store stays usable
    assert store.get_state(OLD).extra["n"] == 2  # type: ignore[union-attr]
    assert {r.key.container_id for r in store.list_states() if r.key} == {"sandbox-old",
                                                                      "sandbox-new"}


def test_misplaced_state_record_is_not_listed(store: Store) -> None:
    store.put_state(OLD, S({}))
    os.rename(Path(store.state_dir) / f"{OLD.digest()}.json",
              Path(store.state_dir) / f"{NEW.digest()}.json")
    assert store.get_state(NEW) is None
    assert store.list_states() == []
    assert store.owners() == set()


def test_orphaned_temp_files_are_ignored_and_cleaned(store: Store) -> None:
    store.put_state(OLD, S({"n": 1}))
    store.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")
    sdir, idir = Path(store.state_dir), Path(store.addrs_dir)
    dead = SPAWN.Process(target=os.getpid)
    dead.start()
    dead.join()
    old = time.time() - 3600
    crash_state = sdir / f".tmp-{dead.pid}-0000-{NEW.digest()}.json"
    crash_state.write_bytes(b'{"schema": 1, "ke')  # half written, writer died
    crash_ip = idir / f".tmp-{dead.pid}-0000-192.0.2.3"
    crash_ip.write_bytes(b"")
    for p in (crash_state, crash_ip):
        os.utime(p, (old, old))
    fresh = sdir / f".tmp-{dead.pid}-0002-z.json"  # no lock but young: kept for now
    fresh.write_bytes(b"{")
    pidns = os.stat("/proc/self/ns/pid").st_ino
    killed = sdir / f".tmp-{pidns}.{dead.pid}-0003-k.json"  # young, but its writer is dead
    killed.write_bytes(b"{")                               # in our own PID namespace
    elsewhere = sdir / f".tmp-{pidns + 1}.{dead.pid}-0004-e.json"  # another PID view:
    elsewhere.write_bytes(b"{")                                    # its PID means nothing
    live = sdir / f".tmp-{os.getpid() + 99999}-0000-x.json"  # a writer at work, its PID
    live.write_bytes(b"{")                                  # not visible from here
    os.utime(live, (old, old))
    live_fd = os.open(live, os.O_RDONLY)
    fcntl.flock(live_fd, fcntl.LOCK_EX)
    stale = sdir / f".tmp-{os.getpid()}-0001-y.json"
    stale.write_bytes(b"{")
    os.utime(stale, (old, old))
    mine_young = sdir / f".tmp-{pidns}.{os.getpid()}-0005-m.json"  # our own write at work
    mine_young.write_bytes(b"{")
    mine_old = sdir / f".tmp-{pidns}.{os.getpid()}-0006-n.json"  # ours too, an hour old and
    mine_old.write_bytes(b"{")                                    # no lock: left behind
    os.utime(mine_old, (old, old))
    try:
        assert [r.key for r in store.list_states()] == [OLD]
        assert store.ip_owners(POOL) == {A("192.0.2.2"): (OLD, "eth1")}
        assert not crash_state.exists() and not crash_ip.exists() and not stale.exists()
        assert not killed.exists()
        assert live.exists() and fresh.exists() and elsewhere.exists()
        assert mine_young.exists() and not mine_old.exists()
    finally:
        os.close(live_fd)
    assert store.reserve_ip(POOL, A("192.0.2.3"), NEW, "eth1")


# -- IP reservations ------------------------------------------------------------

def test_reserve_ip_o_excl_semantics(store: Store) -> None:
    ip = A("192.0.2.2")
    assert store.reserve_ip(POOL, ip, OLD, "eth1")
    path = Path(store.addrs_dir) / "192.0.2.2"
    before = path.read_bytes()
    assert json.loads(before) == {"key": OLD.as_dict(), "ifname": "eth1", "pool": POOL}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store.reserve_ip(POOL, ip, OLD, "eth1")  # same owner: idempotent
    assert not store.reserve_ip(POOL, ip, NEW, "eth1")
    assert not store.reserve_ip(POOL, ip, OLD, "eth2")  # same key, other interface
    assert path.read_bytes() == before
    assert store.ip_owners(POOL) == {ip: (OLD, "eth1")}
    assert files_under(Path(store.addrs_dir)) == {"192.0.2.2"}


def test_a_reservation_written_ahead_of_the_lock_is_the_same_record(store: Store) -> None:
    """prepare_ip writes (and fsyncs) the record before the lock; under it reserve_ip only
    links it to the address's name. Same record, same exclusivity; nothing is left."""
    with store.lock():
        assert store.reserve_ip(POOL, A("192.0.2.2"), NEW, "eth1")  # taken the usual way
    store.prepare_ip(POOL, OLD, "eth1")
    store.prepare_ip(POOL, OLD, "eth1")  # once per record
    temps = files_under(Path(store.addrs_dir)) - {"192.0.2.2"}
    assert len(temps) == 1
    tmp = Path(store.addrs_dir) / temps.pop()
    pool = Pool(POOL, IPv4Interface(POOL).network, A("192.0.2.2"), A("192.0.2.14"),
                frozenset(), None)
    with store.lock():
        ip = allocate(store, pool, OLD, "eth1")
        assert ip == A("192.0.2.3")  # .2 is NEW's: the link to it failed, the next one held
        assert os.stat(Path(store.addrs_dir) / "192.0.2.3").st_ino == tmp.stat().st_ino
        assert not store.reserve_ip(POOL, A("192.0.2.3"), NEW, "eth1")
    store.drop_prepared()
    assert files_under(Path(store.addrs_dir)) == {"192.0.2.2", "192.0.2.3"}
    assert json.loads((Path(store.addrs_dir) / "192.0.2.3").read_bytes()) == \
        {"pool": POOL, "key": OLD.as_dict(), "ifname": "eth1"}
    assert store.ip_owners(POOL) == {A("192.0.2.2"): (NEW, "eth1"), A("192.0.2.3"): (OLD, "eth1")}


def test_a_state_prepared_ahead_of_the_lock(store: Store) -> None:
    """prepare_state: the record complete beside its place, invisible until committed;
    a discarded one leaves nothing."""
    tmp = store.prepare_state(OLD, S({"ifaces": ["eth1"]}))
    assert store.get_state(OLD) is None and store.list_states() == []
    store.commit_state(OLD, tmp)
    rec = store.get_state(OLD)
    assert rec is not None and rec.extra == {"ifaces": ["eth1"]}
    store.discard(store.prepare_state(OLD, S({"ifaces": ["eth2"]})))
    rec = store.get_state(OLD)
    assert rec is not None and rec.extra == {"ifaces": ["eth1"]}
    assert files_under(Path(store.state_dir)) == {f"{OLD.digest()}.json"}


def test_release_only_by_exact_owner(store: Store) -> None:
    store.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")
    assert store.release_ips(OLD) == 1
    # the pod's new sandbox gets the same address; the old sandbox's late DEL comes
    assert store.reserve_ip(POOL, A("192.0.2.2"), NEW, "eth1")
    store.reserve_ip("198.51.100.0/24", A("198.51.100.9"), NEW, "eth2")
    assert store.release_ips(OLD) == 0
    assert store.release_ips(OLD, "eth1") == 0
    assert store.ip_owners(POOL) == {A("192.0.2.2"): (NEW, "eth1")}
    assert store.ips_of(NEW) == [("192.0.2.0/28", A("192.0.2.2"), "eth1"),
                                 ("198.51.100.0/24", A("198.51.100.9"), "eth2")]
    assert store.release_ips(NEW, "eth2") == 1
    assert store.ips_of(NEW) == [("192.0.2.0/28", A("192.0.2.2"), "eth1")]
    assert store.release_ips(NEW) == 1
    assert store.ips_of(NEW) == []


def test_a_scan_reads_only_the_records_it_has_not_seen(store: Store,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []

    def counted(path: str) -> tuple[dict[str, object] | None, files.Identity | None]:
        read.append(os.path.basename(path))
        return files.read_identified(path)

    monkeypatch.setattr(claims, "read_identified", counted)
    third = AttachmentKey("rdma-net", "sandbox-third", "eth0")
    store.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")
    store.reserve_ip(POOL, A("192.0.2.3"), NEW, "eth1")
    assert store.ip_owners(POOL) == {A("192.0.2.2"): (OLD, "eth1"), A("192.0.2.3"): (NEW, "eth1")}
    assert sorted(read) == ["192.0.2.2", "192.0.2.3"]
    read.clear()
    assert store.ip_owners(POOL) == {A("192.0.2.2"): (OLD, "eth1"), A("192.0.2.3"): (NEW, "eth1")}
    assert read == []  # nothing changed: nothing read
    assert store.release_ips(OLD) == 1  # its own record: read from the file
    assert read == ["192.0.2.2"]
    read.clear()
    store.reserve_ip(POOL, A("192.0.2.2"), third, "eth1")  # the address, another owner
    assert store.ip_owners(POOL) == {A("192.0.2.2"): (third, "eth1"), A("192.0.2.3"): (NEW, "eth1")}
    assert read == ["192.0.2.2"]
    read.clear()
    assert store.ip_owners(POOL, mine=NEW)[A("192.0.2.3")] == (NEW, "eth1")
    assert read == ["192.0.2.3"]  # what the caller holds: read again


def test_a_stale_reading_never_gives_an_address_to_a_second_owner(store: Store) -> None:
    """Whatever this process remembers of a record (here: wrongly, that NEW holds it),
    NEW's own decisions read the file: it frees nothing and gets another address."""
    store.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")
    store.ip_owners(POOL)
    path = os.path.join(store.addrs_dir, "192.0.2.2")
    _remember(store, "192.0.2.2", (NEW, "eth1"))
    assert store.ip_owners(POOL)[A("192.0.2.2")] == (NEW, "eth1")  # the remembered reading
    assert store.ip_owners(POOL, mine=NEW)[A("192.0.2.2")] == (OLD, "eth1")
    assert store.ips_of(NEW) == []
    assert store.release_ips(NEW) == 0 and os.path.exists(path)
    _remember(store, "192.0.2.2", (NEW, "eth1"))
    with store.lock():
        got = allocate(store, _pool("192.0.2.1/28"), NEW, "eth1")
    assert got != A("192.0.2.2")
    assert store.ip_owners(POOL, mine=OLD)[A("192.0.2.2")] == (OLD, "eth1")


def _remember(store: Store, ip: str, owner: tuple[AttachmentKey, str]) -> None:
    """This process's remembered reading of ``ip``'s record made wrong: the scans' memory
    of the file, and the view of its pool the ADDs keep (:mod:`rdma_cni.store.addrview`)."""
    seen = claims._seen[store.addrs_dir]
    ident, (_, pool) = seen[ip]
    seen[ip] = (ident, (owner, pool))
    addrview._views[(store.addrs_dir, IPv4Network(POOL))].owners[ip] = (A(ip), owner)


def test_a_file_with_whole_second_times_is_always_read() -> None:
    """On a filesystem with coarse timestamps a recycled inode could look like the file
    it replaced: such files have no identity, so no scan trusts an earlier reading."""
    def st(ctime_ns: int) -> os.stat_result:
        return os.stat_result((stat.S_IFREG | 0o600, 7, 1, 1, 0, 0, 90, 0, 0, 0,
                               0.0, 0.0, 0.0, 0, ctime_ns, ctime_ns))

    assert files._identity(st(1_700_000_000 * 10**9)) is None
    assert files._identity(st(1_700_000_000 * 10**9 + 5)) == (1, 7, 1_700_000_000 * 10**9 + 5,
                                                              1_700_000_000 * 10**9 + 5, 90)


def test_corrupt_reservation_is_held_by_unknown_owner(store: Store) -> None:
    store.reserve_ip(POOL, A("192.0.2.3"), OLD, "eth1")
    d = Path(store.addrs_dir)
    (d / "192.0.2.2").write_bytes(b'{"key": ')
    assert not store.reserve_ip(POOL, A("192.0.2.2"), NEW, "eth1")
    assert store.ip_owners(POOL)[A("192.0.2.2")] == (UNKNOWN_OWNER, "")
    assert store.owners() == {OLD}
    assert store.release_ips(UNKNOWN_OWNER) == 0
    store.purge(OLD)
    assert (d / "192.0.2.2").exists()
    assert store.corrupt_records() == [str(d / "192.0.2.2")]
    pool = _pool("192.0.2.1/28")
    with store.lock():
        assert allocate(store, pool, NEW, "eth1") == A("192.0.2.3")


def test_stray_entries_are_ignored(store: Store) -> None:
    store.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")
    os.makedirs(os.path.join(store.ips_dir, "junk"))
    Path(store.addrs_dir, "README").write_text("x")
    assert store.ips_of(OLD) == [(POOL, A("192.0.2.2"), "eth1")]
    assert store.ip_owners(POOL) == {A("192.0.2.2"): (OLD, "eth1")}


@pytest.mark.parametrize("pool", ["../../etc", "192.0.2.1/28", "192.0.2.0_28", "", "x/y",
                                  "192.0.2.0/28\x00", "2001:db8::/64", "192.0.2.0/28/.."])
def test_hostile_pool_names_are_refused(store: Store, pool: str) -> None:
    with pytest.raises(ConfigError):
        store.reserve_ip(pool, A("192.0.2.2"), OLD, "eth1")
    with pytest.raises(ConfigError):
        store.ip_owners(pool)
    for d in (store.ips_dir, store.addrs_dir):
        assert not os.path.exists(d) or os.listdir(d) == []


def test_reserve_outside_pool_is_address_error(store: Store) -> None:
    with pytest.raises(AddressError):
        store.reserve_ip(POOL, A("198.51.100.2"), OLD, "eth1")


# -- NIC claims ---------------------------------------------------------------

def test_nic_claims(store: Store) -> None:
    assert store.nic_owner("eth3") is None and store.nic_claims() == {}
    assert store.claim_nic("eth3", OLD, "eth1")
    assert store.claim_nic("eth3", OLD, "eth1")
    assert not store.claim_nic("eth3", NEW, "eth1")
    assert store.claim_nic("bond0.100", NEW, "eth2")
    assert store.nic_owner("eth3") == (OLD, "eth1")
    assert store.nic_claims() == {"eth3": (OLD, "eth1"), "bond0.100": (NEW, "eth2")}
    assert store.release_nics(NEW, "eth9") == 0
    assert store.release_nics(OLD) == 1
    assert store.nic_claims() == {"bond0.100": (NEW, "eth2")}
    Path(store.nics_dir, "eth4").write_text("garbage")
    assert store.nic_owner("eth4") == (UNKNOWN_OWNER, "")
    assert not store.claim_nic("eth4", OLD, "eth1")


@pytest.mark.parametrize("name", ["", ".", "..", "../etc", "a/b", "x" * 16, "eth0\n", "eth\x000",
                                  "eth 1", "/etc/passwd"])
def test_hostile_netdev_names_are_refused(store: Store, name: str) -> None:
    for call in (lambda: store.claim_nic(name, OLD, "eth1"), lambda: store.nic_owner(name)):
        with pytest.raises(ConfigError, match="invalid netdev name"):
            call()


# -- keys, paths, whole-store operations ----------------------------------------------

HOSTILE = [AttachmentKey("../../etc", "../../../../tmp/x", "eth0"),
           AttachmentKey("net\x00work", "id\nwith\nnewlines", "/../.."),
           AttachmentKey("..", ".", "")]


def test_hostile_keys_never_escape_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "a" / "b" / "data"
    store = Store(str(data))
    for i, key in enumerate(HOSTILE):
        store.put_state(key, S({"i": i}))
        assert store.reserve_ip(POOL, A(f"192.0.2.{i + 2}"), key, "eth1")
        assert store.claim_nic(f"eth{i + 1}", key, "eth1")
    assert {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()} == {
        f"a/b/data/{f}" for f in files_under(data)}
    assert all(len(Path(f).name) == 45 for f in files_under(data / "state"))
    assert store.owners() == set(HOSTILE)
    for i, key in enumerate(HOSTILE):
        assert store.get_state(key).extra["i"] == i  # type: ignore[union-attr]
        assert store.ips_of(key) == [(POOL, A(f"192.0.2.{i + 2}"), "eth1")]
        store.purge(key)
    assert files_under(data) == {"lock"}


def test_owners_and_purge(store: Store) -> None:
    k3 = AttachmentKey("other", "c3", "eth0")
    store.put_state(OLD, S({}))
    store.reserve_ip(POOL, A("192.0.2.2"), NEW, "eth1")
    store.claim_nic("eth2", k3, "eth1")
    assert store.owners() == {OLD, NEW, k3}
    with store.lock():
        store.purge(NEW)  # re-entrant: no self-deadlock
    assert store.owners() == {OLD, k3}
    store.purge(OLD)
    store.purge(k3)
    assert store.owners() == set()
    store.purge(k3)  # nothing left: fine


def test_usable(store: Store, tmp_path: Path) -> None:
    store.usable()
    assert files_under(Path(store.root)) == {"lock"}
    (tmp_path / "file").write_text("")
    with pytest.raises(IOFailure) as ei:
        Store(str(tmp_path / "file" / "data")).usable()
    assert ei.value.code == Code.IO_FAILURE and "file/data" in str(ei.value)


def test_write_failure_is_io_failure(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    bad = Store(str(tmp_path / "file" / "data"))
    with pytest.raises(IOFailure, match="failed to create directory"):
        bad.put_state(OLD, S({}))
    with pytest.raises(IOFailure):
        bad.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")
    # nothing can be held under something that is not a directory: reads find nothing
    # (a DEL has nothing to undo there), writes fail
    assert bad.get_state(OLD) is None and bad.owners() == set()
    assert bad.quarantined() == set()
    missing = Store(str(tmp_path / "missing"))
    assert missing.get_state(OLD) is None and missing.list_states() == []
    assert missing.owners() == set() and missing.nic_claims() == {}
    assert not (tmp_path / "missing").exists()


WRITES = {
    "state": lambda st: st.put_state(OLD, S({})),
    "addrs": lambda st: st.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1"),
    "nics": lambda st: st.claim_nic("rnic0", OLD, "eth1"),
}


@pytest.mark.parametrize("sub", ["state", "addrs", "nics", "corrupt", "ips"])
def test_a_file_where_a_directory_belongs_holds_nothing_and_refuses_writes(
        tmp_path: Path, sub: str) -> None:
    """A DEL has nothing to undo there (it failed with code 5, every DEL of the node);
    a write fails, naming the path (ADD refuses such a data dir)."""
    store = Store(str(tmp_path / "data"))
    store.usable()
    (tmp_path / "data" / sub).write_text("x")
    assert store.get_state(OLD) is None and store.owners() == set()
    assert store.quarantined() == set() and store.nic_claims() == {}
    assert store.ips_of(OLD) == [] and store.corrupt_records() == []
    store.purge(OLD)
    store.forget_quarantined(OLD)
    if sub in WRITES:
        with pytest.raises(IOFailure, match=f"failed to create directory .*/{sub}: "
                                            "something that is not a directory"):
            WRITES[sub](store)


def test_a_stray_file_among_the_old_pools_is_ignored(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "data"))
    (tmp_path / "data" / "ips").mkdir(parents=True)
    (tmp_path / "data" / "ips" / "junk").write_text("x")
    (tmp_path / "data" / "ips" / "192.0.2.0_28").write_text("x")
    assert store.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")
    assert store.ips_of(OLD) == [(POOL, A("192.0.2.2"), "eth1")]
    assert store.release_ips(OLD) == 1


def test_a_fifo_in_a_records_place_is_corrupt_not_waited_on(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "data"))
    store.put_state(OLD, S({}))
    assert store.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")
    fifo = Path(store.state_dir) / ("0" * 40 + ".json")
    os.mkfifo(fifo)
    os.mkfifo(Path(store.addrs_dir) / "192.0.2.3")
    assert [st.key for st in store.list_states()] == [OLD]
    assert not fifo.exists() and store.quarantined() == {"0" * 40}
    assert store.ip_owners(POOL, fresh=True)[A("192.0.2.3")] == (UNKNOWN_OWNER, "")
    assert str(Path(store.addrs_dir) / "192.0.2.3") in store.corrupt_records()


def test_a_directory_in_a_records_place_is_corrupt_not_a_failure(tmp_path: Path) -> None:
    """Opened, it failed the read (fdopen: EISDIR) and every listing with code 5."""
    store = Store(str(tmp_path / "data"))
    store.put_state(OLD, S({}))
    assert store.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")
    (Path(store.state_dir) / ("0" * 40 + ".json")).mkdir()
    (Path(store.addrs_dir) / "192.0.2.3").mkdir()
    assert [st.key for st in store.list_states()] == [OLD]
    assert store.quarantined() == {"0" * 40}
    assert store.ip_owners(POOL, fresh=True)[A("192.0.2.3")] == (UNKNOWN_OWNER, "")


@pytest.mark.parametrize("record", ["cut", "fifo"])
def test_a_corrupt_record_stays_where_it_is_when_corrupt_is_no_directory(
        tmp_path: Path, record: str, caplog: pytest.LogCaptureFixture) -> None:
    """A regular file named ``corrupt`` and a corrupt state record: the move aside failed,
    and with it every listing of the states (every DEL of the node: code 5). The record
    stays, reads as absent and is logged; its key counts as one with an unreadable record
    (its reservation stays held, its own DEL salvages and then removes it)."""
    store = Store(str(tmp_path / "data"))
    store.put_state(NEW, S({}))
    assert store.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")
    (tmp_path / "data" / "corrupt").write_text("x")
    path = Path(store.state_dir) / f"{OLD.digest()}.json"
    if record == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b'{"schema": 1, "key": {"netw')
    assert [st.key for st in store.list_states()] == [NEW]
    assert os.path.lexists(path) and store.quarantined() == {OLD.digest()}
    assert store.owners() == {NEW} and str(path) in store.corrupt_records()
    assert f"corrupt state record {path}" in caplog.text and "left in place" in caplog.text
    again = Store(store.root)  # the key's own DEL, another process
    assert again.get_state(OLD) is None and again.quarantined() == {OLD.digest()}
    again.purge(OLD)
    again.forget_quarantined(OLD)
    assert not os.path.lexists(path) and again.quarantined() == set()
    assert again.owners() == {NEW} and again.ips_of(OLD) == []


def _not_a_lock(path: Path, what: str) -> None:
    if what == "directory":
        path.mkdir()
    elif what == "fifo":
        os.mkfifo(path)
    else:
        (path.parent / "elsewhere").write_text("")
        path.symlink_to(path.parent / "elsewhere")


@pytest.mark.parametrize(("what", "kind"), [("directory", "a directory"), ("fifo", "a FIFO"),
                                            ("symlink", "a symbolic link")])
def test_a_lock_that_is_no_regular_file_is_refused_naming_it(
        tmp_path: Path, what: str, kind: str) -> None:
    """Something else than a regular file as the store's lock: what takes the lock (ADD,
    DEL of a container the store holds something of, GC, STATUS's check) fails with code 5
    naming it, at once (a FIFO is never waited on); what holds nothing of the store's
    (DEL of a container it knows nothing of) reads without the lock and succeeds."""
    store = Store(str(tmp_path / "data"))
    store.usable()
    os.unlink(store.lock_path)
    _not_a_lock(Path(store.lock_path), what)
    want = f"failed to open lock file {store.lock_path}: {kind} is in its place, not a regular file"
    def take() -> None:
        with store.lock():
            pass
    for use in (store.usable, take, lambda: store.reserve_ip(POOL, A("192.0.2.2"), OLD, "eth1")):
        with pytest.raises(IOFailure) as ei:
            use()
        assert ei.value.code == Code.IO_FAILURE and str(ei.value) == want
    assert store.get_state(OLD) is None and store.owners() == set()
    assert store.quarantined() == set()
    if what == "symlink":
        assert (tmp_path / "data" / "elsewhere").read_text() == ""  # never written through


# -- locking and concurrency ------------------------------------------------------------

def _hold_lock(data_dir: str, held: object, release: object) -> None:
    with Store(data_dir).lock(timeout=5):
        held.set()  # type: ignore[attr-defined]
        release.wait(10)  # type: ignore[attr-defined]


def test_store_lock_timeout_is_try_again_across_processes(store: Store) -> None:
    held, release = SPAWN.Event(), SPAWN.Event()
    p = SPAWN.Process(target=_hold_lock, args=(store.root, held, release))
    p.start()
    try:
        assert held.wait(30)
        t0 = time.monotonic()
        with pytest.raises(TryAgain) as ei, store.lock(timeout=0.2):
            pass
        assert 0.2 <= time.monotonic() - t0 < 2
        assert ei.value.code == 11 and store.lock_path in str(ei.value)
        with pytest.raises(TryAgain):
            Store(store.root, lock_timeout=0.05).release_ips(OLD)  # releases lock too
    finally:
        release.set()
        p.join(30)
    assert p.exitcode == 0
    with store.lock(timeout=5):
        pass


def _alloc_worker(data_dir: str, pool: Pool, idx: int, use_lock: bool, barrier: object,
                  out: object) -> None:
    store = Store(data_dir, lock_timeout=60)
    key = AttachmentKey("rdma-net", f"sandbox-{idx}", "eth0")
    barrier.wait(60)  # type: ignore[attr-defined]
    try:
        if use_lock:
            with store.lock():
                ip = allocate(store, pool, key, "eth1")
        else:
            ip = allocate(store, pool, key, "eth1")
        out.put((idx, str(ip)))  # type: ignore[attr-defined]
    except AddressError as e:
        out.put((idx, f"AddressError {e.code}"))  # type: ignore[attr-defined]


def _run_allocators(data_dir: str, pool: Pool, n: int, use_lock: bool) -> dict[int, str]:
    barrier, out = SPAWN.Barrier(n), SPAWN.Queue()
    procs = [SPAWN.Process(target=_alloc_worker, args=(data_dir, pool, i, use_lock, barrier, out))
             for i in range(n)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in range(n))
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return results


def _pool(cidr_host: str, **ranges: RangeLimits) -> Pool:
    return build_pool("eth1", [IPv4Interface(cidr_host)], None, [], dict(ranges), True)


@pytest.mark.parametrize(("use_lock", "n"), [(True, 32), (False, 16)])
def test_processes_allocate_distinct_addresses(store: Store, use_lock: bool, n: int) -> None:
    """Under the lock; and without it, where O_EXCL and the retry alone must hold."""
    pool = _pool("198.18.0.1/26")
    results = _run_allocators(store.root, pool, n, use_lock)
    ips = [A(v) for v in results.values()]
    assert len(set(ips)) == n
    assert all(pool.first <= ip <= pool.last for ip in ips)
    owners = store.ip_owners(pool.name)
    assert {ip: o[0].container_id for ip, o in owners.items()} == {
        A(ip): f"sandbox-{i}" for i, ip in results.items()}
    if use_lock:  # serialised: exactly the first n candidates
        assert set(ips) == set(list(pool.candidates())[:n])


def test_exhaustion_under_concurrency(store: Store) -> None:
    conf = RangeLimits(A("192.0.2.2"), A("192.0.2.6"))
    pool = _pool("192.0.2.1/28", **{"192.0.2.0/28": conf})
    n = pool.size()
    assert n == 5
    results = _run_allocators(store.root, pool, n + 8, True)
    ok = [v for v in results.values() if not v.startswith("AddressError")]
    assert sorted(A(v) for v in ok) == list(pool.candidates())
    assert [v for v in results.values() if v.startswith("AddressError")] == ["AddressError 102"] * 8
    assert files_under(Path(store.root)) == {"lock"} | {
        f"addrs/{v}" for v in ok}


def test_store_lock_reentrant_per_thread_only(store: Store) -> None:

    seen: list[BaseException | None] = []

    def other() -> None:
        try:
            with store.lock(timeout=0.05):
                seen.append(None)
        except TryAgain as e:
            seen.append(e)

    with store.lock(), store.lock(timeout=0):  # same thread: re-entrant
        t = threading.Thread(target=other)
        t.start()
        t.join()
        store.release_ips(OLD)  # takes the lock internally: no self-deadlock
    assert isinstance(seen[0], TryAgain)
    with store.lock(timeout=0):  # fully released after the outer block
        pass


def test_purge_removes_the_temp_files_its_dead_writers_left(store: Store) -> None:
    """An ADD killed while it wrote its state: DEL's purge leaves nothing of that key, and
    nothing of anybody else's."""
    store.put_state(NEW, S({"n": 1}))
    sdir = Path(store.state_dir)
    dead = SPAWN.Process(target=os.getpid)
    dead.start()
    dead.join()
    pidns = os.stat("/proc/self/ns/pid").st_ino
    killed = sdir / f".tmp-{pidns}.{dead.pid}-0001-{NEW.digest()}.json"
    killed.write_bytes(b'{"schema": 1')
    others = sdir / f".tmp-{pidns}.{dead.pid}-0002-{OLD.digest()}.json"
    others.write_bytes(b"{")
    live = sdir / f".tmp-{pidns}.{os.getpid()}-0003-{NEW.digest()}.json"  # a write at work
    live.write_bytes(b"{")
    store.purge(NEW)
    assert sorted(p.name for p in sdir.iterdir()) == sorted([others.name, live.name])
