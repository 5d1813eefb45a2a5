"""Issue 14 item 1: the agent, in a container whose /var/run/netns does not propagate,
must not release a live pod; it releases only what the runtime (CRI) says is gone, on
consecutive passes, and otherwise only reports (status file, metric, Event).

The pod's ADD runs through the built binary (in-process, and through the resident
server), the agent through the built bundle in a real podman container started
before the pod; the runtime is a fake CRI server speaking the real runtime.v1
methods. The oracle is the store on disk and the kernel (``ip -n pod addr``).
``RDMA_CNI_AGENT_BUNDLE=<older dist/rdma-cni>`` runs the agent half on another build
(today's code released the live pod on its first pass: the first test fails there).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cnirunner import BINARY, PYTHON, Chain, Node, plugin_conf, rdma_blocks
from support.agent import (
    AgentContainer,
    needs_exec,
    plugin_binary,
    podman_usable,
    shared_dir,
)
from support.fakes.cri import FakeCri
from support.resident import Serve

from rdma_cni.kube.agent.plan import PENDING_GRACE
from rdma_cni.proto import cri_v1_pb2 as cri_pb

pytestmark = [needs_exec, pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
              pytest.mark.skipif(bool(podman_usable()), reason=podman_usable() or "-")]

SUBNET = "198.51.100.1/26"


class Site:
    """A node netns with one stand-in NIC, the fake runtime, the agent container."""

    def __init__(self, tmp: Path, resident: bool,
                 netns: tuple[str, str] = ("/run/netns", "rw")) -> None:
        self.tmp = tmp
        self.node = Node()
        try:
            self._build(tmp, resident, netns)
        except BaseException:
            self.close()  # nothing made here outlives a failed set-up
            raise

    def _build(self, tmp: Path, resident: bool, netns: tuple[str, str]) -> None:
        self.node.add_nic("rnic0", SUBNET)
        self.data_dir = tmp / "data"
        self.data_dir.mkdir()
        (tmp / "cri").mkdir()
        (tmp / "status").mkdir()
        self.cri = FakeCri(str(tmp / "cri" / "cri.sock")).start()
        self.cri.sandboxes["agent-pod"] = cri_pb.SANDBOX_READY  # the DaemonSet's own pod
        self.serve = Serve(self.node.ns, tmp / "r.sock", tmp / "serve.log",
                           [plugin_binary()]) if resident else None
        conf = plugin_conf("shared-multi", ["rnic0"], tmp,
                           residentSocket=str(tmp / "r.sock") if resident else "")
        self.chain = Chain(conf, node_ns=self.node.ns, binary=plugin_binary())
        self.agent = AgentContainer(tmp, {"type": "rdma-cni", "dataDir": str(self.data_dir)},
                                    self.data_dir, tmp / "cri", tmp / "status",
                                    f"rdma-cni-agent-{self.node.prefix}", netns=netns)

    def pod(self, cid: str, env: dict[str, str] | None = None) -> tuple[str, str]:
        """A pod made after the agent's container started; (netns path, its address)."""
        pod = self.node.add_pod()
        run = self.chain.add(cid, pod.path, rdma_blocks(1), pod=cid[:8], env=env)
        assert run.rc == 0, run
        assert self.serve is None or self.serve.served("ADD") >= 1
        self.cri.sandboxes[cid] = cri_pb.SANDBOX_READY
        return pod.path, pod.addrs("eth1")[0]

    def states(self) -> list[str]:
        return sorted(json.loads(p.read_text())["key"]["containerID"]
                      for p in (self.data_dir / "state").glob("*.json"))

    def age(self) -> None:
        """Every ready record as if ADD wrote it PENDING_GRACE seconds ago: the agent
        gives a younger one the time the runtime takes to list the sandbox."""
        for path in (self.data_dir / "state").glob("*.json"):
            rec = json.loads(path.read_text())
            assert rec["written"]["boottime"] > 0, rec
            rec["written"]["boottime"] -= PENDING_GRACE
            path.write_text(json.dumps(rec))

    def reserved(self) -> list[str]:
        files = [*(self.data_dir / "addrs").glob("*"), *(self.data_dir / "ips").glob("*/*")]
        return sorted(p.name for p in files if not p.name.startswith("."))

    def close(self) -> None:
        agent = getattr(self, "agent", None)
        if agent:
            agent.stop()
        for key in list(getattr(self, "chain", Chain({})).cache):
            self.chain.delete(key[0])
        serve = getattr(self, "serve", None)
        if serve:
            serve.stop()
        cri = getattr(self, "cri", None)
        if cri:
            cri.stop()
        self.node.close()


@pytest.fixture(params=["in-process", "resident"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    assert BINARY.exists() and PYTHON.exists(), "run scripts/build.sh first"
    s = Site(tmp_path, request.param == "resident")
    try:
        yield s
    finally:
        s.close()


def test_live_pod_survives_an_agent_whose_netns_view_does_not_propagate(site: Site) -> None:
    netns, addr = site.pod("a" * 64)
    # The fault's premise: inside the container the live netns is a plain empty file.
    assert site.agent.view(netns).startswith("regular empty file")
    _kept_without_runtime(site, "a" * 64, addr, "no propagation")


def _kept_without_runtime(site: Site, cid: str, addr: str, reason: str) -> None:
    """Three agent passes with no runtime socket at all (the path view is all there is)
    release nothing and report the view suspect, for ``reason``."""
    for _ in range(3):
        run = site.agent.agent_once(cri=False)
        assert run.returncode == 0, run.stderr
        time.sleep(0.3)
    assert site.states() == [cid], "the agent released a live pod"
    assert site.reserved() == [addr.split("/")[0]]
    status = site.agent.status()
    assert status["viewSuspect"] is True and status["released"] == 0
    assert any(reason in r for r in status["reasons"]), status["reasons"]


def test_runtime_list_decides_and_gone_needs_two_passes(site: Site) -> None:
    _live_ns, live_addr = site.pod("b" * 64)
    gone_ns, _ = site.pod("c" * 64)
    # The second pod's sandbox goes away and its DEL is lost.
    site.node.delete_pod(next(p for p in site.node.pods if p.path == gone_ns))
    del site.cri.sandboxes["c" * 64]
    site.chain.cache.pop(("c" * 64, "eth0"))
    run = site.agent.agent_once()
    assert run.returncode == 0, run.stderr
    assert site.states() == ["b" * 64, "c" * 64], "released on the first pass"
    time.sleep(0.3)
    # ADD wrote the ready record just now: the runtime may still be starting the sandbox
    assert site.agent.agent_once().returncode == 0
    assert site.states() == ["b" * 64, "c" * 64], "released a ready record just written"
    site.age()
    run = site.agent.agent_once()
    assert run.returncode == 0, run.stderr
    assert site.states() == ["b" * 64]
    assert site.reserved() == [live_addr.split("/")[0]]
    status = site.agent.status()
    assert status["viewSuspect"] is False and status["released"] == 1, status
    assert "status" in site.cri.calls  # the release was confirmed one by one


def test_unreachable_runtime_releases_nothing_and_reports(site: Site) -> None:
    gone_ns, addr = site.pod("d" * 64)
    site.node.delete_pod(next(p for p in site.node.pods if p.path == gone_ns))
    site.chain.cache.pop(("d" * 64, "eth0"))
    site.cri.broken = True
    for _ in range(3):
        assert site.agent.agent_once().returncode == 0
        time.sleep(0.3)
    assert site.states() == ["d" * 64] and site.reserved() == [addr.split("/")[0]]
    status = site.agent.status()
    assert status["viewSuspect"] is True
    assert any("UNAVAILABLE" in r for r in status["reasons"]), status["reasons"]
    site.cri.broken = False
    site.cri.sandboxes.pop("d" * 64, None)
    site.age()
    for _ in range(2):
        assert site.agent.agent_once().returncode == 0
        time.sleep(0.3)
    assert site.states() == [] and site.reserved() == []


def test_runtime_listing_nothing_at_all_is_no_evidence(site: Site) -> None:
    """A runtime socket that lists no sandbox at all (not even the agent's own pod) is
    the wrong runtime, not proof that every pod is gone."""
    _, addr = site.pod("f" * 64)
    site.cri.sandboxes.clear()
    for _ in range(3):
        assert site.agent.agent_once().returncode == 0
        time.sleep(0.3)
    assert site.states() == ["f" * 64] and site.reserved() == [addr.split("/")[0]]
    status = site.agent.status()
    assert status["viewSuspect"] is True
    assert any("lists no sandbox" in r for r in status["reasons"]), status["reasons"]


def test_state_of_another_node_is_left_alone(site: Site) -> None:
    """Two nodes sharing a dataDir: node B's attachment, whose sandbox this node's
    runtime does not have, is neither released by this node's agent nor by its GC."""
    node_b = Chain({**site.chain.plugin, "residentSocket": ""}, node_ns=site.node.ns,
                   binary=plugin_binary(), cni_version="1.1.0",
                   env={"RDMA_CNI_NODE_ID": "node-b/other-host"})
    pod = site.node.add_pod()
    assert node_b.add("e" * 64, pod.path, rdma_blocks(1), pod="e" * 8).rc == 0
    addr = pod.addrs("eth1")[0]
    # this node's runtime has no such sandbox (it is node B's)
    for _ in range(3):
        assert site.agent.agent_once().returncode == 0
        time.sleep(0.3)
    assert site.states() == ["e" * 64] and site.reserved() == [addr.split("/")[0]]
    status = site.agent.status()
    assert status["foreignRecords"] == 1 and status["viewSuspect"] is True
    this_node = Chain(dict(node_b.plugin), node_ns=site.node.ns, binary=plugin_binary(),
                      cni_version="1.1.0")
    assert this_node.gc([]).rc == 0  # this node's GC, naming no valid attachment at all
    assert site.states() == ["e" * 64]
    assert node_b.delete("e" * 64).rc == 0  # DEL on the node that made it releases it
    assert site.states() == [] and site.reserved() == []


# Issue 26 item 11: /var/run/netns in the agent's container propagates, but it is a bind
# of the wrong (empty) directory, and there is no runtime socket. Propagation alone does
# not show the directory is the runtime's: nothing may be released on that view.
@pytest.fixture
def wrong_dir_site(tmp_path: Path) -> Iterator[Site]:
    with shared_dir(tmp_path / "empty-netns") as empty:
        s = Site(tmp_path, resident=False, netns=(str(empty), "rw,rshared"))
        try:
            yield s
        finally:
            s.close()


def test_live_pod_survives_a_propagated_bind_of_the_wrong_netns_dir(
        wrong_dir_site: Site) -> None:
    site = wrong_dir_site
    netns, addr = site.pod("a" * 64)
    # the premise: the mount propagates, yet the live netns is not there at all
    assert site.agent.view(netns) == ""
    assert site.agent.view("/var/run/netns").startswith("directory")
    _kept_without_runtime(site, "a" * 64, addr, "nothing shows it is the runtime's")


def test_a_propagated_bind_of_the_runtimes_netns_dir_needs_the_hosts_pids(
        tmp_path: Path) -> None:
    """The same agent, /var/run/netns a propagated bind of the runtime's own directory
    (the directory ADD saw), no runtime socket: a pod whose netns is gone is still kept,
    because in the container's own PID namespace no process of the node is seen, so
    nothing shows that none holds the netns; the status says so. (Before, it was released
    after two passes, as was a live pod whose netns file alone was unmounted:
    tests/faults/test_fault_agent_pidns.py.)"""
    site = Site(tmp_path, resident=False, netns=("/run/netns", "rw,rshared"))
    try:
        site.pod("b" * 64)
        gone_ns, _ = site.pod("c" * 64)
        site.node.delete_pod(next(p for p in site.node.pods if p.path == gone_ns))
        site.chain.cache.pop(("c" * 64, "eth0"))
        site.age()
        for _ in range(3):
            run = site.agent.agent_once(cri=False)
            assert run.returncode == 0, run.stderr
            time.sleep(0.3)
        assert site.states() == ["b" * 64, "c" * 64]
        status = site.agent.status()
        assert status["released"] == 0 and status["viewSuspect"] is True
        assert [r for r in status["reasons"] if "PID namespace" in r] == \
            [r for r in status["reasons"] if "c" * 12 in r], status["reasons"]
        assert not any("runtime's netns directory" in r for r in status["reasons"])
    finally:
        site.close()
