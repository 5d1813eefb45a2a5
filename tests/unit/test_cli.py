"""cli: the about text comes from the subcommand table, a subcommand's failure is one
line, and messages show input values without Python reprs or None."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rdma_cni import cli
from rdma_cni.errors import shown
from rdma_cni.logsetup import TEST_LOG_FILE


def test_about_lists_the_table_including_new_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli.SUBCOMMANDS, "probe", "rdma_cni.tools.probe")
    text = cli.about()
    listed = [line.split()[0] for line in text.split("subcommands:\n")[1].split("\n\n")[0]
              .splitlines()]
    assert listed == list(cli.SUBCOMMANDS)
    assert "exit codes: 0 ok, 1 failure, 2 usage error" in text


@pytest.mark.parametrize(("body", "code", "needle"), [
    ("raise RuntimeError('disk on fire\\nsecond line')", 1, "unexpected RuntimeError: disk"),
    ("from rdma_cni.errors import ConfigError\n    raise ConfigError('bad mode')", 1,
     "bad mode"),
    ("open('/nonexistent/x')", 1, "No such file or directory: /nonexistent/x"),
    ("return 3", 3, None),
])
def test_subcommand_failure_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], body: str,
                                        code: int, needle: str | None) -> None:
    (tmp_path / "fakecmd.py").write_text(f"def main(argv):\n    {body}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("fakecmd", None)
    monkeypatch.setitem(cli.SUBCOMMANDS, "fake", "fakecmd")
    assert cli.main(["fake"]) == code
    out, err = capsys.readouterr()
    assert out == ""
    if needle:
        assert err.count("\n") == 1 and err.startswith("rdma-cni fake: ") and needle in err, err
        assert "Traceback" not in err


def test_unknown_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nope\x1b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and '"nope\\u001b"' in err and "doctor" in err


def test_shown() -> None:
    assert shown(None) == "(missing)"
    assert shown("eth\n1") == '"eth\\n1"'
    assert shown(5) == "5" and shown(True) == "true"
    assert shown({"b": 1, "a": None}) == '{"a": null, "b": 1}'
    assert len(shown("x" * 500)) == 64 and shown("x" * 500).endswith("...")
    assert shown(object()).startswith('"<object')


def test_usage_errors_quote_like_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["agent", "--interval", "soon"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == ('rdma-cni agent: argument --interval: expected seconds from 0.1 to 86400, '
                   'got "soon" (see `rdma-cni agent --help`)\n')


@pytest.mark.parametrize("argv", [["install", "--watch", "--interval", "inf"],
                                  ["install", "--watch", "--interval", "0"],
                                  ["install", "--watch", "--label-interval", "nan"],
                                  ["agent", "--interval", "1e309"],
                                  ["device-plugin", "--poll", "-1"],
                                  ["verify", "--timeout", "nan"]])
def test_seconds_that_are_no_period_are_usage_errors(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--interval inf` was a traceback from the watch's prune thread, `0` a busy loop."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected seconds from" in err and "Traceback" not in err


def test_config_errors_show_no_python_types_or_reprs() -> None:
    from rdma_cni.errors import ConfigError
    from rdma_cni.models.netconf import load_netconf

    for bad, needle in (({"mode": "bogus"}, 'mode: Input should be "shared"'),
                        ({"mode": "shared", "routing": None}, "routing: Input should be a "
                                                              "valid dictionary")):
        with pytest.raises(ConfigError) as exc:
            load_netconf({"cniVersion": "1.0.0", "name": "n", "type": "rdma-cni", **bad})
        assert needle in exc.value.msg and "'" not in exc.value.msg, exc.value.msg
        assert "instance of" not in exc.value.msg and "None" not in exc.value.msg


BAD_MODE_ADD = {"cniVersion": "1.0.0", "name": "n", "type": "rdma-cni", "mode": "bogus",
                "residentSocket": "", "runtimeConfig": {
                    "io.kubernetes.cri.pod-annotations": {
                        "k8s.volcengine.com/pod-networks": '[{"cniConf":{"name":"rdma"}}]'}}}
ROOT = Path(__file__).resolve().parents[2]


def _plugin_env(command: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "CNI_COMMAND": command, "CNI_CONTAINERID": "abc",
            "CNI_NETNS": "/var/run/netns/none", "CNI_IFNAME": "eth0",
            "CNI_PATH": "/opt/cni/bin"}


def test_the_exec_d_plugin_ends_with_its_answer_and_log_written(tmp_path: Path) -> None:
    """The entry ends the exec with os._exit (no interpreter teardown): the answer on
    stdout, the exit code and the log line must all be out by then."""
    log = tmp_path / "rdma-cni.log"
    conf = {**BAD_MODE_ADD, "logFile": str(log), "metricsFile": str(tmp_path / "metrics")}
    proc = subprocess.run([sys.executable, "-m", "rdma_cni"], input=json.dumps(conf),
                          capture_output=True, text=True, timeout=60, cwd=str(ROOT),
                          env=_plugin_env("ADD"))
    assert proc.returncode == 1, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["code"] == 7 and answer["msg"].startswith("invalid network configuration: mode")
    lines = log.read_text().splitlines(keepends=True)
    assert len(lines) == 1 and "WARNING ADD failed: code 7" in lines[0]
    assert lines[0].endswith("\n")
    assert "Traceback" not in proc.stderr


def test_a_closed_stdout_is_one_line_on_stderr(tmp_path: Path) -> None:
    """The runtime gone before the answer: exit 1 with one line, not a traceback."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "rdma_cni"], input=b"{}", stdout=write,
                              stderr=subprocess.PIPE, timeout=60, cwd=str(ROOT),
                              env=_plugin_env("VERSION"))
    finally:
        os.close(write)
    assert proc.returncode == 1
    assert proc.stderr.decode() == "rdma-cni: stdout was closed before the answer was written\n"


def _exec_plugin(command: str, conf: dict[str, object], shell: str, log: Path,
                 stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    """The python entry (``python -m rdma_cni``) run by ``sh -c 'exec "$@" <shell>'``:
    ``<&-`` closes its stdin, ``>&-`` its stdout. ``log``: the default log file."""
    return subprocess.run(["sh", "-c", f'exec "$@" {shell}', "sh", sys.executable, "-m",
                           "rdma_cni"], input=json.dumps(conf), stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=60, cwd=str(ROOT),
                          env={**_plugin_env(command), TEST_LOG_FILE: str(log)})


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
def test_a_closed_stdin_is_a_code_5_document(tmp_path: Path, command: str) -> None:
    log = tmp_path / "log"
    proc = _exec_plugin(command, BAD_MODE_ADD, "<&-", log)
    assert proc.returncode == 1, proc.stderr
    msg = "failed to read network config from stdin: stdin is closed"
    assert json.loads(proc.stdout) == {"cniVersion": "1.1.0", "code": 5, "msg": msg}
    assert proc.stderr == f"rdma-cni: WARNING {command} failed: code 5: {msg}\n"
    assert f"WARNING {command} failed: code 5: {msg}" in log.read_text()


def test_version_answers_with_a_closed_stdin(tmp_path: Path) -> None:
    proc = _exec_plugin("VERSION", {}, "<&-", tmp_path / "log")
    assert proc.returncode == 0 and json.loads(proc.stdout)["cniVersion"] == "1.1.0", proc


@pytest.mark.parametrize("command", ["VERSION", "ADD"])
def test_a_closed_stdout_fd_is_one_line_and_nothing_done(tmp_path: Path, command: str) -> None:
    log = tmp_path / "log"
    proc = _exec_plugin(command, {**BAD_MODE_ADD, "logFile": str(log)}, ">&-", log,
                        stdout=None)
    assert proc.returncode == 1
    assert proc.stderr == "rdma-cni: the answer could not be written to stdout: " \
                          "stdout is closed\n"
    assert not log.exists()  # refused before the command ran


@pytest.mark.parametrize("command", ["VERSION", "ADD"])
def test_a_full_stdout_is_one_line_on_stderr(tmp_path: Path, command: str) -> None:
    """``> /dev/full``: the write of the answer fails; no second document is tried, no
    traceback. ADD's own warning (code 7) comes first."""
    log = tmp_path / "log"
    proc = _exec_plugin(command, {**BAD_MODE_ADD, "logFile": str(log)}, ">/dev/full", log,
                        stdout=None)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == \
        "rdma-cni: the answer could not be written to stdout: No space left on device"
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) <= 2, proc.stderr


@pytest.mark.parametrize("target", ["/dev/stdout", "/proc/self/fd/1", "stdout-file"])
def test_a_log_file_that_is_stdout_gets_nothing(tmp_path: Path, target: str) -> None:
    """logFile naming stdout (or the file stdout is redirected to) would put log lines
    before the answer: the plugin logs to stderr only and says so once."""
    out = tmp_path / "stdout-file"
    path = str(out) if target == "stdout-file" else target
    with out.open("w") as stdout:
        proc = subprocess.run([sys.executable, "-m", "rdma_cni"],
                              input=json.dumps({**BAD_MODE_ADD, "logFile": path}),
                              stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60,
                              cwd=str(ROOT), env=_plugin_env("ADD"))
    assert proc.returncode == 1
    answer = json.loads(out.read_text())  # the one document, nothing before or after
    assert answer["code"] == 7
    lines = proc.stderr.splitlines()
    assert lines[0] == f'rdma-cni: logFile "{path}" is stdout, where the answer goes: ' \
                       "nothing is logged there (warnings still go to stderr)"
    assert len(lines) == 2 and lines[1].startswith("rdma-cni: WARNING ADD failed: code 7")
