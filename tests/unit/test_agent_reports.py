"""Pure parts of the agent's reports and of ADD's pod-generation check."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from rdma_cni.errors import TryAgain
from rdma_cni.kube.agent.kubeapi import Reporter
from rdma_cni.kube.agent.podreport import PodInfo, blocks_asked, without_rdma
from rdma_cni.kube.exporter.agent import AgentCollector
from rdma_cni.node import origin
from rdma_cni.node.podgen import pick_generation
from rdma_cni.store.run import agentstatus
from rdma_cni.store.state import AttachmentState
from rdma_cni.tools import ls
from rdma_cni.vocab.plan import IfacePlan

ASK = {"k8s.volcengine.com/pod-networks": json.dumps([{"cniConf": {"name": "rdma"}},
                                                      {"cniConf": {"name": "other"}}])}


def pod(name: str, annotations: dict[str, str], phase: str = "Running",
        conds: tuple[tuple[str, str], ...] = ()) -> PodInfo:
    return PodInfo("ns", name, f"uid-{name}", annotations, phase, conds)


@pytest.mark.parametrize("text", ["not json", "[1]", '{"a": 1}', "[" * 5000])
def test_malformed_annotations_ask_for_nothing(text: str) -> None:
    assert blocks_asked(pod("p", {"k8s.volcengine.com/pod-networks": text}), "rdma") == 0


def test_without_rdma_matches_by_uid_and_needs_a_ready_sandbox() -> None:
    one = (IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="macvlan", mtu=1500,
                     table=100),)
    states = [AttachmentState(status="ready", interfaces=one, pod_uid="uid-served",
                              pod="ns/served"),
              AttachmentState(status="pending", interfaces=one, pod_uid="uid-pending"),
              AttachmentState(status="ready", interfaces=one, pod="ns/old-record")]
    pods = [pod("served", ASK), pod("pending", ASK), pod("old-record", ASK),
            pod("starting", ASK, phase="Pending"),
            pod("netready", ASK, phase="Pending", conds=(("PodReadyToStartContainers", "True"),)),
            pod("plain", {})]
    assert [(p.name, n) for p, n in without_rdma(pods, states, "rdma")] == [
        ("netready", 1), ("pending", 1)]


def test_generation_pick() -> None:
    assert pick_generation("ns/p", [["a"], ["b"]], ["b"], {}) == ["b"]
    assert pick_generation("ns/p", [["a"]], ["b"], {}) == ["b"]  # checkpoint wins
    assert pick_generation("ns/p", [["a"]], None, {}) == ["a"]  # nothing to tell: as before
    assert pick_generation("ns/p", [], [], {}) == []
    with pytest.raises(TryAgain, match="two pods of that name"):
        pick_generation("ns/p", [["a"], ["b"]], None, {})
    with pytest.raises(TryAgain, match="uid-old"):
        pick_generation("ns/p", [["a"]], [], {"uid-old": ["a"]})
    assert pick_generation("ns/p", [["a"]], [], {"uid-x": ["z"]}) == ["a"]


class Events:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, str]] = []
        self.fail = fail

    def node_pods(self, node: str) -> list[PodInfo]:
        return []

    def event(self, obj: dict[str, str], reason: str, message: str, kind: str) -> None:
        if self.fail:
            raise RuntimeError("403 forbidden")
        self.sent.append((obj["name"], reason))


def test_reporter_dedupes_and_survives_restarts_and_api_errors() -> None:
    clock = [1000.0]
    api = Events()
    r = Reporter(api, clock=lambda: clock[0])
    obj = {"kind": "Pod", "name": "p", "uid": "u"}
    assert r.report(obj, "R", "m") and not r.report(obj, "R", "m")
    again = Reporter(api, clock=lambda: clock[0])
    again.restore(r.recent())
    assert not again.report(obj, "R", "m")
    clock[0] += 4000
    assert again.report(obj, "R", "m") and len(api.sent) == 2
    assert not Reporter(Events(fail=True)).report(obj, "R", "m")
    assert not Reporter(None).report(obj, "R", "m")


def test_exporter_and_ls_read_the_status_file(tmp_path: Path) -> None:
    path = tmp_path / "agent-status.json"
    registry = CollectorRegistry()
    registry.register(AgentCollector(str(path)))  # type: ignore[arg-type]
    assert "rdma_cni_agent" not in generate_latest(registry).decode()  # no agent yet
    doc: dict[str, Any] = {"lastPass": 5.0, "viewSuspect": True, "foreignRecords": 2,
                           "podsWithoutRdma": [{"pod": "ns/b", "blocks": 1}, "junk"]}
    agentstatus.write(str(path), doc)
    assert path.stat().st_mode & 0o777 == 0o600  # pod names and UIDs (it was 0644)
    text = generate_latest(registry).decode()
    for line in ("rdma_cni_agent_view_suspect 1.0", "rdma_cni_pods_without_rdma 1.0",
                 "rdma_cni_agent_foreign_records 2.0",
                 "rdma_cni_agent_last_pass_timestamp_seconds 5.0"):
        assert line in text
    rows = ls.missing_rows(agentstatus.read(str(path)), "vpc-cni")
    assert [(r["pod"], r["status"]) for r in rows] == [("ns/b", "no-rdma")]
    path.write_text("{")
    assert agentstatus.read(str(path)) is None


def test_node_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RDMA_CNI_NODE_ID", raising=False)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/machine-id").write_text("abc123\n")
    assert origin.machine_id(str(tmp_path)) == "abc123"
    assert origin.machine_id(str(tmp_path / "none")) == ""
    assert origin.node_identity() == socket.gethostname()
    monkeypatch.setenv("RDMA_CNI_NODE_ID", "node-x")
    assert origin.node_identity() == "node-x"
    assert origin.origin_of("/proc/self/ns/net")["netnsIno"] > 0
    assert origin.same_node(None, {"a"}) and origin.same_node("a", {"a", "b"})
    assert not origin.same_node("c", {"a", "b"})
