"""A failed ADD's rollback never strands an exclusive NIC.

On its way into the pod the NIC passes through a private netns (renamed and marked
there). When the move on into the pod failed, the rollback took it home from there
without the recovery DEL has: with every name it could take on the host taken, ADD
answered with that failure instead of its own (code 5), and the NIC stayed in the
private netns, destroyed with it (a veth; a physical NIC fell to the init netns under
the pod's name), its record purged. Now it goes into the pod, marked, where the DEL the
runtime sends after a failed ADD takes it home (11 while it cannot, the state kept).
A NIC that came home under a fallback name (its own taken meanwhile), from the private
netns or from the pod, kept it with no record: now the state is kept and that DEL gives
it its own name back once free.

The test stops ADD (SIGSTOP) while the NIC is in the private netns
(``RDMA_CNI_TEST_STOP_IN_MOVE``), or once it is in the pod before it fails at the next
step boundary, and takes the names meanwhile (``ifb`` links). In-process only: the
datapath is the same on the resident path. Oracle: ``ip -j`` of the node and the pod,
the store on disk; the rig compares the whole node netns with how it was before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cnirunner import (
    PluginRun,
    ip_json,
    k8s_args,
    link_detail,
    plugin_invocation,
    pod_networks,
    rdma_blocks,
    sh,
    vpc_result,
)

pytestmark = pytest.mark.root
#: where ADD stops, and the failure it then reports: in the private netns (the move on
#: into the pod fails: the test gives the pod an eth1), or in the pod (failing next)
SEAMS = {"private-netns": ({"RDMA_CNI_TEST_STOP_IN_MOVE": "1"}, "move rnic0 into"),
         "pod": ({"RDMA_CNI_TEST_STOP_AT_STEP": "2", "RDMA_CNI_TEST_FAIL_AT_STEP": "2"},
                 "injected failure at step 2")}


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _stopped_add(rig, chain, pod, seam: dict[str, str]) -> subprocess.Popen[bytes]:  # type: ignore[no-untyped-def]
    conf = chain.conf(vpc_result(pod.path), pod_networks(rdma_blocks(1)))
    path = rig.tmp / "add.json"
    path.write_text(json.dumps(conf))
    argv, env = plugin_invocation("ADD", container_id="c1", netns=pod.path,
                                  cni_args=k8s_args("default", "p1", "c1"),
                                  node_ns=rig.node.ns, env=seam)
    with path.open("rb") as stdin:
        proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, cwd="/")
    deadline = time.monotonic() + 30
    while not _stopped(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, "ADD never stopped"
        time.sleep(0.02)
    return proc


def _resume(proc: subprocess.Popen[bytes]) -> PluginRun:
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    return PluginRun(proc.returncode, json.loads(out) if out.strip() else None,
                     err.decode(errors="replace"))


def _fallback(mac: str) -> str:  # rdma_cni.datapath.homename.fallback_name of a veth
    return "rdma" + mac.replace(":", "")[-11:]


def _with_mac(ns: str, mac: str) -> list[dict[str, Any]]:
    return [lk for lk in ip_json(ns, "link", "show") if lk["address"] == mac]


def _kept(rig) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    [state] = (Path(rig.data_dir) / "state").glob("*.json")
    assert "nics/rnic0" in rig.files()
    return json.loads(state.read_text())  # type: ignore[no-any-return]


def _take(rig, names: list[str]) -> None:  # type: ignore[no-untyped-def]
    for name in names:
        sh("ip", "-n", rig.node.ns, "link", "add", name, "type", "ifb")


def _free(rig, names: list[str]) -> None:  # type: ignore[no-untyped-def]
    for name in names:
        sh("ip", "-n", rig.node.ns, "link", "del", name)


def _failed_add(rig, where: str, taken: Callable[[str, int, int], list[str]]):  # type: ignore[no-untyped-def]
    """ADD of rnic0 stopped at the seam ``where``; meanwhile the pod gets an eth1 (from the
    private netns) and the node links of the names ``taken(mac, index)`` give (``index``:
    the NIC's where it leaves from). ADD has failed with its own error: the chain, pod,
    MAC, that index and the names taken."""
    rig.nic("rnic0")
    nic = rig.node.links()["rnic0"]
    pod = rig.pod()
    chain = rig.chain("exclusive", residentSocket="")
    seam, failure = SEAMS[where]
    proc = _stopped_add(rig, chain, pod, seam)
    index = nic["ifindex"]
    if where == "private-netns":
        sh("ip", "-n", pod.name, "link", "add", "eth1", "type", "ifb")
    else:  # the last resort is named after its index where it leaves from: the pod's
        index = link_detail(pod.name, "eth1")["ifindex"]
    names = taken(nic["address"], index)
    _take(rig, names)
    run = _resume(proc)
    assert run.rc == 1 and failure in run.out["msg"], run
    return chain, pod, nic["address"], index, names


@pytest.mark.parametrize("where", list(SEAMS))
def test_a_nic_with_every_host_name_taken_goes_into_the_pod_for_del(rig, where: str) -> None:  # type: ignore[no-untyped-def]
    chain, pod, mac, index, blockers = _failed_add(
        rig, where, lambda mac, index: ["rnic0", _fallback(mac), f"rdmaif{index}"])
    # in the pod, marked, where DEL finds it by its identity; the state kept
    [back] = _with_mac(pod.name, mac)
    assert back["ifname"] != "eth1" or where == "pod"
    assert link_detail(pod.name, back["ifname"])["ifalias"].startswith("rdma-cni:")
    assert not _with_mac(rig.node.ns, mac)
    assert _kept(rig)["interfaces"][0]["nic"] == "rnic0"

    if back["ifindex"] != index:  # DEL's last resort is named after its index in the pod
        blockers.append(f"rdmaif{back['ifindex']}")
        _take(rig, blockers[-1:])
    run = chain.delete("c1", pod.path, blocks=rdma_blocks(1))
    assert run.code == 11, run
    _free(rig, blockers)
    run = chain.delete("c1", pod.path, blocks=rdma_blocks(1))
    assert run.rc == 0, run
    assert rig.node.links()["rnic0"]["address"] == mac
    assert not _with_mac(pod.name, mac)
    assert rig.files() == []


@pytest.mark.parametrize("where", list(SEAMS))
def test_a_nic_home_under_a_fallback_name_keeps_the_state_for_del(rig, where: str) -> None:  # type: ignore[no-untyped-def]
    chain, pod, mac, _, _ = _failed_add(rig, where, lambda mac, index: ["rnic0"])
    [back] = _with_mac(rig.node.ns, mac)
    assert back["ifname"] == _fallback(mac)
    assert _kept(rig)["interfaces"][0]["nic"] == "rnic0"

    _free(rig, ["rnic0"])
    run = chain.delete("c1", pod.path, blocks=rdma_blocks(1))
    assert run.rc == 0, run
    # its own name, addresses and routes: the rig compares the node with its baseline
    assert rig.node.links()["rnic0"]["address"] == mac
    assert rig.files() == []
