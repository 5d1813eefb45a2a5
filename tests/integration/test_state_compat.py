"""State records written by the code before the typed state (tests/fixtures/state) drive
CHECK, DEL and GC of the current code on a live rig; what the current code writes for
the same ADD is the same record; a DEL or GC with a real record and a live netns loads no
pydantic. Oracle: the kernel (ip -j) through the rig's clean check, and -X importtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cnirunner import rdma_blocks

pytestmark = pytest.mark.root

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state"
#: values that differ from run to run (netns path and identity, the ADD's token, MACs)
PER_RUN = ("netns", "origin", "request", "result")
PER_RUN_IFACE = ("identity",)
#: keys this release adds to an exclusive NIC's entry (its configuration of every family,
#: its own settings); the replayed record goes without them, as the previous code wrote it
ADDED_IFACE = ("host_addrs", "inet6_mode", "host_link")
#: keys this release adds to the record (when ADD wrote it: the agent's grace period)
ADDED = ("written",)
HEAVY = {"pydantic", "pydantic_core", "grpc", "kubernetes"}


def _rig_as_captured(rig: Any, mode: str) -> tuple[Any, Any, int]:
    """The node of tests/fixtures/state/README.md; (chain, pod, blocks). The chain's
    cniVersion is 1.1.0 (GC needs it); the record does not depend on it."""
    if mode == "exclusive":
        rig.nic("rnic0", "198.51.100.1/26", "198.51.100.62", mtu=1400)
        return rig.chain("exclusive", cni_version="1.1.0"), rig.pod(), 1
    rig.nic("rnic0", "198.51.100.1/26", "198.51.100.62", mtu=9000)
    rig.nic("rnic1", "198.51.100.65/26", mtu=9000, routes=[("198.19.0.0/16", "198.51.100.126")])
    return rig.chain("shared-multi", ["rnic0", "rnic1"], cni_version="1.1.0"), rig.pod(), 2


def _state_file(rig: Any) -> Path:
    (path,) = sorted((rig.data_dir / "state").glob("*.json"))
    return path


def _with_run_values(old: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    out = {**old, **{k: live[k] for k in PER_RUN}}
    out["interfaces"] = [{**o, **{k: n[k] for k in PER_RUN_IFACE}}
                         for o, n in zip(old["interfaces"], live["interfaces"], strict=True)]
    return out


def _imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip().split(".")[0]
            for line in stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("mode", ["shared-multi", "exclusive"])
def test_records_of_the_previous_code_drive_check_del_and_gc(rig: Any, mode: str) -> None:
    chain, pod, n = _rig_as_captured(rig, mode)
    assert chain.add("c1", pod.path, rdma_blocks(n)).rc == 0
    path = _state_file(rig)
    live = json.loads(path.read_bytes())
    old = json.loads((FIXTURES / f"{mode}-0.2.json").read_bytes())
    replay = _with_run_values(old, live)
    same = {**{k: v for k, v in live.items() if k not in ADDED},
            "interfaces": [{k: v for k, v in i.items() if k not in ADDED_IFACE}
                           for i in live["interfaces"]]}
    assert replay == same  # the current code writes the record the previous code wrote
    path.write_text(json.dumps(replay))
    assert chain.check("c1").rc == 0
    assert chain.delete("c1").rc == 0  # the rig's clean check: the node as before the ADD

    assert chain.add("c2", pod.path, rdma_blocks(n)).rc == 0  # GC releases from it too
    path = _state_file(rig)
    live = json.loads(path.read_bytes())
    minimal = {k: v for k, v in _with_run_values(old, live).items()
               if k not in ("request", "origin", "podUID", "rulePriority")}
    path.write_text(json.dumps({**minimal, "key": live["key"]}))
    assert chain.gc([]).rc == 0
    assert rig.files() == []


def test_del_and_gc_of_a_live_attachment_import_no_pydantic(rig: Any) -> None:
    chain, pod, n = _rig_as_captured(rig, "shared-multi")
    chain.env = {**chain.env, "PYTHONPROFILEIMPORTTIME": "1"}
    assert chain.add("c1", pod.path, rdma_blocks(n)).rc == 0
    run = chain.delete("c1")
    assert run.rc == 0, run
    seen = _imported(run.err)
    assert "pyroute2" in seen  # the DEL did tear down through netlink
    assert not seen & HEAVY, sorted(seen & HEAVY)
    assert chain.add("c2", pod.path, rdma_blocks(n)).rc == 0
    run = chain.gc([])
    assert run.rc == 0, run
    seen = _imported(run.err)
    assert "pyroute2" in seen and not seen & HEAVY, sorted(seen & HEAVY)
    assert rig.files() == []
