"""The agent without a runtime socket, in a PID namespace of its own (the DaemonSet's
pod has no hostPID): its ``/proc`` shows none of the node's pod processes, so "no
process holds the netns" is no evidence. A live pod whose netns file was unmounted
from the netns directory (its processes alive) must be kept, and the view reported
suspect; the same agent in the host's PID namespace sees the process and keeps the
pod too, and releases a pod whose netns really went.

The node: a private mount namespace holding a shared bind of a netns directory, pods
that are ``unshare --net sleep`` processes with their netns bound there, READY records
written through the store with the origin ADD records. The agent runs from the source
tree, under ``unshare --pid --fork --mount-proc`` (a PID namespace of its own, the mount
propagating from the node's) or straight in the node's mount namespace. The oracle is
the store on disk and the status file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cnirunner import PYTHON, REPO

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

WRITE = """
import json, sys
from ipaddress import IPv4Address, IPv4Interface
from rdma_cni.node.origin import origin_of
from rdma_cni.store.core import Store
from rdma_cni.store.state import make_state
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import READY
from rdma_cni.vocab.plan import IfacePlan
store = Store(sys.argv[1])
for i, path in enumerate(json.loads(sys.argv[2])):
    key = AttachmentKey("rdma", f"{i + 1}" * 64, "eth0")
    ip = f"198.51.100.{i + 2}"
    plan = IfacePlan(k=0, name="eth1", tmp="rdtmp0", nic="rnic0", kind="macvlan",
                     mtu=1500, table=100, addresses=(IPv4Interface(f"{ip}/28"),))
    assert store.reserve_ip("198.51.100.0/28", IPv4Address(ip), key, "eth1")
    store.put_state(key, make_state(READY, "shared-multi", path, f"default/pod{i + 1}",
                                    f"uid-{i + 1}", 20000, [plan], {}, origin_of(path),
                                    conf_name="rdma"))
"""


def _entered(pid: int, ns: str) -> None:
    """Wait until process ``pid`` is in a namespace ``ns`` other than this process's."""
    deadline = time.monotonic() + 30
    while os.readlink(f"/proc/{pid}/ns/{ns}") == os.readlink(f"/proc/self/ns/{ns}"):
        assert time.monotonic() < deadline, f"{pid} never left the {ns} namespace"
        time.sleep(0.02)


class Node:
    """A private mount namespace (held by a sleeping process) with a shared netns dir."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.netns_dir = tmp / "netns"
        self.netns_dir.mkdir()
        self.data = tmp / "data"
        self.pods: list[subprocess.Popen[bytes]] = []
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                                        "sleep", "600"])
        _entered(self.holder.pid, "mnt")
        self.inside("mount", "--bind", str(self.netns_dir), str(self.netns_dir))
        self.inside("mount", "--make-shared", str(self.netns_dir))
        self.conf = tmp / "conf.json"
        self.conf.write_text(json.dumps({"type": "rdma-cni", "cniConfName": "rdma",
                                         "mode": "shared-multi", "dataDir": str(self.data)}))
        self.status = tmp / "status.json"

    def inside(self, *argv: str) -> subprocess.CompletedProcess[str]:
        # entering a mount namespace moves to its root: the source tree is named
        run = subprocess.run(["nsenter", "-t", str(self.holder.pid), "-m", *argv],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
        assert run.returncode == 0, run
        return run

    def add_pods(self, n: int) -> list[str]:
        paths = []
        for i in range(n):
            pod = subprocess.Popen(["unshare", "--net", "sleep", "600"])
            self.pods.append(pod)
            path = self.netns_dir / f"pod{i + 1}"
            path.touch()
            _entered(pod.pid, "net")
            self.inside("mount", "--bind", f"/proc/{pod.pid}/ns/net", str(path))
            paths.append(str(path))
        self.inside(str(PYTHON), "-c", WRITE, str(self.data), json.dumps(paths))
        return paths

    def agent(self, own_pid_ns: bool) -> subprocess.CompletedProcess[str]:
        wrap = ["unshare", "--pid", "--fork", "--mount-proc", "--propagation", "slave"] \
            if own_pid_ns else []
        return self.inside(*wrap, str(PYTHON), "-m", "rdma_cni", "agent", "--config",
                           str(self.conf), "--once", "--interval", "0.1", "--cri-socket", "",
                           "--status-file", str(self.status), "--node-name", "node-a")

    def states(self) -> list[str]:
        return sorted(json.loads(p.read_text())["pod"]
                      for p in (self.data / "state").glob("*.json"))

    def close(self) -> None:
        for p in [*self.pods, self.holder]:
            p.kill()
            p.wait()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    try:
        yield n
    finally:
        n.close()


def test_an_agent_without_the_hosts_pids_keeps_a_live_pod_whose_file_went(node: Node) -> None:
    """Reproduced: pass 2 released pod1 (its sleep alive, its netns file unmounted), the
    status file saying ``viewSuspect: false``."""
    paths = node.add_pods(3)
    node.inside("umount", paths[0])  # pod1's file goes, its process stays
    for _ in range(3):
        node.agent(own_pid_ns=True)
        time.sleep(0.15)
    assert node.states() == ["default/pod1", "default/pod2", "default/pod3"]
    status = json.loads(node.status.read_text())
    assert status["released"] == 0 and status["viewSuspect"] is True, status
    assert any("PID namespace" in r for r in status["reasons"]), status["reasons"]


def _unreadable() -> int:
    """Processes whose netns this root cannot read (here, the sandbox's process 1)."""
    out = 0
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            os.stat(f"/proc/{pid}/ns/net")
        except PermissionError:
            out += 1
        except OSError:
            pass
    return out


def test_an_agent_in_the_hosts_pid_namespace_sees_the_process(node: Node) -> None:
    """The same view from the host's PID namespace: pod1's process holds its netns (kept,
    nothing suspect about it); pod3's netns went with its process: released after two
    passes when every process's netns could be read, else kept and the reason given."""
    paths = node.add_pods(3)
    node.inside("umount", paths[0])
    node.pods[2].kill()
    node.pods[2].wait()
    node.inside("umount", paths[2])
    for _ in range(3):
        node.agent(own_pid_ns=False)
        time.sleep(0.15)
    status = json.loads(node.status.read_text())
    if _unreadable():
        assert node.states() == ["default/pod1", "default/pod2", "default/pod3"]
        assert [r for r in status["reasons"] if "pod1" in r or "pod2" in r] == []
        assert any("pod3" in r and "could not be read" in r for r in status["reasons"]), \
            status["reasons"]
    else:
        assert node.states() == ["default/pod1", "default/pod2"]
        assert status["viewSuspect"] is False, status["reasons"]
