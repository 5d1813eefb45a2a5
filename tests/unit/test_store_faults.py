"""The store's answers to issue 14 items 2 and 3 (no root): reservations by address
whatever subnet they were made under, the layout of 0.1.0 honoured, records bounded
when written, large old records still read, unreadable ones never freeing what
their key holds."""

from __future__ import annotations

import json
import os
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

import pytest

from rdma_cni.errors import IOFailure
from rdma_cni.ipam.allocator import build_pool
from rdma_cni.ipam.reserve import allocate
from rdma_cni.store import records
from rdma_cni.store.core import MAX_RECORD, Store
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.plan import IfacePlan

S = AttachmentState.from_json  # a record from its JSON form

A = IPv4Address
OLD = AttachmentKey("net", "sandbox-old", "eth0")
NEW = AttachmentKey("net", "sandbox-new", "eth0")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "data"))


def _pool(cidr: str):  # type: ignore[no-untyped-def]
    return build_pool("nic0", [IPv4Interface(cidr)], None, [], {}, True)


def test_a_widened_pool_sees_the_address_held_in_the_narrow_one(store: Store) -> None:
    with store.lock():
        assert allocate(store, _pool("192.0.2.1/26"), OLD, "eth1") == A("192.0.2.2")
        assert allocate(store, _pool("192.0.2.1/25"), NEW, "eth1") == A("192.0.2.3")
    assert store.ip_owners("192.0.2.0/25") == {A("192.0.2.2"): (OLD, "eth1"),
                                               A("192.0.2.3"): (NEW, "eth1")}
    assert not store.reserve_ip("192.0.2.0/24", A("192.0.2.2"), NEW, "eth2")
    assert store.ips_of(OLD) == [("192.0.2.0/26", A("192.0.2.2"), "eth1")]


def test_a_reservation_of_the_old_layout_holds_by_address_and_is_released(store: Store) -> None:
    legacy = Path(store.ips_dir) / "192.0.2.0_26" / "192.0.2.2"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps({"key": OLD.as_dict(), "ifname": "eth1"}))
    assert not store.reserve_ip("192.0.2.0/25", A("192.0.2.2"), NEW, "eth1")
    assert store.reserve_ip("192.0.2.0/25", A("192.0.2.2"), OLD, "eth1")  # its own: idempotent
    assert not (Path(store.addrs_dir) / "192.0.2.2").exists()
    assert store.ip_owners("192.0.2.0/24") == {A("192.0.2.2"): (OLD, "eth1")}
    assert store.owners() == {OLD}
    assert store.release_ips(OLD) == 1
    assert not legacy.exists()
    assert store.reserve_ip("192.0.2.0/25", A("192.0.2.2"), NEW, "eth1")


def test_a_record_over_the_bound_is_refused_before_anything_is_written(store: Store) -> None:
    with pytest.raises(IOFailure, match="over the 1024 KiB bound"):
        store.put_state(OLD, S({"blob": "x" * MAX_RECORD}))
    assert store.get_state(OLD) is None
    assert not os.path.exists(store.state_dir) or os.listdir(store.state_dir) == []


def test_a_large_record_of_the_previous_release_still_loads(store: Store) -> None:
    store.put_state(OLD, S({"n": 1}))
    path = Path(store.state_dir) / (OLD.digest() + ".json")
    rec = {"schema": 1, "key": OLD.as_dict(), "interfaces": [], "pad": "r" * (3 << 20)}
    path.write_text(json.dumps(rec))
    assert store.get_state(OLD) == S(rec)
    assert store.get_state(OLD).to_json()["pad"] == rec["pad"]  # type: ignore[union-attr]
    assert store.quarantined() == set()


def test_an_unreadable_record_keeps_its_reservations_out_of_owners(store: Store) -> None:
    store.reserve_ip("192.0.2.0/26", A("192.0.2.2"), OLD, "eth1")
    store.claim_nic("nic0", OLD, "eth1")
    store.put_state(OLD, S({"n": 1}))
    (Path(store.state_dir) / (OLD.digest() + ".json")).write_bytes(b'{"schema": 1, "ke')
    assert store.get_state(OLD) is None
    assert store.quarantined() == {OLD.digest()}
    assert store.owners() == set()  # nothing may free them on its own (agent, GC)
    assert store.ip_owners("192.0.2.0/26") == {A("192.0.2.2"): (OLD, "eth1")}
    store.put_state(OLD, S({"n": 2}))  # the same key written again: listed again
    assert store.owners() == {OLD}
    store.purge(OLD)
    store.forget_quarantined(OLD)
    assert store.quarantined() == set()


def _plan(kind: str) -> IfacePlan:
    routes = tuple((f"198.19.{i // 250}.{i % 250}/32", "192.0.2.62") for i in range(800))
    return IfacePlan(k=0, name="eth1", tmp="t", nic="nic0", kind=kind, mtu=1500, table=100,
                     routes=routes,
                     host_routes=tuple(records.HostRoute(d, g, 3, 0, False) for d, g in routes))


def test_sub_interface_records_hold_no_routes_exclusive_ones_hold_them_once() -> None:
    shared = records.plan_to_dict(_plan("macvlan"))
    assert shared["routes"] == [] and shared["host_routes"] == []
    physical = records.plan_to_dict(_plan("physical"))
    assert physical["routes"] == [] and len(physical["host_routes"]) == 800
    back = records.plan_from_dict(json.loads(json.dumps(physical)))
    assert back.host_routes == _plan("physical").host_routes
    assert back.routes == _plan("physical").routes


def test_records_of_the_previous_release_load_with_both_route_lists() -> None:
    old = records.plan_to_dict(_plan("physical"))
    old["routes"] = [list(r) for r in _plan("physical").routes]
    back = records.plan_from_dict(json.loads(json.dumps(old)))
    assert back.routes == _plan("physical").routes
