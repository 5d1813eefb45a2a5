"""docs/getting-started.md, section 8 ("Prove it"), run as written: every ``kubectl`` line
of its block, with conf/rdma-cni-verify.yaml as shipped, on a two-node stand-in
cluster in the VM (tests/vm/noderig.py: two node netns, a switch, the host plugin as
``install`` lays it out), until ``rdma-cni verify`` passes between the two pods.

What the stand-in does for each command (``StandIn``), in place of the API server, the
scheduler, the kubelet and the cluster DNS:
- ``apply -f conf/rdma-cni-verify.yaml``: each Pod is placed on a node its
  ``podAntiAffinity`` allows (one pod per node), its annotation's blocks and its
  ``vke.volcengine.com/rdma`` limit checked to agree (the doc's rule), the pod netns made
  with eth0 on the primary network and the plugin's ADD run with the annotation; the
  RoCE function the device plugin hands the pod is an rxe on each of its RDMA
  interfaces (noderig's ``pod_rxe``); the container's ``command`` runs in the pod netns,
  ``rdma-cni`` being the built binary the node image carries. The headless Service's
  name resolves in the pods to the address of the pod its selector picks
  (``/etc/netns/<pod>/hosts``, which ``ip netns exec`` puts over /etc/hosts).
- ``wait --for=jsonpath='{.status.phase}'=Succeeded pod/P --timeout=Ns``: until P's
  command exits; Succeeded is exit 0 (``restartPolicy: Never``), anything else fails.
- ``logs P``: P's stdout and stderr.
- ``delete -f``: the commands stopped, the plugin's DEL of each pod, the pods removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from noderig import TwoNodes, rdma_netns_mode, rxe_serves_netns, two_nodes

pytestmark = [pytest.mark.vm, pytest.mark.root]
REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "getting-started.md"
#: the marked block: ``<!-- getting-started: verify ... -->`` then a ```sh block
MARKED = re.compile(r"<!-- getting-started: verify\b[^>]*-->\s*```sh\n(.*?)```", re.S)
ANNOTATION = "k8s.volcengine.com/pod-networks"
RESOURCE = "vke.volcengine.com/rdma"


def doc_block() -> str:
    m = MARKED.search(DOC.read_text())
    assert m, f"{DOC.name} lost its block marked <!-- getting-started: verify -->"
    return m.group(1)


class StandIn:
    """``kubectl`` for the verify pods on two stand-in nodes (module docstring)."""

    def __init__(self, rig: TwoNodes, binary: list[str]) -> None:
        self.rig, self.binary = rig, binary
        self.pods: dict[str, dict[str, Any]] = {}  # name -> pod, node, process, labels
        self.services: dict[str, dict[str, str]] = {}  # name -> selector
        self.output: list[str] = []
        self.ended: dict[str, int | None] = {}  # pod -> exit status when deleted

    def run(self, block: str) -> None:
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line:
                argv = shlex.split(line)
                assert argv[0] == "kubectl", f"not a kubectl command: {line}"
                {"apply": self.apply, "wait": self.wait, "logs": self.logs,
                 "delete": self.delete}[argv[1]](argv[2:])

    # -- kubectl apply -f -----------------------------------------------------------
    def apply(self, args: list[str]) -> None:
        assert args[0] == "-f", args
        docs = [d for d in yaml.safe_load_all((REPO / args[1]).read_text()) if d]
        for d in docs:
            if d["kind"] == "Service":
                assert d["spec"].get("clusterIP") == "None", "only headless Services"
                self.services[d["metadata"]["name"]] = d["spec"]["selector"]
        for d in docs:
            if d["kind"] == "Pod":
                self._start(d)

    def _node_for(self, pod: dict[str, Any]) -> Any:
        """The first node no pod its anti-affinity names runs on."""
        rules = ((pod["spec"].get("affinity") or {}).get("podAntiAffinity") or {}) \
            .get("requiredDuringSchedulingIgnoredDuringExecution") or []
        taken = set()
        for rule in rules:
            assert rule["topologyKey"] == "kubernetes.io/hostname", rule
            want = rule["labelSelector"]["matchLabels"]
            taken |= {p["node"].name for p in self.pods.values()
                      if want.items() <= p["labels"].items()}
        free = [n for n in self.rig.nodes if n.name not in taken]
        assert free, f"no node for {pod['metadata']['name']}"
        return free[0]

    def _start(self, d: dict[str, Any]) -> None:
        name = d["metadata"]["name"]
        blocks = json.loads(d["metadata"]["annotations"][ANNOTATION])
        (container,) = d["spec"]["containers"]
        limit = int(container["resources"]["limits"][RESOURCE])
        ours = [b for b in blocks if b.get("cniConf", {}).get("name") == "rdma"]
        assert limit == len(ours), f"{name}: {limit} {RESOURCE} for {len(ours)} blocks"
        node = self._node_for(d)
        pod = self.rig.pod(node, blocks, name)
        for k in range(len(ours)):
            self.rig.pod_rxe(pod, f"eth{k + 1}")
        self.pods[name] = {"pod": pod, "node": node, "labels": d["metadata"]["labels"],
                           "doc": d, "proc": None}
        self._resolve_services()
        cmd = container["command"] + container.get("args", [])
        assert cmd[0] == "rdma-cni", cmd
        env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
        self.pods[name]["proc"] = subprocess.Popen(
            ["ip", "netns", "exec", pod.name, *self.binary, *cmd[1:]], env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def _resolve_services(self) -> None:
        """Each headless Service's name -> its selected pod's eth0, in every pod."""
        hosts = ["127.0.0.1 localhost"]
        for svc, selector in self.services.items():
            for p in self.pods.values():
                if selector.items() <= p["labels"].items():
                    hosts.append(f"{self.rig.ip(p['pod'], 'eth0')} {svc}")
        for p in self.pods.values():
            d = Path("/etc/netns") / p["pod"].name
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text("\n".join(hosts) + "\n")

    # -- kubectl wait / logs ----------------------------------------------------------
    def wait(self, args: list[str]) -> None:
        cond = next(a for a in args if a.startswith("--for="))
        assert cond == "--for=jsonpath={.status.phase}=Succeeded", cond
        (target,) = [a for a in args if a.startswith("pod/")]
        timeout = next(a for a in args if a.startswith("--timeout="))
        proc = self.pods[target.removeprefix("pod/")]["proc"]
        seconds = float(timeout.removeprefix("--timeout=").removesuffix("s"))
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{target} did not end within {seconds} s") from None
        assert proc.returncode == 0, f"{target} Failed (exit {proc.returncode}): " \
                                     f"{self._log(target.removeprefix('pod/'))}"

    def _log(self, name: str) -> str:
        p = self.pods[name]
        if "log" not in p:
            out, err = p["proc"].communicate(timeout=300)
            p["log"] = out + err
        return str(p["log"])

    def logs(self, args: list[str]) -> None:
        (name,) = args
        self.output.append(self._log(name))

    # -- kubectl delete -f ------------------------------------------------------------
    def delete(self, args: list[str]) -> None:
        assert args[0] == "-f", args
        for name, p in list(self.pods.items()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                p["proc"].wait(timeout=30)  # the listener ends once its peer is done
            self.ended[name] = p["proc"].poll()
            self.stop(name)
            run = p["node"].chain.delete(name, p["pod"].path)
            assert run.rc == 0, run
            subprocess.run(["ip", "netns", "del", p["pod"].name], check=False)
            del self.pods[name]
        self.services.clear()

    def stop(self, name: str) -> None:
        p = self.pods[name]
        if p["proc"] and p["proc"].poll() is None:
            p["proc"].kill()
            p["proc"].wait()
        shutil.rmtree(Path("/etc/netns") / p["pod"].name, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path: Path, vm_plugin: list[str], vm_binary: list[str]) -> Iterator[StandIn]:
    assert rdma_netns_mode() == "shared"
    with two_nodes(tmp_path, vm_plugin, "shared") as rig:
        stand_in = StandIn(rig, vm_binary)
        try:
            yield stand_in
        finally:
            for name in list(stand_in.pods):
                stand_in.stop(name)


@pytest.mark.skipif(os.environ.get("RDMA_CNI_IN_VM") == "1" and not rxe_serves_netns(),
                    reason="rxe of this kernel serves the initial netns only (Debian 12's "
                    "6.1): no RDMA between pods")
def test_the_getting_started_verify_step_passes_as_written(cluster: StandIn) -> None:
    """Issue 32 item 1: the last step of getting-started, from the shipped manifest to
    ``verify: 1 of 1 rails passed`` in the connecting pod's log; both pods Succeeded,
    and after ``kubectl delete`` nothing is left in the nodes' stores."""
    start = time.monotonic()
    cluster.run(doc_block())
    (log,) = cluster.output
    lines = log.strip().splitlines()
    assert lines[-1] == "verify: 1 of 1 rails passed", log
    assert re.fullmatch(r"eth1 198\.51\.100\.\d+ \S+:1 GID index \d+ -> peer eth1 "
                        r"198\.51\.100\.\d+: ok, latency [\d.]+ us, [\d.]+ MB/s, data checked",
                        lines[-2]), log
    assert lines[0].startswith("NCCL: NCCL_IB_HCA="), log
    assert cluster.ended == {"rdma-cni-verify-listen": 0, "rdma-cni-verify-connect": 0}, \
        cluster.ended
    assert cluster.pods == {} and cluster.rig.clean() == [], cluster.rig.clean()
    assert time.monotonic() - start < 300
