"""The node rig: the shipped DaemonSet pod (tests/node/manifests.py says what is
changed) played by podman over a temp host root T, a fake kubelet (real gRPC:
device-plugin Registration, PodResources) on T's kubelet sockets, and a private
containerd whose CRI runs T's CNI config for workload pods, with stand-in RDMA NICs.

Host resources of this rig differ from the containerd e2e tier's (names ``rdnode*``,
203.0.113.0/28 and .16/28, primary 198.18.1.0/24) so both can run side by side.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import manifests
import pytest
from e2e_node import _cleanup_host, _make_nics, write_primary
from fakekubelet import FakeKubelet
from pause_image import oci_archive
from podman import Podman
from runtime import PAUSE_IMAGE, Containerd

from rdma_cni.kube.deviceplugin.server import socket_name

REPO = manifests.REPO
RESOURCE = "vke.volcengine.com/rdma"
MODE = "shared-multi"
NICS = {"rdnode0": ("203.0.113.1/28", "rdnpeer0"), "rdnode1": ("203.0.113.17/28", "rdnpeer1")}
HPC_ROUTE = ("198.19.1.0/24", "203.0.113.14", "rdnode0")
BRIDGE, PEER_NS, PRIMARY_SUBNET = "rdnbr0", "rdnode-peer", "198.18.1.0/24"
ARCHIVE = REPO / "dist" / "rdma-cni-image.oci.tar"
TOOLS = ("podman", "buildah", "debootstrap", "catatonit", "containerd", "runc", "ctr", "nsenter")


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (euid 0)"
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (./scripts/setup.sh installs it)"
    if not (REPO / "dist" / "rdma-cni" / "rdma-cni").exists():
        return "dist/rdma-cni is missing: run ./scripts/build.sh"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_image() -> tuple[str, float]:
    """./scripts/image.sh (cached); the image reference and the seconds it took."""
    start = time.monotonic()
    out = subprocess.run([str(REPO / "scripts" / "image.sh")], capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, f"scripts/image.sh failed: {out.stderr[-3000:]}"
    ref = (REPO / "dist" / "rdma-cni-image.oci.tar.ref").read_text().split()[0]
    return ref, time.monotonic() - start


@dataclass
class Node:
    root: Path                  # the temp host root T
    image: str
    podman: Podman
    kubelet: FakeKubelet
    cd: Containerd
    exporter: str = ""          # host:port the exporter listens on
    pod_name: str = ""
    pod_id: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def cni_bin(self) -> Path:
        return self.root / "opt/cni/bin"

    @property
    def cni_conf(self) -> Path:
        return self.root / "etc/cni/net.d"

    @property
    def data(self) -> Path:
        return self.root / "var/lib/cni/rdma-cni"

    @property
    def plugin_socket(self) -> Path:
        return self.root / "var/lib/kubelet/device-plugins" / socket_name(RESOURCE)

    def play(self, image: str) -> str:
        """Play the DaemonSet's pod with ``image``; wait for the install to finish."""
        start = time.monotonic()
        self.pod_name = f"rdma-cni-node-{secrets.token_hex(3)}"
        pod, self.probes = manifests.node_pod(self.root, image, self.pod_name, self.exporter)
        cm = manifests.configmap(self.root, MODE, list(NICS))
        pod_yaml = manifests.write(self.root / f"{self.pod_name}.yaml", pod)
        cm_yaml = manifests.write(self.root / "configmap.yaml", cm)
        self.pod_id = self.podman.play(pod_yaml, cm_yaml, self.pod_name)
        code = self.podman.wait_exited(self.pod_id, "install")
        assert code == 0, self.podman.logs(self.pod_id, "install")
        self.timings[f"play {image}"] = time.monotonic() - start
        return self.pod_id

    def remove(self) -> str:
        """Delete the DaemonSet's pod; podman's warnings (e.g. a container that
        ignored SIGTERM and was killed)."""
        warnings = ""
        if self.pod_id:
            warnings = self.podman.remove_pod(self.pod_id)
            self.pod_id = ""
        return warnings


def make_root(root: Path) -> None:
    """T as a fresh node has it: the dirs the manifest's Directory-type hostPaths need,
    the kubelet's dirs, and the primary CNI's config (written by write_primary)."""
    for d in ("var/log", "var/lib/kubelet/device-plugins", "var/lib/kubelet/pod-resources",
              "opt/cni/bin", "etc/cni/net.d"):
        (root / d).mkdir(parents=True, exist_ok=True)


def make_node() -> Iterator[Node]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    image, built = build_image()
    root = Path(tempfile.mkdtemp(prefix="rn-", dir="/tmp"))  # short: unix socket paths
    try:
        (root / "containerd").mkdir()
        kubelet = FakeKubelet(str(root / "var/lib/kubelet/device-plugins/kubelet.sock"),
                              str(root / "var/lib/kubelet/pod-resources/kubelet.sock"))
        cd = Containerd(root / "containerd", root / "opt/cni/bin", root / "etc/cni/net.d")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    node = Node(root, image, Podman(root), kubelet, cd, exporter=f"127.0.0.1:{free_port()}")
    node.timings["image.sh"] = built
    try:
        yield from _run(node)
    finally:
        _teardown(node)


def _run(node: Node) -> Iterator[Node]:
    make_root(node.root)
    _make_nics(NICS, BRIDGE, PEER_NS, HPC_ROUTE)
    node.cd.write_config()
    write_primary(node.cd, node.root / "host-local", BRIDGE, PRIMARY_SUBNET)
    node.kubelet.start()
    start = time.monotonic()
    node.cd.start()
    node.cd.import_image(oci_archive(PAUSE_IMAGE))
    node.cd.import_image(ARCHIVE)  # the workload container's image (it has a shell)
    node.timings["containerd + images"] = time.monotonic() - start
    node.play(node.image)
    yield node


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


def wait_for(cond: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
