"""The typed attachment state (rdma_cni.store.state): JSON round trips, tolerance of
the records today's and the previous release's code wrote, defaults, unknown keys.
Fixtures under tests/fixtures/state were written by the store before the typed state
existed (real shared-multi and exclusive ADDs, see tests/fixtures/state/README.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from ipaddress import IPv4Interface
from pathlib import Path
from typing import Any

import pytest

from rdma_cni import defaults
from rdma_cni.store.boot import BootMark
from rdma_cni.store.core import Store
from rdma_cni.store.files import encode
from rdma_cni.store.state import AttachmentState, StateError, make_state
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import READY
from rdma_cni.vocab.plan import IfacePlan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state"
RECORDS = sorted(FIXTURES.glob("*.json"))
KEY = AttachmentKey("vpc-cni", "c1", "eth0")
OPTIONAL = ("cniConfName", "origin", "request", "result", "podUID", "pod", "rulePriority")


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def test_there_are_fixtures_of_both_datapath_shapes() -> None:
    kinds = {i["kind"] for p in RECORDS for i in json.loads(p.read_text())["interfaces"]}
    assert kinds == {"macvlan", "physical"}


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_records_of_the_previous_code_round_trip_byte_for_byte(path: Path) -> None:
    raw = path.read_bytes()
    state = AttachmentState.from_json(json.loads(raw))
    assert encode(state.to_json()) == raw  # the store's encoding: sorted, compact
    assert AttachmentState.from_json(state.to_json()) == state


def test_fields_of_a_shared_multi_record() -> None:
    st = AttachmentState.from_json(fixture("shared-multi-0.2.json"))
    assert (st.status, st.mode, st.key, st.conf_name) == (READY, "shared-multi", KEY, "rdma")
    assert (st.pod, st.pod_uid, st.rule_priority, st.schema) == ("default/p1", "uid-p1",
                                                                 20000, 1)
    assert [(p.name, p.nic, p.kind, p.table) for p in st.interfaces] == [
        ("eth1", "rnic0", "macvlan", 100), ("eth2", "rnic1", "macvlan", 101)]
    assert st.interfaces[0].address == IPv4Interface("198.51.100.2/26")
    assert st.origin is not None and st.origin["node"] and st.request and not st.legacy
    assert st.result is not None and [i["name"] for i in st.result["interfaces"]] == [
        "eth1", "eth2"]
    assert st.extra == {} and st.nic_pending_since is None


def test_fields_of_an_exclusive_record() -> None:
    (p,) = AttachmentState.from_json(fixture("exclusive-0.2.json")).interfaces
    assert p.kind == "physical" and p.host_mtu == 1400 and p.host_up
    assert p.host_routes and p.routes == tuple((r[0], r[1]) for r in p.host_routes)
    assert p.identity["mac"]


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_a_record_missing_optional_keys_takes_the_defaults(path: Path) -> None:
    rec = json.loads(path.read_bytes())
    for k in (*OPTIONAL, "status", "mode", "netns", "schema"):
        rec.pop(k)
    st = AttachmentState.from_json(rec)
    assert (st.status, st.mode, st.netns, st.pod, st.pod_uid) == ("", "", "", "", "")
    assert st.rule_priority == defaults.RULE_PRIORITY and st.schema == 1
    assert st.result is None and st.origin is None and st.legacy and st.request == ""
    assert len(st.interfaces) == len(rec["interfaces"])
    out = st.to_json()
    assert not {"cniConfName", "origin", "request", "nicPendingSince"} & set(out)


def test_defaults_live_in_one_place() -> None:
    st = AttachmentState()
    assert (st.rule_priority, st.schema, st.interfaces, st.key) == (
        defaults.RULE_PRIORITY, 1, (), None)
    assert AttachmentState.from_json({"rulePriority": 0}).rule_priority == 20000
    assert AttachmentState.from_json({"rulePriority": 31000}).rule_priority == 31000


def test_unknown_keys_of_a_newer_release_survive_a_round_trip() -> None:
    rec = fixture("shared-multi-0.2.json")
    rec["futureTopLevel"] = {"a": [1, 2]}
    rec["interfaces"][1]["future_iface_key"] = "x"
    st = AttachmentState.from_json(rec)
    assert st.extra == {"futureTopLevel": {"a": [1, 2]}}
    assert st.interfaces[1].extra == {"future_iface_key": "x"}
    assert st.to_json() == rec


@pytest.mark.parametrize("junk", [
    {"pod": 5, "podUID": None, "status": ["ready"], "netns": 1},
    {"origin": "junk", "result": [1, 2], "cniConfName": 7, "request": {}},
    {"rulePriority": "20000", "nicPendingSince": "soon", "schema": "one"},
    {"key": {"network": "n"}, "rulePriority": True},
])
def test_malformed_scalars_read_as_their_defaults(junk: dict[str, Any]) -> None:
    st = AttachmentState.from_json({**junk, "interfaces": []})
    assert st == AttachmentState() and st.key is None and st.extra == {}
    assert (st.pod, st.status, st.netns, st.conf_name, st.request) == ("", "", "", "", "")
    assert st.origin is None and st.result is None and st.nic_pending_since is None
    assert st.rule_priority == 20000 and st.schema == 1


@pytest.mark.parametrize("bad", [[{"name": "eth1"}], [{"k": "x", "name": "e", "tmp": "t",
                                 "nic": "n", "kind": "macvlan", "mtu": 1, "table": 1}],
                                 [{"k": 0, "name": "e", "tmp": "t", "nic": "n", "kind": "m",
                                   "mtu": 1, "table": 1, "addresses": ["not-an-ip"]}], [7]])
def test_interfaces_teardown_cannot_use_are_a_state_error(bad: list[Any], tmp_path: Path) -> None:
    with pytest.raises(StateError, match="unusable interfaces"):
        AttachmentState.from_json({"interfaces": bad})
    store = Store(str(tmp_path))
    store.put_state(KEY, AttachmentState())
    path = Path(store.state_dir) / f"{KEY.digest()}.json"
    path.write_text(json.dumps({"schema": 1, "key": KEY.as_dict(), "interfaces": bad}))
    assert store.get_state(KEY) is None  # moved aside: DEL salvages by the alias mark
    assert store.quarantined() == {KEY.digest()}


def test_pending_since_keeps_its_number_and_with_changes_one_field() -> None:
    """An earlier release's number (the wall clock) reads as a mark of no boot and is
    written back as it was; this release's mark is the boot and its CLOCK_BOOTTIME."""
    st = AttachmentState.from_json({"nicPendingSince": 1700000000})
    assert st.nic_pending_since == BootMark(None, 1700000000.0)
    assert st.to_json()["nicPendingSince"] == 1700000000
    assert st.with_(status=READY) == AttachmentState(
        status=READY, nic_pending_since=BootMark(None, 1700000000))
    mark = {"boot": "b-1", "boottime": 12.5}
    st = AttachmentState.from_json({"nicPendingSince": mark})
    assert st.nic_pending_since == BootMark("b-1", 12.5)
    assert st.to_json()["nicPendingSince"] == mark


@pytest.mark.parametrize("junk", [{"boot": 1, "boottime": 2.0}, {"boot": "b"}, [1, 2], True,
                                  {"boottime": 3.0}, {"boot": "b", "boottime": "4"},
                                  {"boot": "b", "since": 5.0}])
def test_a_malformed_pending_mark_reads_as_none(junk: Any) -> None:
    assert AttachmentState.from_json({"nicPendingSince": junk}).nic_pending_since is None


def test_store_writes_what_make_state_built_and_reads_it_back(tmp_path: Path) -> None:
    plan = IfacePlan(k=0, name="eth1", tmp="t0", nic="rnic0", kind="macvlan", mtu=1500,
                     table=100, addresses=(IPv4Interface("198.51.100.2/26"),))
    st = make_state(READY, "shared-multi", "/var/run/netns/p", "ns/p", "u", 20000, [plan],
                    {"interfaces": []}, {"node": "n"}, conf_name="rdma", request="tok")
    store = Store(str(tmp_path))
    store.put_state(KEY, st.with_(key=AttachmentKey("spoof", "x", "y"), schema=9))
    back = store.get_state(KEY)
    assert back == st.with_(key=KEY)
    assert store.list_states() == [back]


STDLIB_PROBE = r"""
import json, sys
import rdma_cni.store.state, rdma_cni.store.core, rdma_cni.cni.commands.delete
import rdma_cni.cni.commands.gc, rdma_cni.datapath.teardown, rdma_cni.datapath.salvage
heavy = ("pydantic", "pydantic_core", "grpc", "kubernetes")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def test_the_state_and_the_del_path_import_no_pydantic() -> None:
    proc = subprocess.run([sys.executable, "-c", STDLIB_PROBE], capture_output=True, text=True,
                          timeout=60, check=False, cwd=str(Path(__file__).resolve().parents[2]))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
