"""The agent against the real containerd of the e2e rig: the agent runs in a podman
container (started before the pod, /var/run/netns without propagation) and asks
containerd's CRI socket. A live pod made by containerd is kept though its netns is a
plain file in the agent's view; a stale attachment whose sandbox containerd never
had (a lost DEL) is released on the second pass; PodSandboxStatus of an unknown ID
is NOT_FOUND, as the agent's release check assumes."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from support.agent import AgentContainer, needs_exec, podman_usable

from rdma_cni.adapters.cri import CriClient
from rdma_cni.store.core import Store
from rdma_cni.store.state import make_state
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import READY

pytestmark = [needs_exec, pytest.mark.root,
              pytest.mark.skipif(bool(podman_usable()), reason=podman_usable() or "-")]
ASK = {"k8s.volcengine.com/pod-networks": json.dumps([{"cniConf": {"name": "rdma"}}])}


def test_agent_in_a_container_trusts_containerd_not_its_netns_view(node: dict[str, Any]) -> None:
    cd, data, tmp = node["cd"], node["data"], node["tmp"]
    (tmp / "agent-status").mkdir(exist_ok=True)
    data.mkdir(exist_ok=True)
    (tmp / "agent").mkdir(exist_ok=True)
    box = AgentContainer(tmp / "agent", {"type": "rdma-cni", "dataDir": str(data)}, data,
                         tmp, tmp / "agent-status", f"rdma-cni-e2e-agent-{os.getpid()}")
    sid = ""
    try:
        sid = cd.run_pod("agented", "uid-agented", ASK)
        netns = cd.netns_of(sid)
        assert box.view(netns).startswith("regular empty file")  # the fault's premise
        client = CriClient(str(cd.sock))
        assert client.sandboxes()[sid] == "ready"
        assert client.sandbox_state("0" * 64) is None
        store = Store(str(data))
        states = store.list_states()
        assert [s.key.container_id for s in states if s.key] == [sid]  # sandbox ID == CNI ID
        stale = AttachmentKey("vpc-cni", "f" * 64, "eth0")
        store.put_state(stale, make_state(READY, "shared-multi", "/var/run/netns/cni-gone",
                                          "e2e/old", "uid-old", 20000, []))
        for expected in (["f" * 64, sid], [sid], [sid]):
            run = box.agent_once(cri_socket="containerd.sock")
            assert run.returncode == 0, run.stderr
            assert sorted(s.key.container_id for s in store.list_states() if s.key) == sorted(
                expected)
            time.sleep(0.3)
        status = json.loads(box.status_file.read_text())
        assert status["viewSuspect"] is False, status["reasons"]
    finally:
        box.stop()
        if sid:
            cd.stop_pod(sid)
            cd.remove_pod(sid)
