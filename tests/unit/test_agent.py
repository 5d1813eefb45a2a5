"""rdma-cni agent: reconcile the store with the netns that still exist, and the
network-status annotation."""

from __future__ import annotations

import json
import os
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.kube.agent import main as agent_main
from rdma_cni.kube.agent import reconciler as agent
from rdma_cni.kube.agent.view import Evidence
from rdma_cni.store.core import Store
from rdma_cni.store.state import make_state
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import PENDING, READY
from rdma_cni.vocab.plan import IfacePlan

POOL = "198.51.100.0/28"


def plan(k: int, nic: str, ip: str | None) -> IfacePlan:
    return IfacePlan(k=k, name=f"eth{k + 1}", tmp=f"rdtmp{k}", nic=nic, kind="macvlan",
                     mtu=1500, table=100 + k,
                     addresses=(IPv4Interface(f"{ip}/28"),) if ip else ())


def attach(store: Store, cid: str, netns: str, ips: list[str], pod: str = "default/p1",
           status: str = READY, uid: str = "uid-1") -> AttachmentKey:
    key = AttachmentKey("vpc-cni", cid, "eth0")
    plans = [plan(k, f"rdfake{k}", ip) for k, ip in enumerate(ips)]
    for p in plans:
        assert store.reserve_ip(POOL, p.addresses[0].ip, key, p.name)
    result = {"interfaces": [{"name": p.name, "mac": f"02:00:00:00:00:0{p.k}",
                              "sandbox": netns} for p in plans],
              "ips": [{"address": str(p.addresses[0]), "interface": p.k} for p in plans]}
    store.put_state(key, make_state(status, "shared-multi", netns, pod, uid, 20000,
                                            plans, result))
    return key


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "data"))


def test_reconcile_releases_what_the_runtime_lacks_on_the_second_pass(store: Store) -> None:
    live = attach(store, "live", "/var/run/netns/live", ["198.51.100.2"])
    gone = attach(store, "gone", "/var/run/netns/gone", ["198.51.100.3", "198.51.100.4"])
    orphan = AttachmentKey("vpc-cni", "orphan", "eth0")
    assert store.reserve_ip(POOL, IPv4Address("198.51.100.5"), orphan, "eth1")
    ev = Evidence(sandboxes={"live": "ready"}, runtime_present=True)

    plan, released = agent.reconcile(store, ev, "node-a", {}, now=100.0, interval=10.0)
    assert released == [orphan] and store.get_state(gone) is not None  # first pass: marked
    plan, released = agent.reconcile(store, ev, "node-a", plan.marks, now=111.0, interval=10.0)

    assert released == [gone]
    assert store.get_state(gone) is None and store.get_state(live) is not None
    assert store.ip_owners(POOL) == {IPv4Address("198.51.100.2"): (live, "eth1")}
    assert store.owners() == {live} and plan.marks == {}


def test_reconcile_releases_nothing_without_evidence(store: Store) -> None:
    attach(store, "a", "/var/run/netns/a", ["198.51.100.2"])
    ev = Evidence(runtime_present=True, runtime_error="failed to ask the runtime: UNAVAILABLE")
    marks: dict[str, dict[str, float]] = {}
    for now in (0.0, 100.0, 200.0, 900.0):
        plan, released = agent.reconcile(store, ev, "node-a", marks, now=now, interval=10.0)
        marks = plan.marks
        assert released == [] and plan.reasons
    assert len(store.list_states()) == 1


def test_main_once_outside_a_cluster(store: Store, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    attach(store, "gone", "/var/run/netns/rdma-cni-unit-none", ["198.51.100.9"])
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"type": "rdma-cni", "dataDir": store.root}))
    status = tmp_path / "run" / "agent-status.json"
    argv = ["--config", str(cfg), "--once", "--status-file", str(status),
            "--cri-socket", str(tmp_path / "no-runtime.sock")]
    assert agent_main.main(argv) == 0
    doc = json.loads(status.read_text())
    assert doc["lastPass"] > 0 and doc["podsWithoutRdma"] == []
    assert agent_main.main(["--once"], conf_dir=str(tmp_path / "empty")) == 1


def test_status_payloads(store: Store, tmp_path: Path) -> None:
    attach(store, "c1", "/ns/1", ["198.51.100.2", "198.51.100.3"], pod="team/train-0")
    attach(store, "c2", "/ns/2", ["198.51.100.4"], pod="team/pending", status=PENDING)
    attach(store, "c3", "/ns/3", ["198.51.100.5"], pod="nopodname")
    out = agent.status_payloads(store.list_states())
    assert list(out) == [("team", "train-0", "uid-1")]
    assert json.loads(out[("team", "train-0", "uid-1")]) == [
        {"name": "vpc-cni", "interface": "eth1", "ips": ["198.51.100.2"],
         "mac": "02:00:00:00:00:00", "nic": "rdfake0", "mode": "shared-multi"},
        {"name": "vpc-cni", "interface": "eth2", "ips": ["198.51.100.3"],
         "mac": "02:00:00:00:00:01", "nic": "rdfake1", "mode": "shared-multi"},
    ]


class FakePods:
    def __init__(self, pods: dict[tuple[str, str], tuple[str, str | None]]) -> None:
        self.pods = pods
        self.patches: list[tuple[str, str, str]] = []

    def get(self, namespace: str, name: str) -> tuple[str, str | None] | None:
        if name == "broken":
            raise RuntimeError("500 from the API server")
        return self.pods.get((namespace, name))

    def patch(self, namespace: str, name: str, value: str) -> None:
        self.patches.append((namespace, name, value))
        uid, _ = self.pods[(namespace, name)]
        self.pods[(namespace, name)] = (uid, value)


def test_publish_patches_changed_pods_with_matching_uid(store: Store) -> None:
    attach(store, "c1", "/ns/1", ["198.51.100.2"], pod="ns/a")
    attach(store, "c2", "/ns/2", ["198.51.100.3"], pod="ns/recreated")
    attach(store, "c3", "/ns/3", ["198.51.100.4"], pod="ns/gone")
    attach(store, "c4", "/ns/4", ["198.51.100.6"], pod="ns/broken")
    pods = FakePods({("ns", "a"): ("uid-1", None), ("ns", "recreated"): ("uid-2", None)})
    assert agent.publish(store.list_states(), pods) == 1
    assert [(p[0], p[1]) for p in pods.patches] == [("ns", "a")]
    assert json.loads(pods.patches[0][2])[0]["ips"] == ["198.51.100.2"]
    assert agent.publish(store.list_states(), pods) == 0  # unchanged: no second patch




class Cluster:
    """A recording :class:`rdma_cni.kube.agent.kubeapi.ClusterApi`."""

    def __init__(self, pods: list[Any]) -> None:
        self.pods = pods
        self.events: list[tuple[str, str, str]] = []

    def node_pods(self, node: str) -> list[Any]:
        return self.pods

    def event(self, obj: dict[str, str], reason: str, message: str, kind: str) -> None:
        self.events.append((obj["kind"], obj["name"], reason))


def test_run_once_reports_a_suspect_view_on_the_node(store: Store, tmp_path: Path) -> None:
    from rdma_cni.kube.agent.kubeapi import Reporter
    from rdma_cni.kube.agent.podreport import PodInfo

    attach(store, "a", "/var/run/netns/a", ["198.51.100.2"])
    ask = {"k8s.volcengine.com/pod-networks": json.dumps([{"cniConf": {"name": "rdma"}}])}
    cluster = Cluster([PodInfo("ns", "lost", "uid-lost", ask, "Running")])
    ag = agent.Agent(store=store, status_path=str(tmp_path / "s.json"), node="n",
                     node_name="node-a", cluster=cluster, reporter=Reporter(cluster),
                     mountinfo="27 1 254:0 / / rw - ext4 /dev/vda rw\n")
    doc = agent.run_once(ag, now=100.0)
    assert doc["viewSuspect"] is True and doc["released"] == 0
    assert [p["pod"] for p in doc["podsWithoutRdma"]] == ["ns/lost"]
    assert sorted(cluster.events) == [("Node", "node-a", "RdmaCniViewSuspect"),
                                      ("Pod", "lost", "RdmaInterfacesMissing")]
    assert json.loads((tmp_path / "s.json").read_text())["lastPass"] == 100.0
    agent.run_once(ag, now=200.0)
    assert len(cluster.events) == 2  # not repeated within the hour


def test_marks_read_back_from_the_status_file_are_checked(store: Store) -> None:
    """The status file is read back at every start: a mark that is not two numbers (a
    hand edit, another release's shape) is dropped, never a pass that fails forever."""
    from rdma_cni.kube.agent.plan import restored_marks

    gone = attach(store, "gone", "/var/run/netns/gone", ["198.51.100.3"])
    ev = Evidence(sandboxes={}, runtime_present=True)
    for bad in ({"first": 1.0}, 5, {"first": "x", "passes": 1}, {"first": True, "passes": 1},
                None, [1, 2]):
        marks = restored_marks({gone.digest(): bad, 7: {"first": 1.0, "passes": 1.0}})
        assert marks == {}, bad
        plan, released = agent.reconcile(store, ev, "node-a", marks, now=100.0, interval=10.0)
        assert released == [] and plan.marks[gone.digest()]["passes"] == 1.0
    kept = restored_marks({gone.digest(): {"first": 90, "passes": 1}})
    assert kept == {gone.digest(): {"first": 90.0, "passes": 1.0}}
    _, released = agent.reconcile(store, ev, "node-a", kept, now=111.0, interval=10.0)
    assert released == [gone]



def test_a_record_written_under_the_nodes_kubernetes_name_is_released(store: Store) -> None:
    """The plan took a record written under the node's Kubernetes name (``--node-name``;
    ADD writes ``RDMA_CNI_NODE_ID`` or the hostname) for this node's, and the release
    refused it as another node's, every pass: it leaked without a word."""
    gone = attach(store, "gone", "/var/run/netns/gone", ["198.51.100.3"])
    state = store.get_state(gone)
    assert state is not None
    store.put_state(gone, state.with_(origin={"node": "k8s-node-a"}))
    ev = Evidence(sandboxes={}, runtime_present=True)
    names = {"some-hostname", "k8s-node-a"}
    plan, released = agent.reconcile(store, ev, names, {}, now=100.0, interval=10.0)
    plan, released = agent.reconcile(store, ev, names, plan.marks, now=111.0, interval=10.0)
    assert released == [gone] and store.get_state(gone) is None and store.owners() == set()


def test_a_runtime_socket_nothing_answers_on_stops_the_heartbeat(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DaemonSet mounts the runtime's socket file; once the runtime restarted, the
    mount showed the dead one and every pass failed (ECONNREFUSED) while the heartbeat,
    renewed by every finished pass, kept the liveness probe content: nothing lost was
    released until the pod was restarted by hand."""
    import socket as sock

    from rdma_cni.adapters.cri import CriClient
    from rdma_cni.kube.agent import main as agent_main
    from rdma_cni.store.run.heartbeat import heartbeat_path

    monkeypatch.setenv("RDMA_CNI_HEALTH_DIR", str(tmp_path))
    dead = tmp_path / "containerd.sock"
    s = sock.socket(sock.AF_UNIX, sock.SOCK_STREAM)
    s.bind(str(dead))
    s.close()  # the file stays, nothing listens: what the stale mount shows
    attach(store, "a", "/var/run/netns/a", ["198.51.100.2"])
    ev = agent.gather(store.list_states(), CriClient(str(dead)))
    assert ev.runtime_present and ev.runtime_down and ev.sandboxes is None
    agent_main._beat_unless_cut_off({"runtimeDown": True}, 30.0)
    assert not os.path.exists(heartbeat_path("agent"))
    agent_main._beat_unless_cut_off({"runtimeDown": False}, 30.0)
    assert os.path.exists(heartbeat_path("agent"))


def test_the_status_annotation_shows_this_nodes_ready_sandboxes_only(store: Store) -> None:
    """A pod whose sandbox was re-created (same UID) showed the old sandbox's eth1 and
    address beside the new one's until the old record went (for good where its release
    was blocked), and another node's records were published as this node's."""
    old = attach(store, "old", "/var/run/netns/old", ["198.51.100.2"])
    new = attach(store, "new", "/var/run/netns/new", ["198.51.100.3"])
    other = attach(store, "far", "/var/run/netns/far", ["198.51.100.4"], pod="default/q",
                   uid="uid-q")
    for key, node in ((old, "node-a"), (new, "node-a"), (other, "node-b")):
        state = store.get_state(key)
        assert state is not None
        store.put_state(key, state.with_(origin={"node": node}))
    states = store.list_states()
    assert set(agent.status_payloads(states)) == {("default", "p1", "uid-1"),
                                                  ("default", "q", "uid-q")}
    out = agent.status_payloads(states, {"node-a"}, {"new": "ready", "old": "notready",
                                                     "far": "ready"})
    assert list(out) == [("default", "p1", "uid-1")]
    assert [e["ips"] for e in json.loads(out[("default", "p1", "uid-1")])] == \
        [["198.51.100.3"]]


def test_a_wall_clock_set_forward_does_not_age_a_pending_record(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pending record (an ADD maybe still running) whose sandbox the runtime does not
    list: two passes 30 s apart on the node's own clock, the wall clock set 400 s
    forward between them. Marks are timed by CLOCK_BOOTTIME: nothing is released
    before PENDING_GRACE has really passed (on the wall clock it was, after 30 s)."""
    import time

    from support.fakes.cri import FakeCri

    from rdma_cni.adapters.cri import CriClient
    from rdma_cni.kube.agent.plan import PENDING_GRACE

    key = attach(store, "p", "/var/run/netns/p", ["198.51.100.2"], status=PENDING)
    cri = FakeCri(str(tmp_path / "cri.sock")).start()
    cri.sandboxes["live"] = 1  # SANDBOX_NOTREADY: a runtime that lists something
    try:
        ag = agent.Agent(store=store, status_path=str(tmp_path / "s.json"), node="n",
                         node_name="node-a", interval=10.0, cri=CriClient(cri.socket))
        boot = [1000.0]
        real = time.clock_gettime
        monkeypatch.setattr(time, "clock_gettime", lambda c: boot[0]
                            if c == time.CLOCK_BOOTTIME else real(c))
        wall = [5000.0]
        monkeypatch.setattr(time, "time", lambda: wall[0])
        agent.run_once(ag)
        boot[0] += 30
        wall[0] += 400
        assert agent.run_once(ag)["released"] == 0
        assert store.get_state(key) is not None
        boot[0] += PENDING_GRACE
        doc = agent.run_once(ag)
        assert doc["released"] == 1 and store.get_state(key) is None, doc["reasons"]
    finally:
        cri.stop()


def test_marks_of_another_boot_are_dropped_at_start(tmp_path: Path) -> None:
    """Marks are timed by CLOCK_BOOTTIME, which starts again at each boot: the status
    file's marks are read back only when it was written in this boot."""
    from rdma_cni.store.boot import this_boot

    cfg = {"type": "rdma-cni", "mode": "shared", "dataDir": str(tmp_path / "data")}
    mark = {"first": 90.0, "passes": 1.0}
    for boot, kept in ((this_boot(), True), ("another-boot", False), (None, False)):
        status = tmp_path / "s.json"
        doc: dict[str, Any] = {"lastPass": 1.0, "marks": {"d" * 40: mark}}
        if boot is not None:
            doc["boot"] = boot
        status.write_text(json.dumps(doc))
        args = agent_main._parser().parse_args(["--status-file", str(status),
                                                "--cri-socket", ""])
        ag = agent_main._agent(args, cfg)
        assert (ag.marks == {"d" * 40: mark}) is kept, boot
