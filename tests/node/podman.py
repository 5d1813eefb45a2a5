"""podman for the node test: a private containers.conf (runc, cgroupfs, rlimits at or
below this machine's hard limits: root here lacks CAP_SYS_RESOURCE, and crun refuses
the host's hybrid cgroups), pods played from YAML and removed by ID."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from chroot import skip_exec_under_chroot

CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


class Podman:
    def __init__(self, tmp: Path) -> None:
        conf = tmp / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        self.env = {"CONTAINERS_CONF": str(conf), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        self.pods: list[str] = []     # IDs of pods this test made
        self.images: list[str] = []   # IDs of images this test made

    def run(self, *args: str, check: bool = True,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(["podman", *args], capture_output=True, text=True, env=self.env,
                             timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: exit {out.returncode}: "
                                 f"{out.stderr.strip()[-2000:]}")
        return out

    def play(self, pod_yaml: Path, configmap: Path, name: str) -> str:
        """``podman kube play``; the pod's ID (recorded for removal even if play fails)."""
        out = self.run("kube", "play", "--configmap", str(configmap), str(pod_yaml), check=False)
        pod_id = self.pod_id(name)
        if pod_id:
            self.pods.append(pod_id)
        assert out.returncode == 0 and pod_id, f"kube play failed: {out.stderr[-2000:]}"
        return pod_id

    def pod_id(self, name: str) -> str | None:
        out = self.run("pod", "ls", "--filter", f"name=^{name}$", "--format", "{{.ID}}",
                       check=False)
        ids = out.stdout.split()
        return ids[0] if ids else None

    def containers(self, pod_id: str) -> dict[str, dict[str, Any]]:
        """Short container name (the manifest's) -> podman's inspect of it."""
        info = json.loads(self.run("pod", "inspect", pod_id).stdout)
        info = info[0] if isinstance(info, list) else info
        ids = [c["Id"] for c in info["Containers"]]
        out = {}
        for c in json.loads(self.run("inspect", *ids).stdout):
            name = c["Name"].removeprefix(info["Name"] + "-")
            out[name] = c
        return out

    def wait_exited(self, pod_id: str, name: str, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.containers(pod_id)[name]["State"]
            if state["Status"] == "exited":
                return int(state["ExitCode"])
            time.sleep(0.5)
        raise AssertionError(f"container {name} did not finish in {timeout} s")

    def logs(self, pod_id: str, name: str) -> str:
        cid = self.containers(pod_id)[name]["Id"]
        out = self.run("logs", cid, check=False)
        return out.stdout + out.stderr

    def exec(self, pod_id: str, name: str, *cmd: str) -> subprocess.CompletedProcess[str]:
        skip_exec_under_chroot()
        return self.run("exec", self.containers(pod_id)[name]["Id"], *cmd, check=False)

    def remove_pod(self, pod_id: str) -> str:
        """``pod rm --force`` (SIGTERM, SIGKILL after 10 s); podman's warnings."""
        out = self.run("pod", "rm", "--force", pod_id, check=False, timeout=120)
        if pod_id in self.pods:
            self.pods.remove(pod_id)
        return out.stderr

    def cleanup(self) -> None:
        for pod_id in list(self.pods):
            self.remove_pod(pod_id)
        for image in self.images:
            self.run("rmi", "--force", image, check=False)
        self.images.clear()
