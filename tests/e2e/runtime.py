"""A private containerd (own root, state, socket, CNI dirs) driven through the
CRI v1 gRPC API with a minimal client generated at run time from
tests/support/cri.proto."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from support.cri import load_cri

PAUSE_IMAGE = "localhost/rdma-cni-e2e/pause:1"
SERVICE = "/runtime.v1.RuntimeService/"

CONFIG = """version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "{tmp}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
"""


class Containerd:
    def __init__(self, tmp: Path, cni_bin: Path | None = None,
                 cni_conf: Path | None = None) -> None:
        self.tmp = tmp
        self.sock = tmp / "containerd.sock"
        self.cni_bin = cni_bin or tmp / "cni-bin"
        self.cni_conf = cni_conf or tmp / "net.d"
        self.log = tmp / "containerd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pb: ModuleType = load_cri(tmp)
        self._channel: Any = None

    def write_config(self) -> Path:
        for d in (self.cni_bin, self.cni_conf):
            d.mkdir(parents=True, exist_ok=True)
        cfg = self.tmp / "config.toml"
        cfg.write_text(CONFIG.format(root=self.tmp / "root", state=self.tmp / "state",
                                     sock=self.sock, tmp=self.tmp, image=PAUSE_IMAGE,
                                     cni_bin=self.cni_bin, cni_conf=self.cni_conf))
        return cfg

    def start(self, timeout: float = 30.0) -> None:
        cfg = self.write_config()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(["containerd", "--config", str(cfg)], stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited: {self.tail()}")
            if self.sock.exists():
                try:
                    self.call("Version", self.pb.VersionRequest(), self.pb.VersionResponse, 2)
                    return
                except Exception:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"containerd did not answer on {self.sock}: {self.tail()}")

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def ctr(self, *args: str, stdin: bytes | None = None) -> str:
        out = subprocess.run(["ctr", "--address", str(self.sock), "--namespace", "k8s.io",
                              *args], input=stdin, capture_output=True, check=True, timeout=60)
        return out.stdout.decode()

    def import_image(self, archive: bytes | Path) -> None:
        path = archive if isinstance(archive, Path) else self.tmp / "pause.tar"
        if not isinstance(archive, Path):
            path.write_bytes(archive)
        self.ctr("images", "import", "--no-unpack=false", str(path))

    # -- CRI -------------------------------------------------------------------
    def channel(self) -> Any:
        import grpc

        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.sock}")
        return self._channel

    def call(self, method: str, request: Any, response: Any, timeout: float = 60.0) -> Any:
        rpc = self.channel().unary_unary(SERVICE + method,
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=response.FromString)
        return rpc(request, timeout=timeout)

    def pod_config(self, name: str, uid: str, annotations: dict[str, str] | None = None,
                   namespace: str = "e2e") -> Any:
        pb = self.pb
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            hostname=name, log_directory=str(self.tmp / "logs" / name),
            annotations=annotations or {}, labels={"rdma-cni-e2e": "1"},
            linux=pb.LinuxPodSandboxConfig(),
        )

    def run_pod(self, name: str, uid: str, annotations: dict[str, str] | None = None,
                config: Any = None) -> str:
        """A pod sandbox (``config``, else ``pod_config`` of the arguments); its ID."""
        pb = self.pb
        config = config or self.pod_config(name, uid, annotations)
        resp = self.call("RunPodSandbox", pb.RunPodSandboxRequest(config=config),
                         pb.RunPodSandboxResponse)
        return str(resp.pod_sandbox_id)

    def netns_of(self, sandbox_id: str) -> str:
        pb = self.pb
        resp = self.call("PodSandboxStatus",
                         pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=True),
                         pb.PodSandboxStatusResponse)
        info = json.loads(resp.info["info"])
        for ns in info["runtimeSpec"]["linux"]["namespaces"]:
            if ns["type"] == "network":
                return str(ns["path"])
        raise AssertionError(f"no network namespace in the status of {sandbox_id}")

    def stop_pod(self, sandbox_id: str) -> None:
        self.call("StopPodSandbox", self.pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id),
                  self.pb.StopPodSandboxResponse)

    def remove_pod(self, sandbox_id: str) -> None:
        self.call("RemovePodSandbox",
                  self.pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id),
                  self.pb.RemovePodSandboxResponse)

    def pods(self) -> list[str]:
        resp = self.call("ListPodSandbox", self.pb.ListPodSandboxRequest(),
                         self.pb.ListPodSandboxResponse)
        return [str(p.id) for p in resp.items]

    def loaded_cni_config(self) -> str:
        resp = self.call("Status", self.pb.StatusRequest(verbose=True), self.pb.StatusResponse)
        return str(resp.info.get("cniconfig", ""))

    def wait_for_config(self, needle: str, timeout: float = 15.0) -> None:
        """Wait until the CRI plugin has (re)loaded a CNI config containing ``needle``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.loaded_cni_config():
                return
            time.sleep(0.1)
        raise AssertionError(f"containerd did not load a CNI config with {needle}: "
                             f"{self.loaded_cni_config()[:2000]}")

    def cleanup_pods(self) -> None:
        for sid in self.pods():
            for op in (self.stop_pod, self.remove_pod):
                try:
                    op(sid)
                except Exception as e:
                    print(f"e2e cleanup: {op.__name__} {sid}: {e}", file=sys.stderr)

    def stop(self) -> None:
        """Stop our containerd (by PID) and any shim it started for our socket."""
        if self._channel is not None:
            self._channel.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self._shim_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _shim_pids(self) -> list[int]:
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"containerd-shim-runc-v2") and \
                    str(self.sock).encode() in cmd:
                out.append(int(entry))
        return out

