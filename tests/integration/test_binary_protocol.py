"""The CNI protocol through a real exec: the PyInstaller binary and ``python -m rdma_cni``.

No root needed: only VERSION, pass-through ADD/DEL/CHECK (no annotation block for us)
and error paths, which never touch a network namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.proc import plugin_env

REPO = Path(__file__).resolve().parents[2]
BINARY = REPO / "dist" / "rdma-cni" / "rdma-cni"
SUPPORTED = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
ENV = {
    "CNI_CONTAINERID": "3f2a9c0ffee",
    "CNI_NETNS": "/var/run/netns/cni-test-not-used",
    "CNI_IFNAME": "eth0",
    "CNI_PATH": "/opt/cni/bin",
    "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p0;"
                "K8S_POD_INFRA_CONTAINER_ID=3f2a9c0ffee;K8S_POD_UID=0b7e",
}
# what vpc-cni hands over in the field: cniVersion 0.4.0, odd mac/sandbox values
VPC_PREV = {
    "cniVersion": "0.4.0",
    "interfaces": [{"name": "eth0", "mac": "vpc-cni:eni-0a1b2c", "sandbox": "eni-attached"},
                   {"name": "veth9a8b", "mac": "", "sandbox": ""}],
    "ips": [{"version": "4", "interface": 0, "address": "198.51.100.7/24",
             "gateway": "198.51.100.1"}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "198.51.100.1"}],
    "dns": {"nameservers": ["198.51.100.53"], "search": ["svc.cluster.local"]},
}


@pytest.fixture(scope="session")
def binary() -> Path:
    """Build dist/rdma-cni once per session (scripts/build.sh skips when up to date)."""
    proc = subprocess.run([str(REPO / "scripts" / "build.sh")], cwd=REPO, capture_output=True,
                          text=True, timeout=900, check=False)
    assert proc.returncode == 0, f"build failed:\n{proc.stdout}\n{proc.stderr}"
    assert BINARY.is_file() and os.access(BINARY, os.X_OK)
    return BINARY


@pytest.fixture(params=["binary", "module"])
def runner(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "binary":
        return [str(request.getfixturevalue("binary"))]
    return [sys.executable, "-m", "rdma_cni"]


@dataclass
class Ran:
    status: int
    stdout: str
    stderr: str

    @property
    def doc(self) -> dict[str, Any]:
        doc, end = json.JSONDecoder().raw_decode(self.stdout)
        assert self.stdout[end:].strip() == "", f"more than one document: {self.stdout!r}"
        assert isinstance(doc, dict)
        return doc


def execute(cmd: list[str], command: str | None, stdin: bytes | dict[str, Any],
            env: dict[str, str] | None = None) -> Ran:
    full = plugin_env(**(ENV if env is None else env))
    if command is not None:
        full["CNI_COMMAND"] = command
    raw = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode()
    proc = subprocess.run(cmd, input=raw, env=full, cwd=REPO, capture_output=True, timeout=60,
                          check=False)
    ran = Ran(proc.returncode, proc.stdout.decode(), proc.stderr.decode())
    assert "Traceback" not in ran.stdout and "Traceback" not in ran.stderr, ran
    return ran


def netconf(tmp: Path, version: str = "0.4.0", **extra: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "vpc-cni-chain", "type": "rdma-cni", "mode": "shared",
            "capabilities": {"io.kubernetes.cri.pod-annotations": True},
            "dataDir": str(tmp / "data"), "logFile": str(tmp / "rdma-cni.log"),
            "metricsFile": str(tmp / "metrics"), **extra}


def with_pod(tmp: Path, annotation: str | None, **extra: Any) -> dict[str, Any]:
    annotations = {"io.kubernetes.cri.pod-annotations": {
        "k8s.volcengine.com/pod-networks": annotation}} if annotation is not None else {}
    return netconf(tmp, prevResult=VPC_PREV, runtimeConfig=annotations, **extra)


@pytest.mark.parametrize("version", SUPPORTED)
def test_version_for_each_supported_version(runner: list[str], version: str,
                                            tmp_path: Path) -> None:
    ran = execute(runner, "VERSION", {"cniVersion": version, "logFile": str(tmp_path / "l")},
                  env={})
    assert ran.status == 0
    assert ran.doc == {"cniVersion": version, "supportedVersions": list(SUPPORTED)}


def test_version_with_empty_stdin(runner: list[str]) -> None:
    ran = execute(runner, "VERSION", b"", env={})
    assert (ran.status, ran.doc["cniVersion"]) == (0, "1.1.0")


@pytest.mark.parametrize("annotation", [
    None, "[]", '[{"cniConf": {"name": "vpc"}}, {"cniConf": {"name": "other"}, "x": [1]}]'])
def test_pass_through_add_returns_the_prev_result(runner: list[str], annotation: str | None,
                                                  tmp_path: Path) -> None:
    ran = execute(runner, "ADD", with_pod(tmp_path, annotation))
    assert ran.status == 0, ran
    assert ran.doc == VPC_PREV
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("command", ["DEL", "CHECK"])
def test_pass_through_del_and_check_print_nothing(runner: list[str], command: str,
                                                  tmp_path: Path) -> None:
    ran = execute(runner, command, with_pod(tmp_path, "[]"))
    assert (ran.status, ran.stdout) == (0, ""), ran


def test_del_without_netns_and_prev_result(runner: list[str], tmp_path: Path) -> None:
    env = {k: v for k, v in ENV.items() if k != "CNI_NETNS"}
    ran = execute(runner, "DEL", netconf(tmp_path), env=env)
    assert (ran.status, ran.stdout) == (0, ""), ran


@pytest.mark.parametrize(("stdin", "code"), [
    (b"{not json", 6),
    (b"[" * 50_000 + b"]" * 50_000, 6),
    ({"cniVersion": "9.9.9", "name": "n", "metricsFile": ""}, 1),
    ({"name": "n", "type": "rdma-cni", "metricsFile": ""}, 1),
    ("annotation", 7),
    ("max", 7),
    ("prev", 6),
])
def test_invalid_config_gives_one_error_document(runner: list[str], stdin: Any, code: int,
                                                 tmp_path: Path) -> None:
    if stdin == "annotation":
        stdin = with_pod(tmp_path, "{broken")
    elif stdin == "max":
        stdin = with_pod(tmp_path, '[{"cniConf": {"name": "rdma"}}]', maxInterfaces="x")
    elif stdin == "prev":
        stdin = netconf(tmp_path, prevResult={"interfaces": "eth0"})
    ran = execute(runner, "ADD", stdin)
    assert ran.status == 1
    doc = ran.doc
    assert doc["code"] == code and set(doc) <= {"cniVersion", "code", "msg", "details"}
    assert doc["msg"]


def test_missing_environment_is_code_4(runner: list[str], tmp_path: Path) -> None:
    env = {k: v for k, v in ENV.items() if k != "CNI_IFNAME"}
    ran = execute(runner, "ADD", netconf(tmp_path), env=env)
    assert (ran.status, ran.doc["code"]) == (1, 4)
    assert "CNI_IFNAME" in ran.doc["msg"]


def test_check_below_040_is_code_1(runner: list[str], tmp_path: Path) -> None:
    ran = execute(runner, "CHECK", netconf(tmp_path, "0.3.1"))
    assert (ran.status, ran.doc["code"]) == (1, 1)


def test_about_text_without_cni_command_does_not_read_stdin(runner: list[str]) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    with subprocess.Popen(runner, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, cwd=REPO) as proc:
        try:
            status = proc.wait(timeout=30)  # stdin stays open: must not block on it
        finally:
            proc.kill()
        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout.read(), proc.stderr.read()
    assert (status, out) == (0, b"")
    assert b"CNI_COMMAND" in err and b"rdma-cni" in err


@pytest.mark.parametrize("command", ["VERSION", "ADD"])
def test_cli_pass_through_imports_nothing_heavy(command: str, tmp_path: Path) -> None:
    """The whole entry point (cli, resident check, dispatcher) under ``-X importtime``."""
    stdin = with_pod(tmp_path, '[{"cniConf": {"name": "other"}}]')
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **ENV, "CNI_COMMAND": command}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "rdma_cni"],
                          input=json.dumps(stdin).encode(), env=env, cwd=REPO,
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in proc.stderr.decode().splitlines() if line.startswith("import time:")}
    assert "rdma_cni" in imported
    heavy = {"pyroute2", "pydantic", "pydantic_core", "grpc", "prometheus_client"}
    assert imported.isdisjoint(heavy), sorted(imported & heavy)
    out = json.loads(proc.stdout)
    assert out == (VPC_PREV if command == "ADD" else
                   {"cniVersion": "0.4.0", "supportedVersions": list(SUPPORTED)})
