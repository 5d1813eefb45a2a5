"""Every Kubernetes API call of the agent has a deadline. None had one: an API server
that accepts connections and never answers held the agent's pass for good, before it
saved its marks and its heartbeat, so a lost attachment never reached its second pass
and nothing was released."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from support.mute import muted

from rdma_cni.kube.agent import kubeapi
from rdma_cni.kube.agent.kubeapi import KubeCluster, KubePodApi, publish

client = pytest.importorskip("kubernetes.client")


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    with muted(listener):
        yield listener.getsockname()[1]


def test_a_silent_api_server_costs_a_call_its_deadline_not_the_pass(
        silent: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubeapi, "API_TIMEOUT", (0.5, 0.5))
    cfg = client.Configuration(host=f"http://127.0.0.1:{silent}")
    api = client.CoreV1Api(client.ApiClient(cfg))
    pods = KubePodApi.__new__(KubePodApi)
    pods.api = api
    t0 = time.monotonic()
    from rdma_cni.store.state import AttachmentState

    states = [AttachmentState(status="ready", pod="ns/p", pod_uid="u", result={"interfaces": [
        {"name": "eth1", "sandbox": "/run/netns/x"}], "ips": []})]
    assert publish(states, pods) == 0  # the API error is logged, the pass goes on
    with pytest.raises(Exception):  # noqa: B017 (urllib3's timeout, whatever its class)
        KubeCluster(api).node_pods("node-a")
    assert time.monotonic() - t0 < 10
