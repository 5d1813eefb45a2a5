"""The node rig: a kustomization's DaemonSet pod (tests/node/manifests.py says what is
changed) played by podman over a temp host root T, a fake kubelet (real gRPC:
device-plugin Registration, PodResources) on T's kubelet sockets, and a private
containerd serving its CRI on T's runtime socket (the rendering's ``criSocket``) and
running T's CNI config for workload pods, with stand-in RDMA NICs.

The host paths come from the kustomization's path settings (tests/k8srender.py,
``paths_of``): the base's are containerd's and the kubelet's defaults, the
non-default-paths overlay moves every one of them, and this rig follows, so the same
tests show both renderings working.

Host resources of this rig differ from the containerd e2e tier's (names ``rdnode*``,
203.0.113.0/28 and .16/28, primary 198.18.1.0/24) so both can run side by side.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import k8srender
import manifests
import pytest
from e2e_node import _cleanup_host, _make_nics, write_primary
from pause_image import oci_archive
from podman import Podman
from runtime import PAUSE_IMAGE, Containerd
from support.fakes.kubelet import FakeKubelet
from support.proc import free_port
from workload import NICS, RESOURCE

from rdma_cni.kube.deviceplugin.server import socket_name

REPO = k8srender.REPO
MODE = "shared-multi"
HPC_ROUTE = ("198.19.1.0/24", "203.0.113.14", "rdnode0")
BRIDGE, PEER_NS, PRIMARY_SUBNET = "rdnbr0", "rdnode-peer", "198.18.1.0/24"
ARCHIVE = REPO / "dist" / "rdma-cni-image.tar"
TOOLS = ("podman", "buildah", "debootstrap", "catatonit", "containerd", "runc", "ctr", "nsenter",
         "kubectl")


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (euid 0)"
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (./scripts/setup.sh installs it)"
    if not (REPO / "dist" / "rdma-cni" / "rdma-cni").exists():
        return "dist/rdma-cni is missing: run ./scripts/build.sh"
    return None


def build_image() -> tuple[str, float]:
    """./scripts/image.sh (cached); the image reference (<version>-<commit>) and the
    seconds it took."""
    start = time.monotonic()
    out = subprocess.run([str(REPO / "scripts" / "image.sh")], capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, f"scripts/image.sh failed: {out.stderr[-3000:]}"
    ref = (REPO / "dist" / "rdma-cni-image.tar.ref").read_text().split()[0]
    return ref, time.monotonic() - start


def shipped_image() -> str:
    """The image reference the base names (kustomization.yaml's `images`)."""
    (image,) = {c["image"] for c in k8srender.containers(k8srender.render(k8srender.BASE))
                .values()}
    return str(image)


@dataclass
class Node:
    root: Path                  # the temp host root T
    paths: dict[str, str]       # the kustomization's path settings (host paths)
    image: str                  # the image this tree built (<version>-<commit>)
    podman: Podman
    kubelet: FakeKubelet
    cd: Containerd
    exporter_port: int = 0
    pod_name: str = ""
    pod_id: str = ""
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def host(self, path: str) -> Path:
        """A host path of the node, under T."""
        return self.root / path.lstrip("/")

    @property
    def exporter(self) -> str:
        return f"{manifests.HOST_IP}:{self.exporter_port}"

    @property
    def cni_bin(self) -> Path:
        return self.host(self.paths["cniBinDir"])

    @property
    def cni_conf(self) -> Path:
        return self.host(self.paths["cniConfDir"])

    @property
    def kubelet_dir(self) -> Path:
        return self.host(self.paths["kubeletDir"])

    @property
    def data(self) -> Path:
        return self.root / "var/lib/cni/rdma-cni"

    @property
    def plugin_socket(self) -> Path:
        return self.kubelet_dir / "device-plugins" / socket_name(RESOURCE)

    def play(self, docs: list[dict[str, Any]], images: dict[str, str] | None = None,
             mode: str = MODE) -> str:
        """Play the DaemonSet pod of a rendering (its ConfigMaps alongside); wait for the
        install to finish. ``images``: manifest image -> local reference (default: the
        base's image -> this tree's build); ``mode``: the node's mode (its label)."""
        start = time.monotonic()
        self.pod_name = f"rdma-cni-node-{secrets.token_hex(3)}"
        ds, cms = manifests.split(docs)
        prefixes = manifests.redirected(ds)
        images = images or {shipped_image(): self.image}
        pod, self.probes = manifests.node_pod(ds, self.root, images, self.pod_name,
                                              self.exporter_port)
        cm = manifests.configmaps(cms, self.root, prefixes, mode, list(NICS))
        pod_yaml = manifests.write(self.root / f"{self.pod_name}.yaml", pod)
        cm_yaml = manifests.write(self.root / f"{self.pod_name}-configmaps.yaml", *cm)
        self.pod_id = self.podman.play(pod_yaml, cm_yaml, self.pod_name)
        code = self.podman.wait_exited(self.pod_id, "install")
        assert code == 0, self.podman.logs(self.pod_id, "install")
        self.timings[f"play {self.pod_name}"] = time.monotonic() - start
        return self.pod_id

    def remove(self) -> str:
        """Delete the DaemonSet's pod; podman's warnings (e.g. a container that
        ignored SIGTERM and was killed)."""
        warnings = ""
        if self.pod_id:
            warnings = self.podman.remove_pod(self.pod_id)
            self.pod_id = ""
        return warnings


def make_root(root: Path, paths: dict[str, str]) -> None:
    """T as a fresh node has it: /var/log, the kubelet's dirs (Directory-type hostPaths),
    the runtime's socket dir, the CNI dirs (the primary's config is written by
    write_primary)."""
    kubelet = paths["kubeletDir"].lstrip("/")
    for d in ("var/log", f"{kubelet}/device-plugins", f"{kubelet}/pod-resources",
              paths["cniBinDir"].lstrip("/"), paths["cniConfDir"].lstrip("/"),
              os.path.dirname(paths["criSocket"]).lstrip("/")):
        (root / d).mkdir(parents=True, exist_ok=True)


def make_node(target: str = "base") -> Iterator[Node]:
    with node_of(target) as node:
        yield node


@contextlib.contextmanager
def node_of(target: str = "base", play: bool = True) -> Iterator[Node]:
    """The node of a kustomization's paths, its DaemonSet played (``play``) or not yet."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    image, built = build_image()
    paths = k8srender.paths_of(k8srender.TARGETS[target])
    root = Path(tempfile.mkdtemp(prefix="rn-", dir="/tmp"))  # short: unix socket paths
    try:
        make_root(root, paths)
        (root / "containerd").mkdir()
        kubelet_dir = root / paths["kubeletDir"].lstrip("/")
        kubelet = FakeKubelet(str(kubelet_dir / "device-plugins/kubelet.sock"),
                              str(kubelet_dir / "pod-resources/kubelet.sock"))
        cd = Containerd(root / "containerd", root / paths["cniBinDir"].lstrip("/"),
                        root / paths["cniConfDir"].lstrip("/"))
        cd.sock = root / paths["criSocket"].lstrip("/")  # the runtime's socket setting
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    node = Node(root, paths, image, Podman(root), kubelet, cd, exporter_port=free_port())
    node.timings["image.sh"] = built
    try:
        start_node(node)
        if play:
            node.play(k8srender.render(k8srender.TARGETS[target]))
        yield node
    finally:
        _teardown(node)


def start_node(node: Node) -> None:
    """The node before the DaemonSet: NICs, the primary's config, kubelet, containerd."""
    _make_nics(NICS, BRIDGE, PEER_NS, HPC_ROUTE)
    node.cd.write_config()
    write_primary(node.cd, node.root / "host-local", BRIDGE, PRIMARY_SUBNET)
    node.kubelet.start()
    start = time.monotonic()
    node.cd.start()
    node.cd.import_image(oci_archive(PAUSE_IMAGE))
    node.cd.import_image(ARCHIVE)  # the workload container's image (it has a shell)
    node.timings["containerd + images"] = time.monotonic() - start


def _teardown(node: Node) -> None:
    try:
        node.cd.cleanup_pods()
    except Exception as e:  # containerd may not have started
        print(f"node cleanup: {e}")
    node.cd.stop()
    node.podman.cleanup()
    node.kubelet.stop()
    _cleanup_host(NICS, BRIDGE, PEER_NS)
    if os.environ.get("RDMA_CNI_E2E_KEEP") != "1":
        shutil.rmtree(node.root, ignore_errors=True)


def metrics(node: Node) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://{node.exporter}/metrics", timeout=30) as r:
        return str(r.read().decode())
