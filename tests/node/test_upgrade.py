"""Upgrade, rollback and uninstall as an operator does them: docs/packaging.md's
procedures run line by line (tests/node/cluster.py: a one-node stand-in for kubectl)
against the node running the previous release (its own manifests and its image, built
from its revision by scripts/release-image.sh). An RDMA pod runs throughout; pods start
while the DaemonSet rolls (one is kept running until the end); no pod loses its
interfaces, no address is held twice, and the DELs of pods added by either release work
after the rollback."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import manifests
import pytest
from cluster import OneNode, previous_manifests, procedures
from nodelab import REPO, node_of, shipped_image
from support.proc import wait_for
from workload import NICS, RESOURCE, Workload, Workloads, links, pod_cycle, v4

pytestmark = [pytest.mark.root, pytest.mark.node]
#: the release before this one: the last commit before this release's manifests and
#: version (0.1.0's line); its image is built from there with its own scripts
PREVIOUS = "e82a7ad"
PREVIOUS_IMAGE = "localhost/rdma-cni:0.1.0"  # what its manifests name
STATE: dict[str, Any] = {}


def release_image(rev: str) -> str:
    out = subprocess.run([str(REPO / "scripts" / "release-image.sh"), rev], capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, f"scripts/release-image.sh {rev}: {out.stderr[-3000:]}"
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def rig() -> Iterator[dict[str, Any]]:
    with node_of("base", play=False) as node:
        previous = release_image(PREVIOUS)
        pods = Workloads(node.cd, node.kubelet, node.plugin_socket, node.image, RESOURCE)
        live: dict[str, Workload] = {}

        def drain() -> None:  # the kubelet deleting every workload pod of the node
            for w in list(live.values()):
                pods.stop(w)
            live.clear()

        cluster = OneNode(node, {PREVIOUS_IMAGE: previous, shipped_image(): node.image}, drain)
        cluster.apply(previous_manifests(PREVIOUS))  # the previous release runs on the node
        cluster.wait_ready()
        pods.wait_capacity()
        yield {"node": node, "pods": pods, "cluster": cluster, "live": live,
               "steps": procedures((REPO / "docs" / "packaging.md").read_text())}


def _subst(rig: dict[str, Any]) -> dict[str, str]:
    return {"node": manifests.NODE_NAME, "image": shipped_image()}


class Churn:
    """Pods started one after another while a procedure runs: each gets eth1 (an
    address of its NIC's subnet) or the test fails; while each runs, the addresses of the
    pods kept running are read, to find one held twice at the same time."""

    def __init__(self, rig: dict[str, Any], tag: str) -> None:
        self.rig, self.tag = rig, tag
        self.results: list[tuple[bool, str]] = []
        self.held: list[tuple[str, str, dict[str, str]]] = []  # (pod, address, kept then)
        self.at_exit = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        node, i = self.rig["node"], 0
        while not self.stop.is_set():
            name, device = f"{self.tag}{i}", f"{list(NICS)[i % 2]}@{i % 8 + 2}"
            ok, detail = pod_cycle(node.cd, node.kubelet, name, device, hold=self._hold)
            self.results.append((ok, f"{name}: {detail}"))
            i += 1

    def _hold(self, name: str, addr: str) -> None:
        self.held.append((name, addr, _addresses(self.rig, alive_only=True)))

    def __enter__(self) -> Churn:
        self.thread.start()
        wait_for(lambda: len(self.results) >= 1, "a pod before the roll", 120)
        return self

    def __exit__(self, *exc: object) -> None:
        wait_for(lambda: len(self.results) >= self.at_exit + 2, "pods after the roll", 180)
        self.stop.set()
        self.thread.join(timeout=180)

    def mark(self) -> None:
        self.at_exit = len(self.results)


def _roll(rig: dict[str, Any], step: str, tag: str) -> Churn:
    """A documented procedure with pods starting throughout (and one kept running)."""
    cluster, pods, live = rig["cluster"], rig["pods"], rig["live"]
    churn = Churn(rig, tag)
    pods.wait_capacity()
    admitted = pods.allocate(1)  # the kubelet admitted it before the roll began
    with churn:
        kept = threading.Thread(target=lambda: live.__setitem__(
            f"{tag}-kept", pods.start(f"{tag}-kept", allocated=admitted)), daemon=True)
        kept.start()  # its sandbox starts while the DaemonSet rolls, and it is kept
        cluster.run(rig["steps"][step], _subst(rig))
        kept.join(timeout=180)
        churn.mark()
    assert f"{tag}-kept" in live, f"the pod started during the {step} did not start"
    failed = [r for r in churn.results if not r[0]]
    assert not failed, failed
    return churn


def _addresses(rig: dict[str, Any], alive_only: bool = False) -> dict[str, str]:
    """Pod -> the address of its eth1, for every RDMA pod kept running (``alive_only``:
    skip one being removed meanwhile)."""
    out = {}
    for name, w in list(rig["live"].items()):
        try:
            pod = links(rig["node"].cd.netns_of(w.sandbox))
        except Exception:
            if alive_only:
                continue
            raise
        assert "eth1" in pod, (name, sorted(pod))
        (out[name],) = v4(pod["eth1"])
    return out


def _no_address_twice(rig: dict[str, Any], churn: Churn) -> None:
    kept = _addresses(rig)
    assert len(set(kept.values())) == len(kept), kept
    for name, addr, alive in churn.held:  # never a kept pod's address while both ran
        assert addr not in alive.values(), (name, addr, alive)
    assert churn.held and any(alive for _, _, alive in churn.held)
    for addr in kept.values():
        assert ipaddress.ip_interface(addr).network in {
            ipaddress.ip_interface(a).network for a, _ in NICS.values()}


def _ls(rig: dict[str, Any]) -> str:
    return str(rig["cluster"].output[-1])


def test_the_previous_release_runs_with_a_pod(rig: dict[str, Any]) -> None:
    node = rig["node"]
    link = os.readlink(node.cni_bin / "rdma-cni")
    assert link == "rdma-cni.d/rdma-cni-front", link  # the previous release's own layout
    w = rig["pods"].start("running")
    rig["live"]["running"] = w
    STATE["running"] = _addresses(rig)["running"]


def test_upgrade_as_documented(rig: dict[str, Any]) -> None:
    churn = _roll(rig, "upgrade", "up")
    node = rig["node"]
    target = os.readlink(node.cni_bin / "rdma-cni")
    assert target.startswith("rdma-cni.versions/0.2.0-"), target  # this release's tree
    assert _addresses(rig)["running"] == STATE["running"]  # kept its interface
    _no_address_twice(rig, churn)
    assert "running" in _ls(rig) and "up-kept" in _ls(rig), _ls(rig)
    entry = json.loads((node.root / "run/rdma-cni/config.json").read_text())
    assert entry["logFile"].endswith("/var/log/rdma-cni/rdma-cni.log")  # this release's


def test_rollback_as_documented(rig: dict[str, Any]) -> None:
    churn = _roll(rig, "rollback", "back")
    node = rig["node"]
    assert os.readlink(node.cni_bin / "rdma-cni") == "rdma-cni.d/rdma-cni-front"
    assert _addresses(rig)["running"] == STATE["running"]
    _no_address_twice(rig, churn)
    entry = json.loads((node.root / "run/rdma-cni/config.json").read_text())
    assert entry["logFile"].endswith("/var/log/rdma-cni.log")  # the previous release's config
    assert "running" in _ls(rig) and "back-kept" in _ls(rig), _ls(rig)


def test_dels_after_the_rollback(rig: dict[str, Any]) -> None:
    """The previous release undoes the pods of both: the one it added and the one this
    release added during the upgrade."""
    node, pods, live = rig["node"], rig["pods"], rig["live"]
    for name in ("running", "up-kept"):
        netns = node.cd.netns_of(live[name].sandbox)
        pods.stop(live.pop(name))
        assert not os.path.exists(netns) or "eth1" not in links(netns)
    files = [p.read_text() for p in node.data.rglob("*") if p.is_file() and p.name != "lock"]
    assert not [f for f in files if "uid-running" in f or "uid-up-kept" in f]


def test_upgrade_again_then_uninstall_as_documented(rig: dict[str, Any]) -> None:
    node, cluster = rig["node"], rig["cluster"]
    _roll(rig, "upgrade", "again")
    cluster.run(rig["steps"]["uninstall"], _subst(rig))
    listed = cluster.output[-2].strip().splitlines()  # `rdma-cni ls` after the drain
    assert listed[:1] == [listed[0]] and listed[0].startswith("POD ") and len(listed) == 1, \
        listed  # the header alone: no attachment left
    conflist = json.loads((node.cni_conf / "10-vpc-cni.conflist").read_text())
    assert [p["type"] for p in conflist["plugins"]] == ["bridge"]
    assert not [p.name for p in node.cni_bin.iterdir() if p.name.startswith(("rdma-cni",
                                                                            "nccl_env"))]
    for gone in ("var/lib/cni/rdma-cni", "var/log/rdma-cni", "run/rdma-cni"):
        assert not (node.root / gone).exists(), gone
    assert not node.pod_id and not rig["live"]
    plain = node.cd.run_pod("plain", "uid-plain")  # the primary's network alone
    pod = links(node.cd.netns_of(plain))
    assert sorted(pod) == ["eth0", "lo"]
    node.cd.stop_pod(plain)
    node.cd.remove_pod(plain)
