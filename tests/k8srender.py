"""The Kubernetes manifests as a cluster gets them: ``kubectl kustomize`` of the base and
of each overlay under conf/k8s/ (kustomize v5 in kubectl), parsed; shared by the unit
tests of the manifests and the node tier."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "conf" / "k8s"
BASE = K8S / "base"
OVERLAYS = {p.name: p for p in sorted((K8S / "overlays").iterdir()) if p.is_dir()}
#: every kustomization a cluster may apply: the base and each overlay
TARGETS = {"base": BASE, **OVERLAYS}
#: the host paths each setting of conf/k8s/components/paths moves, with their defaults
PATH_DEFAULTS = {"kubeletDir": "/var/lib/kubelet", "cniBinDir": "/opt/cni/bin",
                 "cniConfDir": "/etc/cni/net.d", "criSocket": "/run/containerd/containerd.sock"}


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        raise RuntimeError("kubectl is not installed (kustomize v5 ships in it)")
    return path


@functools.cache
def render_text(target: Path) -> str:
    """``kubectl kustomize target`` (cached per run: the files do not change under a test)."""
    out = subprocess.run([kubectl(), "kustomize", str(target)], capture_output=True,
                         text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {target}: {out.stderr.strip()}")
    return out.stdout


def render(target: Path) -> list[dict[str, Any]]:
    """The objects ``target`` renders to (fresh copies: callers may change them)."""
    return [d for d in yaml.safe_load_all(render_text(target)) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Container name -> container, init containers included."""
    spec = pod_spec(docs)
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


def paths_of(target: Path) -> dict[str, str]:
    """The settings of ``target``'s ``rdma-cni-paths`` (the base: the defaults)."""
    path = target / "paths.yaml"
    if not path.exists():
        return dict(PATH_DEFAULTS)
    data: dict[str, str] = yaml.safe_load(path.read_text())["data"]
    return data
