"""Issue 13 item 4 (report half): a pod that asked for RDMA interfaces (annotation
blocks for our network) and has none once its sandbox is ready is reported: an Event
on the pod, ``rdma_cni_pods_without_rdma`` from the exporter, a ``no-rdma`` line in
``rdma-cni ls`` (and --json).

The agent runs in a podman container (started before the pods) from the source tree
and venv mounted read-only (the bundle leaves the ``kubernetes`` client out; the image
carries it), with the real client, in-cluster config pointing at a fake API server
(HTTPS on 127.0.0.1); the served pod's ADD runs through the built binary, in-process
and through the resident server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cnirunner import BINARY, Chain, Node, plugin_conf, pod_networks, rdma_blocks
from support.agent import AgentContainer, needs_exec, plugin_binary, podman_usable
from support.fakes.cri import FakeCri
from support.fakes.kubeapi import FakeKubeApi, pod
from support.resident import Serve

from rdma_cni.kube.exporter.agent import AgentCollector
from rdma_cni.proto import cri_v1_pb2 as cri_pb

pytestmark = [needs_exec, pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(bool(podman_usable()), reason=podman_usable() or "-")]

ASK = pod_networks(rdma_blocks(2))


@pytest.fixture(params=["in-process", "resident"])
def resident(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "resident")


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node()
    n.add_nic("rnic0", "198.51.100.1/26")
    try:
        yield n
    finally:
        n.close()


def test_pod_that_asked_for_rdma_and_has_none_is_reported(tmp_path: Path, node: Node,
                                                          resident: bool) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for d in ("cri", "status", "certs"):
        (tmp_path / d).mkdir()
    api = FakeKubeApi(tmp_path / "certs").start()
    cri = FakeCri(str(tmp_path / "cri" / "cri.sock")).start()
    serve = None
    sock = tmp_path / "r.sock"
    if resident:
        serve = Serve(node.ns, sock, tmp_path / "serve.log", [plugin_binary()])
    box = AgentContainer(tmp_path, {"type": "rdma-cni", "dataDir": str(data), "name": "vpc-cni"},
                         data, tmp_path / "cri", tmp_path / "status",
                         f"rdma-cni-nordma-{node.prefix}", network="host", source=True)
    env = api.install_service_account(box.rootfs)
    chain = Chain(plugin_conf("shared-multi", ["rnic0"], tmp_path,
                              residentSocket=str(sock) if resident else ""),
                  node_ns=node.ns, binary=plugin_binary())
    try:
        served = node.add_pod()
        assert chain.add("a" * 64, served.path, rdma_blocks(2), pod="served").rc == 0
        assert serve is None or serve.served("ADD") == 1
        cri.sandboxes["a" * 64] = cri_pb.SANDBOX_READY
        api.add(pod("default", "served", "uid-served", "node-a", ASK))
        api.add(pod("default", "forgotten", "uid-forgotten", "node-a", ASK))  # no ADD ran
        api.add(pod("default", "plain", "uid-plain", "node-a", {}))  # asked for nothing
        api.add(pod("default", "starting", "uid-starting", "node-a", ASK, phase="Pending",
                    network_ready=False))  # its sandbox is not ready yet
        api.add(pod("default", "elsewhere", "uid-x", "node-b", ASK))  # another node's pod

        run = box.agent_once(env=env)
        assert run.returncode == 0, run.stderr
        status = box.status()
        assert [p["pod"] for p in status["podsWithoutRdma"]] == ["default/forgotten"], run.stderr
        assert status["podsWithoutRdma"][0]["blocks"] == 2
        events = [(e["involvedObject"]["name"], e["reason"]) for e in api.events]
        assert events == [("forgotten", "RdmaInterfacesMissing")]
        assert [p[1] for p in api.patches] == ["served"]  # network-status of the served pod

        assert box.agent_once(env=env).returncode == 0
        assert len(api.events) == 1, "a standing condition repeats its Event"

        ls = subprocess.run([str(BINARY), "ls", "--json", "--config", str(box.config_path),
                             "--agent-status", str(box.status_file)],
                            capture_output=True, text=True, timeout=60)
        assert ls.returncode == 0, ls.stderr
        table = json.loads(ls.stdout)
        assert [(r["pod"], r["status"]) for r in table if r["status"] == "no-rdma"] == [
            ("default/forgotten", "no-rdma")]
        assert {r["pod"] for r in table if r["status"] == "ready"} == {"default/served"}
        text = subprocess.run([str(BINARY), "ls", "--config", str(box.config_path),
                               "--agent-status", str(box.status_file)],
                              capture_output=True, text=True, timeout=60).stdout
        assert any("default/forgotten" in line and "no-rdma" in line
                   for line in text.splitlines())

        registry = CollectorRegistry()
        registry.register(AgentCollector(str(box.status_file)))  # type: ignore[arg-type]
        metrics = generate_latest(registry).decode()
        assert "rdma_cni_pods_without_rdma 1.0" in metrics
        assert "rdma_cni_agent_view_suspect 0.0" in metrics
    finally:
        box.stop()
        for key in list(chain.cache):
            chain.delete(key[0])
        if serve:
            serve.stop()
        cri.stop()
        api.stop()
