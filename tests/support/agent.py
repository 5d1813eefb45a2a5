"""The agent as the DaemonSet runs it: in a container, started before the pods.

:class:`AgentContainer` runs a podman container (``--rootfs`` over a directory
made here, the host's /usr read-only, the built bundle at /opt/rdma-cni: no image,
no registry) with the data dir, the status dir and a CRI socket dir mounted, and
the host's /run/netns mounted at /var/run/netns *without* propagation (podman's
default, rprivate): a netns made after the container started shows there as a
plain empty file, as in the field when the manifest lacks ``mountPropagation``.
Each agent pass is ``podman exec ... rdma-cni agent --once`` (same mount and PID
namespaces as the container), so a test controls when passes happen.

Field facts: root lacks CAP_SYS_RESOURCE (``--ulimit`` at or below the hard
limits), cgroups may be v1/hybrid (crun refuses hybrid: runc is used).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pytest
from chroot import REASON as CHROOT_REASON
from chroot import under_chroot
from cnirunner import BINARY, PYTHON, REPO

RUNTIME = "/usr/sbin/runc"
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]


#: every agent pass is a `podman exec`: a test using :class:`AgentContainer` carries this
needs_exec = pytest.mark.skipif(under_chroot(), reason=CHROOT_REASON)


def podman_usable() -> str:
    """"" when podman and runc can run a container here, else why not."""
    for tool in ("podman", RUNTIME):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/setup.sh installs it)"
    return ""


def bundle_dir() -> Path:
    """The bundle under test: ``RDMA_CNI_AGENT_BUNDLE`` (e.g. an older build), else dist/."""
    override = os.environ.get("RDMA_CNI_AGENT_BUNDLE")
    return Path(override) if override else BINARY.parent


def make_rootfs(root: Path) -> Path:
    for d in ("usr", "etc", "proc", "sys", "dev", "tmp", "run", "var/run/netns",
              "opt/rdma-cni", "cri", "status"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        if not (root / link).is_symlink():
            (root / link).symlink_to(f"usr/{link}")
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    return root


@contextlib.contextmanager
def shared_dir(path: Path) -> Iterator[Path]:
    """``path`` (made here) as a mount of its own with shared propagation, as
    ``ip netns`` makes /run/netns, so that a container can bind it ``rshared``."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True, timeout=30)
    try:
        subprocess.run(["mount", "--make-shared", str(path)], check=True, timeout=30)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, timeout=30)


class AgentContainer:
    def __init__(self, tmp: Path, config: dict[str, Any], data_dir: Path,
                 cri_dir: Path, status_dir: Path, name: str, network: str = "none",
                 source: bool = False, netns: tuple[str, str] = ("/run/netns", "rw")) -> None:
        """``source``: run the agent from the source tree and its venv (mounted read-only)
        instead of the bundle, e.g. for the ``kubernetes`` client the bundle leaves out.
        ``netns``: what is mounted at /var/run/netns and how (default: the host's
        /run/netns without propagation)."""
        self.name = name
        self.command = [str(PYTHON), "-m", "rdma_cni"] if source else ["/opt/rdma-cni/rdma-cni"]
        self.tmp = tmp
        self.rootfs = make_rootfs(tmp / "rootfs")
        self.config_path = tmp / "agent-config.json"
        self.config_path.write_text(json.dumps(config))
        self.status_file = status_dir / "agent-status.json"
        mounts = [("/usr", "/usr", "ro"), (str(bundle_dir()), "/opt/rdma-cni", "ro"),
                  (netns[0], "/var/run/netns", netns[1]), (str(data_dir), str(data_dir), "rw"),
                  (str(cri_dir), "/cri", "rw"), (str(status_dir), "/status", "rw"),
                  (str(self.config_path), "/agent-config.json", "ro")]
        if source:
            (self.rootfs / str(REPO).lstrip("/")).mkdir(parents=True, exist_ok=True)
            mounts.append((str(REPO), str(REPO), "ro"))
        # --uts host: the host's hostname, the node identity ADD records
        argv = ["podman", "--runtime", RUNTIME, "run", "-d", "--rm", "--name", name,
                "--network", network, "--uts", "host", *LIMITS]
        for src, dst, mode in mounts:
            argv += ["-v", f"{src}:{dst}:{mode}"]
        argv += ["--rootfs", str(self.rootfs), "/usr/bin/sleep", "900"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"podman run failed: {proc.stderr.strip()}")

    def agent_once(self, *extra: str, cri: bool = True, interval: float = 0.2,
                   env: dict[str, str] | None = None, cri_socket: str = "cri.sock"
                   ) -> subprocess.CompletedProcess[str]:
        flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
        argv = ["podman", "exec", "--env=PYTHONDONTWRITEBYTECODE=1", *flags, "--workdir", "/",
                self.name, *self.command, "agent",
                "--config", "/agent-config.json", "--once", "--interval", str(interval)]
        if bundle_dir() == BINARY.parent or os.environ.get("RDMA_CNI_AGENT_NEW_FLAGS"):
            argv += ["--status-file", "/status/agent-status.json",
                     "--cri-socket", f"/cri/{cri_socket}" if cri else "/cri/none.sock",
                     "--node-name", "node-a", *extra]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    def view(self, path: str) -> str:
        """What the container sees at ``path`` (``stat`` of its file type and device)."""
        return subprocess.run(["podman", "exec", self.name, "/usr/bin/stat", "-c", "%F %d",
                               path], capture_output=True, text=True, timeout=60).stdout.strip()

    def status(self) -> dict[str, Any]:
        return json.loads(self.status_file.read_text())

    def stop(self) -> None:
        subprocess.run(["podman", "rm", "-f", "-t", "0", self.name], capture_output=True,
                       timeout=120)


def plugin_binary() -> str:
    """The plugin under test: ``RDMA_CNI_TEST_BINARY`` (e.g. an older build), else dist/."""
    return os.environ.get("RDMA_CNI_TEST_BINARY") or str(BINARY)
