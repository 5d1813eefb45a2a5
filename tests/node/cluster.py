"""A one-node stand-in for ``kubectl``, so the node test runs the operator procedures of
docs/packaging.md (upgrade, rollback, uninstall) as they are written: each ``kubectl``
line of a procedure is parsed and done to the podman-played node the way the API server,
the DaemonSet controller and the kubelet would do it for one node. A line it does not
understand fails the test, so the documented commands and the tested ones cannot drift.

What each command does here:
- ``apply -k DIR`` / ``apply -f PATH``: the objects of the kustomization (``kubectl
  kustomize``) or of the YAML files; ConfigMaps are stored by name (as the API server
  keeps them: an apply that names another ConfigMap leaves the old one), and a DaemonSet
  whose pod template changed is rolled on the node: the old pod deleted, the new one
  played (``updateStrategy: RollingUpdate`` on one node). Every template is a revision.
- ``rollout status daemonset/rdma-cni``: the install finished and every readiness probe
  of the pod passes.
- ``rollout undo daemonset/rdma-cni``: the previous revision's template rolled out again
  (with the ConfigMap it names, as the API server still has it).
- ``label node NODE KEY=VALUE``: the node's label; the DaemonSet's pod is played only on
  a node whose labels its node affinity (or nodeSelector) matches, so a DaemonSet applied
  before the label comes to the node with it. The mode label's value is the played
  pod's mode (``kernel_modes`` substitutes one this kernel cannot run).
- ``exec daemonset/rdma-cni|ds/rdma-cni|POD -c C -- CMD``: ``podman exec`` into the pod's
  container (the command's host paths moved under T as tests/node/manifests.py moves the
  pod's); POD is the played pod's name. An exit code not in ``exit_ok`` fails.
- ``cordon``/``uncordon NODE``: the node's schedulable flag (the test starts no workload
  pod on a cordoned node); ``drain NODE``: every workload pod stopped and removed through
  the CRI (the kubelet's StopPodSandbox, RemovePodSandbox: the CNI DEL runs).
- ``delete -k DIR``: the DaemonSet's pod deleted, the objects forgotten.
- ``debug node/NODE --image=IMAGE -- CMD``: ``podman run`` of the image with the node's
  root (T) at ``/host``, privileged, as ``kubectl debug node`` runs its pod.
"""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import k8srender
import manifests
import yaml
from nodelab import MODE, Node

MODE_LABEL = "vke.node.rdma.mode"
MODES = ("shared", "shared-multi", "shared-host", "exclusive")

Docs = list[dict[str, Any]]


@dataclass
class OneNode:
    node: Node
    images: dict[str, str]                   # manifest image -> local reference
    drain_pods: Callable[[], None]            # the kubelet stopping every workload pod
    cwd: Path = k8srender.REPO
    configmaps: dict[str, dict[str, Any]] = field(default_factory=dict)
    revisions: list[dict[str, Any]] = field(default_factory=list)  # DaemonSet templates
    schedulable: bool = True
    output: list[str] = field(default_factory=list)  # what exec/debug printed
    labels: dict[str, str] = field(default_factory=lambda: {MODE_LABEL: MODE})
    kernel_modes: dict[str, str] = field(default_factory=dict)  # label mode -> played mode
    exit_ok: tuple[int, ...] = (0,)  # exec exit codes the procedure expects

    # -- the procedures ----------------------------------------------------------------
    def run(self, block: str, subst: dict[str, str]) -> None:
        """Every command line of a documented procedure (comments and blank lines skipped;
        ``<placeholders>`` replaced from ``subst``)."""
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            if not line:
                continue
            for key, value in subst.items():
                line = line.replace(f"<{key}>", value)
            argv = shlex.split(line)
            assert argv[0] == "kubectl", f"not a kubectl command: {line}"
            self.kubectl(argv[1:])

    def kubectl(self, argv: list[str]) -> None:
        args = _strip_namespace(argv)
        verb = args[0]
        handler = {"apply": self._apply, "rollout": self._rollout, "exec": self._exec,
                   "cordon": self._cordon, "uncordon": self._cordon, "drain": self._drain,
                   "delete": self._delete, "debug": self._debug,
                   "label": self._label}.get(verb)
        assert handler is not None, f"the stand-in does not know kubectl {verb}"
        handler(args)

    # -- objects -----------------------------------------------------------------------
    def apply(self, docs: Docs) -> None:
        for d in docs:
            if d["kind"] == "ConfigMap":
                self.configmaps[d["metadata"]["name"]] = copy.deepcopy(d)
        (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
        if self.revisions and self.revisions[-1] == ds["spec"]["template"]:
            return  # unchanged template: no rollout
        self.revisions.append(copy.deepcopy(ds["spec"]["template"]))
        self._roll(ds)

    def _roll(self, ds: dict[str, Any]) -> None:
        """One node of a RollingUpdate: the old pod goes, the new one comes (when the
        node's labels let the DaemonSet run here)."""
        self.node.remove()
        if not self._runs_here(ds["spec"]["template"]):
            return
        volumes = ds["spec"]["template"]["spec"]["volumes"]
        names = {v["configMap"]["name"] for v in volumes if "configMap" in v}
        mode = self.labels[MODE_LABEL]
        self.node.play([ds, *(self.configmaps[n] for n in sorted(names))], self.images,
                       mode=self.kernel_modes.get(mode, mode))

    def _runs_here(self, template: dict[str, Any]) -> bool:
        """The template's nodeSelector and required node affinity (Exists, In) against
        the node's labels."""
        spec = template["spec"]
        if any(self.labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            return False
        terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        if not terms:
            return True
        return any(all(self._matches(e) for e in t.get("matchExpressions", [])) for t in terms)

    def _matches(self, expr: dict[str, Any]) -> bool:
        op, key = expr["operator"], expr["key"]
        assert op in ("Exists", "In"), f"the stand-in does not know the operator {op}"
        return key in self.labels and (op == "Exists" or self.labels[key] in expr["values"])

    def _label(self, args: list[str]) -> None:
        assert args[1] == "node" and args[2] == manifests.NODE_NAME, args
        for pair in args[3:]:
            key, value = pair.split("=", 1)
            assert key != MODE_LABEL or value in MODES, f"{value} is not a mode"
            self.labels[key] = value
        if self.revisions and not self.node.pod_id:
            self._roll({"kind": "DaemonSet", "spec": {"template": self.revisions[-1]}})

    def _apply(self, args: list[str]) -> None:
        flag, path = args[1], self.cwd / args[2]
        if flag == "-k":
            self.apply(k8srender.render(path))
        else:
            assert flag == "-f", args
            files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
            self.apply([d for f in files for d in yaml.safe_load_all(f.read_text()) if d])

    def _rollout(self, args: list[str]) -> None:
        action, target = args[1], args[2]
        assert target == "daemonset/rdma-cni", args
        if action == "undo":
            assert len(self.revisions) >= 2, "no earlier revision to go back to"
            previous = self.revisions[-2]
            self.revisions.append(copy.deepcopy(previous))
            self._roll({"kind": "DaemonSet", "spec": {"template": previous}})
        else:
            assert action == "status", args
            self.wait_ready()

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        for name, probes in self.node.probes.items():
            probe = probes.get("readinessProbe") or {}
            if "exec" not in probe:
                continue
            while True:
                out = self.node.podman.exec(self.node.pod_id, name, *probe["exec"]["command"])
                if out.returncode == 0:
                    break
                assert time.monotonic() < deadline, f"{name} not ready: {out.stderr}"
                time.sleep(1)

    def _exec(self, args: list[str]) -> None:
        pods = ("daemonset/rdma-cni", "ds/rdma-cni", self.node.pod_name,
                f"pod/{self.node.pod_name}")
        assert args[1] in pods and args[2] == "-c" and args[4] == "--", args
        ds = {"spec": {"template": self.revisions[-1]}}  # container paths moved as played
        cmd = [manifests.shift(a, self.node.root, manifests.redirected(ds)) for a in args[5:]]
        out = self.node.podman.exec(self.node.pod_id, args[3], *cmd)
        assert out.returncode in self.exit_ok, \
            f"kubectl exec {args[3]}: exit {out.returncode}: {out.stderr}"
        self.output.append(out.stdout)

    def _cordon(self, args: list[str]) -> None:
        assert args[1] == manifests.NODE_NAME, args
        self.schedulable = args[0] == "uncordon"

    def _drain(self, args: list[str]) -> None:
        assert args[1] == manifests.NODE_NAME, args
        self.schedulable = False
        self.drain_pods()

    def _delete(self, args: list[str]) -> None:
        assert args[1] == "-k", args
        docs = k8srender.render(self.cwd / args[2])
        for d in docs:
            self.configmaps.pop(d["metadata"]["name"], None) if d["kind"] == "ConfigMap" \
                else None
        self.node.remove()
        self.revisions.clear()

    def _debug(self, args: list[str]) -> None:
        assert args[1] == f"node/{manifests.NODE_NAME}", args
        opts, cmd = args[2:args.index("--")], args[args.index("--") + 1:]
        image = next(o.split("=", 1)[1] for o in opts if o.startswith("--image="))
        out = self.node.podman.run("run", "--rm", "--privileged", "--network", "host",
                                   "-v", f"{self.node.root}:/host", self.images[image], *cmd,
                                   check=False)
        assert out.returncode == 0, f"kubectl debug: {out.stderr}"
        self.output.append(out.stdout + out.stderr)


def _strip_namespace(argv: list[str]) -> list[str]:
    """``-n kube-system`` (the namespace every rdma-cni object is in) taken out."""
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "-n":
            assert argv[i + 1] == "kube-system", argv
            skip = True
            continue
        out.append(a)
    return out


def previous_manifests(rev: str) -> Docs:
    """The plain manifests (conf/k8s/*.yaml) of an earlier revision, as git has them."""
    names = subprocess.run(["git", "-C", str(k8srender.REPO), "ls-tree", "--name-only",
                            f"{rev}:conf/k8s/"], capture_output=True, text=True, check=True,
                           timeout=60).stdout.split()
    docs: Docs = []
    for name in ("rbac.yaml", "configmap.yaml", "daemonset.yaml"):
        assert name in names, (rev, names)
        text = subprocess.run(["git", "-C", str(k8srender.REPO), "show",
                               f"{rev}:conf/k8s/{name}"], capture_output=True, text=True,
                              check=True, timeout=60).stdout
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def procedures(markdown: str) -> dict[str, str]:
    """The ```sh blocks of docs/packaging.md marked ``<!-- procedure: NAME -->``."""
    import re

    return {m.group(1): m.group(2) for m in re.finditer(
        r"<!-- procedure: ([\w-]+) -->\s*```sh\n(.*?)```", markdown, re.S)}


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)[:3000]
