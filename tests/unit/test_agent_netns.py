"""The agent's start-up check of the RDMA netns mode against the node's mode (issue 32
item 3): a mismatch is a Warning Event on the Node, sent through the real ``kubernetes``
client to the fake API server, a record in the status file and
``rdma_cni_netns_mode_mismatch`` from the exporter. No root."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support.fakes.kubeapi import TOKEN, FakeKubeApi

from rdma_cni.kube.agent import main as agent_main
from rdma_cni.kube.agent import netnsfit
from rdma_cni.kube.agent import reconciler as agent
from rdma_cni.kube.agent.kubeapi import KubeCluster, Reporter
from rdma_cni.kube.exporter.agent import AgentCollector
from rdma_cni.store.core import Store
from rdma_cni.vocab.modes import Mode, RdmaNetnsMode

client = pytest.importorskip("kubernetes.client")
SHARED, EXCLUSIVE = RdmaNetnsMode.SHARED.value, RdmaNetnsMode.EXCLUSIVE.value
NOT_MOUNTED = "27 1 254:0 / / rw - ext4 /dev/vda rw\n"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi(tmp_path).start()
    try:
        yield fake
    finally:
        fake.stop()


def core_v1(fake: FakeKubeApi) -> object:
    """A ``CoreV1Api`` of the real client talking to ``fake`` (as in-cluster config would)."""
    cfg = client.Configuration(host=f"https://127.0.0.1:{fake.port}")
    cfg.ssl_ca_cert = str(fake.cert)
    cfg.api_key = {"authorization": f"Bearer {TOKEN}"}
    return client.CoreV1Api(client.ApiClient(cfg))


def node_agent(tmp_path: Path, fake: FakeKubeApi, mode: str, netns: str | None) -> agent.Agent:
    cluster = KubeCluster(core_v1(fake))
    return agent.Agent(store=Store(str(tmp_path / "data")), status_path=str(tmp_path / "s.json"),
                       node="n", node_name="node-a", reporter=Reporter(cluster),
                       mountinfo=NOT_MOUNTED, mode=mode, netns_mode=lambda: netns)


def scrape(path: Path) -> str:
    registry = CollectorRegistry()
    registry.register(AgentCollector(str(path)))
    return generate_latest(registry).decode()


def test_fit_names_what_each_node_mode_needs() -> None:
    assert netnsfit.fit(Mode("shared"), EXCLUSIVE)["mismatch"] is True
    assert netnsfit.fit(Mode("shared-host"), SHARED)["mismatch"] is False
    assert netnsfit.fit(Mode("exclusive"), EXCLUSIVE) == {
        "mode": "exclusive", "netnsMode": EXCLUSIVE, "needs": [SHARED, EXCLUSIVE],
        "mismatch": False}
    assert netnsfit.fit(Mode("shared"), None)["mismatch"] is False  # unknown: not a mismatch


def test_a_mismatch_is_an_event_on_the_node_and_a_metric(tmp_path: Path,
                                                         api: FakeKubeApi) -> None:
    ag = node_agent(tmp_path, api, Mode("shared-multi"), EXCLUSIVE)
    doc = agent.run_once(ag, now=100.0)

    assert doc["netnsMode"] == {"mode": "shared-multi", "netnsMode": EXCLUSIVE,
                                "needs": [SHARED], "mismatch": True}
    (event,) = [e for e in api.events if e["reason"] == netnsfit.REASON]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "Node"
    assert event["involvedObject"]["name"] == "node-a"
    assert event["metadata"]["namespace"] == "default"
    assert "netns_mode=1" in event["message"] and "code 104" in event["message"]
    status = json.loads((tmp_path / "s.json").read_text())
    assert status["netnsMode"]["mismatch"] is True
    assert ('rdma_cni_netns_mode_mismatch{mode="shared-multi",netns_mode="exclusive"} 1.0'
            in scrape(tmp_path / "s.json"))

    agent.run_once(ag, now=200.0)  # a standing condition: not repeated within the hour
    assert len([e for e in api.events if e["reason"] == netnsfit.REASON]) == 1


@pytest.mark.parametrize(("mode", "netns"), [("exclusive", EXCLUSIVE), ("shared", SHARED),
                                             ("shared", None)])
def test_a_fitting_or_unknown_netns_mode_sends_nothing(tmp_path: Path, api: FakeKubeApi,
                                                       mode: str, netns: str | None) -> None:
    doc = agent.run_once(node_agent(tmp_path, api, Mode(mode), netns), now=100.0)
    assert doc["netnsMode"]["mismatch"] is False
    assert not [e for e in api.events if e["reason"] == netnsfit.REASON]
    text = scrape(tmp_path / "s.json")
    if netns is None:
        assert "rdma_cni_netns_mode_mismatch" not in text  # unknown: no series
    else:
        assert f'rdma_cni_netns_mode_mismatch{{mode="{mode}",netns_mode="{netns}"}} 0.0' in text


def test_the_agent_checks_the_mode_of_its_config(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"type": "rdma-cni", "mode": "shared",
                               "dataDir": str(tmp_path / "data")}))
    args = agent_main._parser().parse_args(["--config", str(cfg), "--status-file", "",
                                       "--cri-socket", ""])
    ag = agent_main._agent(args, json.loads(cfg.read_text()))
    assert ag.mode == "shared" and ag.netns_mode is not None


def test_outside_a_cluster_a_mismatch_is_logged_once(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    ag = agent.Agent(store=Store(str(tmp_path / "data")), status_path="", node="n",
                     node_name="node-a", mountinfo=NOT_MOUNTED, mode=Mode("shared"),
                     netns_mode=lambda: EXCLUSIVE)  # Reporter(None): no API server
    with caplog.at_level("WARNING", logger="rdma_cni.kube.agent.reconciler"):
        for now in (100.0, 130.0, 160.0):
            assert agent.run_once(ag, now=now)["netnsMode"]["mismatch"] is True
    lines = [r.getMessage() for r in caplog.records
             if "needs the RDMA netns mode" in r.getMessage()]
    assert len(lines) == 1 and "kernel's is exclusive" in lines[0]
