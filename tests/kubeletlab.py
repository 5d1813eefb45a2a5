"""A fake kubelet driving the real device plugin the way the kubelet does: the plugin
registers, the kubelet lists its devices, asks for a preferred allocation, allocates,
and serves the result over the PodResources API (for ADD to read). Shared by the
native and VM allocation tests."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.fakes.kubelet import FakeKubelet, PluginClient

from rdma_cni.kube.deviceplugin.server import socket_name

RESOURCE = "vke.volcengine.com/rdma"


class Kubelet:
    def __init__(self, sock_dir: Path, plugin_conf: dict[str, Any], argv: Sequence[str],
                 conf_file: Path) -> None:
        """``argv``: how to run rdma-cni (e.g. ``ip netns exec N python -m rdma_cni``)."""
        self.dir = sock_dir  # unix socket paths are limited to 108 bytes: keep it short
        self.dir.mkdir()
        self.kubelet = FakeKubelet(str(self.dir / "kubelet.sock"), str(self.dir / "pr.sock"))
        self.kubelet.start()
        conf_file.write_text(json.dumps({**plugin_conf, "kubelet": self.kubelet_conf(),
                                         "cniVersion": "1.0.0", "name": "rdma"}))
        # the node's CNI config chains us (else Allocate is refused)
        (self.dir / "10-chain.conflist").write_text(json.dumps(
            {"cniVersion": "1.0.0", "name": "vpc-cni",
             "plugins": [{"type": "vpc-cni"}, {"type": "rdma-cni"}]}))
        self.proc = subprocess.Popen(
            [*argv, "device-plugin", "--config", str(conf_file), "--nccl-env", "",
             "--cni-conf-dir", str(self.dir), "--status-file", str(self.dir / "dp-status.json"),
             "--poll", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.kubelet.wait_registrations(1, timeout=120)
        self.client = PluginClient(str(self.dir / socket_name(RESOURCE)))

    def kubelet_conf(self) -> dict[str, str]:
        return {"podResourcesSocket": str(self.dir / "pr.sock"),
                "checkpointFile": str(self.dir / "no-checkpoint"),
                "devicePluginDir": str(self.dir)}

    def devices(self) -> list[str]:
        for devs in self.client.list_and_watch():
            return sorted(d.ID for d in devs if d.health == "Healthy")
        return []

    def schedule(self, pod: str, count: int) -> list[str]:
        """What the kubelet does for a pod asking ``RESOURCE: count``."""
        ids = self.client.preferred(self.devices(), [], count)
        self.client.allocate(ids)
        self.kubelet.set_pod("default", pod, {RESOURCE: ids})
        return ids

    def close(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.kubelet.stop()
        for f in self.dir.iterdir():
            f.unlink()
        self.dir.rmdir()


@contextmanager
def kubelet(sock_dir: Path, plugin_conf: dict[str, Any], argv: Sequence[str],
            conf_file: Path) -> Iterator[Kubelet]:
    k = Kubelet(sock_dir, plugin_conf, argv, conf_file)
    try:
        yield k
    finally:
        k.close()
