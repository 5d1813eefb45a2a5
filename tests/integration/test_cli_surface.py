"""The operator command line, through the built binary (dist/rdma-cni/rdma-cni).

Every subcommand of ``rdma_cni.cli.SUBCOMMANDS`` (the table, so new subcommands are
walked too) is run with ``--help``, ``--version``, an unknown option, ``--config`` of
a missing file and, where it has ``--json``, a failing ``--json`` run: help describes
every option, errors are one line on stderr with the documented exit code, never a
traceback, ``None`` or a Python repr.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rdma_cni import __version__
from rdma_cni.cli import SUBCOMMANDS
from rdma_cni.logsetup import TEST_LOG_FILE

REPO = Path(__file__).resolve().parents[2]
NAMES = sorted(SUBCOMMANDS)
IGNORES_CONFIG = {"nccl-env", "verify"}  # read sysfs and the netns; --config is ignored


def _safe(name: str, tmp: Path) -> list[str]:
    """Options that keep a subcommand inside ``tmp`` should it get past its config."""
    return {
        "install": ["--cni-bin-dir", str(tmp / "bin"), "--cni-conf-dir", str(tmp / "net.d")],
        "uninstall": ["--cni-bin-dir", str(tmp / "bin"), "--cni-conf-dir", str(tmp / "net.d")],
        "exporter": ["--listen", "127.0.0.1:0", "--device-plugin-status", str(tmp / "dp.json")],
        "device-plugin": ["--status-file", str(tmp / "dp.json")],
        "serve": ["--socket", str(tmp / "s.sock"), "--log-file", str(tmp / "log")],
        "nccl-env": ["--root", str(tmp / "empty")],
        "verify": ["--peer", "127.0.0.1", "--port", "9", "--timeout", "1"],
        "agent": ["--once"],
    }.get(name, [])


def run(binary: Sequence[str], *args: str, env: dict[str, str] | None = None,
        stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "CNI_COMMAND"}
    base["NODE_NAME"] = ""
    base.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run([*binary, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})}, check=False)


def assert_one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text and "None" not in text, text
    assert not re.search(r"'[^']*'", lines[0].split(": unrecognized")[0]), text  # no repr
    return lines[0]


def help_text(binary: Sequence[str], name: str) -> str:
    res = run(binary, name, "--help")
    assert res.returncode == 0 and res.stderr == "", res
    return res.stdout


def test_every_subcommand_has_the_table_entry() -> None:
    assert {"serve", "install", "uninstall", "agent", "device-plugin", "exporter", "doctor",
            "ls", "nccl-env"} <= set(SUBCOMMANDS)


@pytest.mark.parametrize("name", NAMES)
def test_help_describes_every_option(built_binary: list[str], name: str) -> None:
    text = help_text(built_binary, name)
    assert text.startswith(f"usage: rdma-cni {name} ")
    assert "exit codes: 0 ok, 1 failure" in " ".join(text.split())
    lines = text.splitlines()
    options = [i for i, line in enumerate(lines) if re.match(r"^  -", line)]
    assert any("--version" in lines[i] for i in options), text
    for i in options:
        described = re.match(r"^  -\S*(?: \S+)*(?:, -\S+(?: \S+)*)*\s{2,}\S", lines[i])
        follows = i + 1 < len(lines) and re.match(r"^\s{20,}\S", lines[i + 1])
        assert described or follows, f"{name}: option without a description: {lines[i]}"


@pytest.mark.parametrize("name", NAMES)
def test_version(built_binary: list[str], name: str) -> None:
    res = run(built_binary, name, "--version")
    assert res.returncode == 0 and res.stderr == "", res
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO,
                          capture_output=True, text=True, check=False).stdout.strip()
    m = re.fullmatch(rf"rdma-cni {re.escape(__version__)} \(commit ([0-9a-f]{{12}})(-dirty)?\)\n",
                     res.stdout)
    assert m, res.stdout
    assert not head or m.group(1) == head, (m.group(1), head)
    assert run(built_binary, "--version").stdout == res.stdout


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_is_a_usage_error(built_binary: list[str], name: str,
                                         tmp_path: Path) -> None:
    res = run(built_binary, name, *_safe(name, tmp_path), "--no-such-option")
    assert res.returncode == 2 and res.stdout == "", res
    line = assert_one_line(res.stderr)
    assert line.startswith(f"rdma-cni {name}: ") and "--no-such-option" in line
    assert f"rdma-cni {name} --help" in line


@pytest.mark.parametrize("name", NAMES)
def test_missing_config_file(built_binary: list[str], name: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "nonexistent.json")
    takes_config = "--config FILE" in help_text(built_binary, name)
    started = time.monotonic()
    res = run(built_binary, name, *_safe(name, tmp_path), "--config", missing)
    assert time.monotonic() - started < 30
    if not takes_config:
        assert res.returncode == 2, res
        assert_one_line(res.stderr)
        return
    assert res.returncode == 1 and res.stdout == "", res
    line = assert_one_line(res.stderr)
    assert f"rdma-cni {name}" in line
    if name not in IGNORES_CONFIG:
        assert missing in line and "no such file" in line.lower(), line
    assert not list(tmp_path.glob("bin/*")) and not list(tmp_path.glob("net.d/*"))


@pytest.mark.parametrize("name", NAMES)
def test_json_output_stays_json_on_failure(built_binary: list[str], name: str,
                                           tmp_path: Path) -> None:
    if "--json" not in help_text(built_binary, name):
        pytest.skip(f"{name} has no --json")
    missing = str(tmp_path / "nonexistent.json")
    res = run(built_binary, name, *_safe(name, tmp_path), "--json", "--config", missing)
    assert res.returncode == 1, res
    doc = json.loads(res.stdout)
    assert isinstance(doc, dict) and set(doc) == {"error"} and doc["error"], doc
    assert assert_one_line(res.stderr).endswith(doc["error"])


def test_about_text_lists_every_subcommand(built_binary: list[str]) -> None:
    about = run(built_binary)  # no CNI_COMMAND: the about text on stderr, nothing on stdout
    assert about.returncode == 0 and about.stdout == "", about
    listed = run(built_binary, "--help")
    assert listed.returncode == 0, listed
    for text in (about.stderr, listed.stdout):
        names = re.findall(r"^  (\S+)", text, re.M)
        assert names == list(SUBCOMMANDS), text
        assert "exit codes: 0 ok, 1 failure, 2 usage error" in text


def test_unknown_subcommand(built_binary: list[str]) -> None:
    res = run(built_binary, "frobnicate")
    assert res.returncode == 2 and res.stdout == "", res
    line = assert_one_line(res.stderr)
    assert '"frobnicate"' in line and all(n in line for n in SUBCOMMANDS)


def test_missing_cni_version_is_named(built_binary: list[str], tmp_path: Path) -> None:
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/nonexistent",
           "CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent"}
    res = run(built_binary, env=env, stdin=json.dumps({
        "name": "n", "type": "rdma-cni", "metricsFile": str(tmp_path / "metrics")}))
    assert res.returncode == 1, res
    doc = json.loads(res.stdout)
    assert doc["code"] == 1 and doc["msg"].startswith("missing cniVersion: set it to one of")
    assert "None" not in res.stdout + res.stderr


def test_uninstall_names_itself_and_says_when_nothing_was_there(
        built_binary: list[str], tmp_path: Path) -> None:
    dirs = _safe("uninstall", tmp_path)
    (tmp_path / "net.d").mkdir()
    primary = {"cniVersion": "0.4.0", "name": "vpc-cni", "plugins": [{"type": "bridge"}]}
    (tmp_path / "net.d" / "10-vpc.conflist").write_text(json.dumps(primary))
    res = run(built_binary, "uninstall", *dirs)
    assert res.returncode == 0, res
    assert assert_one_line(res.stderr).startswith("rdma-cni uninstall: nothing to remove")
    refused = run(built_binary, "uninstall", *dirs, "--mode", "shared")
    assert refused.returncode == 2 and "rdma-cni uninstall: " in refused.stderr, refused
    bundle = str(Path(built_binary[0]).parent)
    done = run(built_binary, "install", *dirs, "--bundle", bundle, "--mode", "shared")
    assert done.returncode == 0, done
    assert (tmp_path / "bin" / "rdma-cni").exists()
    res = run(built_binary, "uninstall", *dirs)
    assert res.returncode == 0, res
    assert res.stderr and all(line.startswith("rdma-cni uninstall: ")
                              for line in res.stderr.splitlines()), res.stderr
    assert "nothing to remove" not in res.stderr
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == []
    again = run(built_binary, "uninstall", *dirs)
    assert "nothing to remove" in again.stderr, again


def test_serve_takes_its_socket_and_log_from_config(built_binary: list[str],
                                                    tmp_path: Path) -> None:
    sock, log = tmp_path / "resident.sock", tmp_path / "resident.log"
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"type": "rdma-cni", "mode": "shared",
                                "residentSocket": str(sock), "logFile": str(log)}))
    proc = subprocess.Popen([*built_binary, "serve", "--config", str(conf)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.002)
        assert sock.exists(), proc.poll()
    finally:
        # told to stop the moment its socket shows (the workers are still being forked,
        # the collector still freezing): it stops cleanly all the same
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out == "" and "Traceback" not in err
    assert log.exists()
    assert not sock.exists()  # the path goes with it, whichever process took the signal


# --- doctor on this kernel ----------------------------------------------------------------

def _doctor(binary: Sequence[str], prefix: Sequence[str], conf: Path, conf_dir: Path,
            env_path: str = "/nonexistent") -> dict[str, dict[str, str]]:
    """``doctor --json`` run under ``prefix`` with PATH holding no tool at all."""
    res = subprocess.run([*prefix, "env", f"PATH={env_path}", *binary, "doctor", "--json",
                          "--config", str(conf), "--cni-conf-dir", str(conf_dir)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res
    return {c["name"]: c for c in json.loads(res.stdout)}


@pytest.mark.root
def test_doctor_reads_addresses_and_rdma_mode_over_netlink(built_binary: list[str], rig: Any,
                                                           tmp_path: Path) -> None:
    rig.nic("rnic0", "198.51.100.1/26")
    rig.nic("rnic1", "198.51.100.65/30", gw=None)
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"type": "rdma-cni", "mode": "shared-multi",
                                "devices": ["rnic0", "rnic1"]}))
    got = _doctor(built_binary, ["ip", "netns", "exec", rig.node.ns], conf, tmp_path)
    netmask = got["netmask"]
    assert netmask["status"] == "fail", netmask  # rnic1's /30 is read, with no `ip` tool
    assert netmask["detail"] == "rnic1 198.51.100.65/30", netmask
    assert "RDMA netlink" in got["rdma-netns"]["detail"] or got["rdma-netns"]["status"] == "ok"


@pytest.mark.root
@pytest.mark.parametrize(("propagation", "status"), [("slave", "ok"), ("private", "fail")])
def test_doctor_sees_the_netns_mount_propagation(built_binary: list[str], rig: Any,
                                                 tmp_path: Path, propagation: str,
                                                 status: str) -> None:
    assert os.path.isdir("/var/run/netns")  # the rig's `ip netns add` made it a mount
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"type": "rdma-cni", "mode": "exclusive", "devices": ["lo"]}))
    prefix = ["unshare", "--mount", "--propagation", propagation]
    check = _doctor(built_binary, prefix, conf, tmp_path)["netns-propagation"]
    assert check["status"] == status, check
    if status == "fail":
        assert "private" in check["detail"] and "HostToContainer" in check["fix"]


def test_doctor_finds_networks_on_two_data_dirs(built_binary: list[str],
                                                tmp_path: Path) -> None:
    """A reservation is exclusive only within its data dir: two networks of a node need
    the one (networks with their own gave one address to two pods)."""
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    for i, name in enumerate(("vpc-a", "vpc-b")):
        (conf_dir / f"1{i}-{name}.conflist").write_text(json.dumps(
            {"cniVersion": "0.4.0", "name": name, "plugins": [
                {"type": "bridge"}, {"type": "rdma-cni", "mode": "shared",
                                     "dataDir": str(tmp_path / f"data-{i}")}]}))
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"type": "rdma-cni", "mode": "shared"}))
    check = _doctor(built_binary, [], conf, conf_dir, os.environ["PATH"])["data-dirs"]
    assert check["status"] == "fail", check
    assert "vpc-a in 10-vpc-a.conflist" in check["detail"]
    assert "vpc-b in 11-vpc-b.conflist" in check["detail"]
    (conf_dir / "11-vpc-b.conflist").unlink()
    assert _doctor(built_binary, [], conf, conf_dir, os.environ["PATH"])["data-dirs"][
        "status"] == "ok"




PASS_THROUGH = {"cniVersion": "1.1.0", "name": "n", "type": "rdma-cni", "mode": "shared",
                "residentSocket": ""}


def exec_plugin(binary: Sequence[str], command: str, tmp: Path, shell: str = "",
                **env: str) -> subprocess.CompletedProcess[str]:
    """The plugin as a runtime would run it, with only the CNI variables (``env -i``);
    ``shell``: redirections of its descriptors (``<&-``, ``>&-``, ``>/dev/full``)."""
    conf = {**PASS_THROUGH, "logFile": str(tmp / "log"), "metricsFile": str(tmp / "metrics")}
    full = {"CNI_COMMAND": command, "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0",
            TEST_LOG_FILE: str(tmp / "log"), **env}  # the log of a config not read
    return subprocess.run(["sh", "-c", f'exec "$@" {shell}', "sh", "env", "-i",
                           *[f"{k}={v}" for k, v in full.items()], *binary],
                          input=json.dumps(conf), capture_output=not shell.startswith(">"),
                          stderr=subprocess.PIPE if shell.startswith(">") else None,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
def test_cni_path_is_optional(built_binary: list[str], tmp_path: Path, command: str) -> None:
    """SPEC.md lists CNI_PATH among the optional parameters of ADD, DEL and CHECK: the
    plugin, which delegates to no other, answered 4 without it."""
    netns = {} if command == "DEL" else {"CNI_NETNS": "/proc/self/ns/net"}
    res = exec_plugin(built_binary, command, tmp_path, **netns)
    assert res.returncode == 0, res
    assert "CNI_PATH" not in res.stdout + res.stderr


def test_a_closed_stdin_is_a_code_5_document(built_binary: list[str], tmp_path: Path) -> None:
    res = exec_plugin(built_binary, "DEL", tmp_path, "<&-")
    assert res.returncode == 1, res
    assert json.loads(res.stdout)["msg"] == \
        "failed to read network config from stdin: stdin is closed"
    assert json.loads(res.stdout)["code"] == 5
    assert "Traceback" not in res.stderr and "Failed to execute" not in res.stderr


@pytest.mark.parametrize(("shell", "reason"), [(">&-", "stdout is closed"),
                                               (">/dev/full", "No space left on device")])
@pytest.mark.parametrize("command", ["VERSION", "BOGUS"])
def test_an_unwritable_stdout_is_one_line(built_binary: list[str], tmp_path: Path,
                                          shell: str, reason: str, command: str) -> None:
    res = exec_plugin(built_binary, command, tmp_path, shell)
    assert res.returncode == 1
    lines = res.stderr.splitlines()
    assert lines[-1] == f"rdma-cni: the answer could not be written to stdout: {reason}", \
        res.stderr
    assert "Traceback" not in res.stderr and "Failed to execute" not in res.stderr
    assert len(lines) <= 2  # BOGUS: its own warning (code 4) first, when it ran
