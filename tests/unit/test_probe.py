"""`rdma-cni probe`: each check passes on what the component really left and fails,
with one line naming the problem, when it is not so. The resident check runs against
a real `rdma-cni serve` socket (the in-process server class) on a temp path."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.store.run import heartbeat
from rdma_cni.store.run.pluginstatus import ident
from rdma_cni.tools import probe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: k8srender
import k8srender

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def health_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(heartbeat.HEALTH_DIR_ENV, str(tmp_path))
    return tmp_path


def _run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    rc = probe.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_agent_heartbeat_fresh_stale_missing(capsys: Any, health_dir: Path) -> None:
    rc, _, err = _run(capsys, "agent")
    assert rc == 1 and "has not finished a pass yet" in err and err.count("\n") == 1
    heartbeat.beat("agent", 30.0)
    assert _run(capsys, "agent", "-q") == (0, "", "")
    beat = Path(heartbeat.heartbeat_path("agent"))
    doc = json.loads(beat.read_text())
    doc["time"] -= 3 * 30 + probe.GRACE + 1
    beat.write_text(json.dumps(doc))
    rc, _, err = _run(capsys, "agent")
    assert rc == 1 and "last pass was" in err and "limit 120 s" in err
    beat.write_text("{not json")
    rc, _, err = _run(capsys, "agent")
    assert rc == 1 and "failed to read" in err


def test_device_plugin_needs_socket_and_registration_with_the_current_kubelet(
        capsys: Any, tmp_path: Path) -> None:
    sock, kubelet = tmp_path / "rdma-cni-rdma.sock", tmp_path / "kubelet.sock"
    heartbeat.beat("device-plugin", 5.0, socket=str(sock), kubelet=str(kubelet), registered=None)
    rc, _, err = _run(capsys, "device-plugin")
    assert rc == 1 and f'device plugin socket "{sock}" is missing' in err
    sock.touch()
    rc, _, err = _run(capsys, "device-plugin")
    assert rc == 1 and "registration socket" in err
    kubelet.touch()
    rc, _, err = _run(capsys, "device-plugin")
    assert rc == 1 and "not registered" in err
    heartbeat.beat("device-plugin", 5.0, socket=str(sock), kubelet=str(kubelet),
               registered=list(ident(str(kubelet)) or ()))
    assert _run(capsys, "device-plugin")[0] == 0
    fresh = tmp_path / "kubelet.new"
    fresh.touch()     # the kubelet restarted: a new socket (another inode), not yet
    fresh.rename(kubelet)  # registered with
    rc, _, err = _run(capsys, "device-plugin")
    assert rc == 1 and "not registered" in err


@pytest.mark.parametrize("stamp", [float("nan"), float("inf"), float("-inf"), True,
                                   "1e9", None])
def test_agent_heartbeat_of_no_finite_time_fails(capsys: Any, stamp: object) -> None:
    """A heartbeat whose time is NaN passed ("ok: agent pass nan s ago": NaN compares
    false with the limit), one of infinite time passed or failed by chance."""
    heartbeat.beat("agent", 30.0)
    beat = Path(heartbeat.heartbeat_path("agent"))
    beat.write_text(json.dumps({**json.loads(beat.read_text()), "time": stamp}))
    rc, out, err = _run(capsys, "agent")
    assert (rc, out) == (1, "") and "not a heartbeat" in err and err.count("\n") == 1


def test_agent_heartbeat_from_the_future_is_not_fresh(capsys: Any) -> None:
    """A time ahead of now beyond the skew allowed counted as a pass just made."""
    heartbeat.beat("agent", 30.0)
    beat = Path(heartbeat.heartbeat_path("agent"))
    doc = json.loads(beat.read_text())
    beat.write_text(json.dumps({**doc, "time": doc["time"] + 3600}))
    rc, _, err = _run(capsys, "agent")
    assert rc == 1 and "in the future" in err and err.count("\n") == 1
    beat.write_text(json.dumps({**doc, "time": doc["time"] + probe.SKEW / 2}))
    assert _run(capsys, "agent", "-q") == (0, "", "")  # a small skew is fine


@pytest.mark.parametrize("field", ["socket", "kubelet"])
def test_device_plugin_heartbeat_with_a_nul_in_a_path_fails_in_one_line(
        capsys: Any, tmp_path: Path, field: str) -> None:
    """A NUL in a path of the heartbeat gave "unexpected ValueError: embedded null
    byte" (os.stat refuses it) instead of the probe's failure line."""
    sock, kubelet = tmp_path / "rdma-cni-rdma.sock", tmp_path / "kubelet.sock"
    sock.touch()
    kubelet.touch()
    paths = {"socket": str(sock), "kubelet": str(kubelet)}
    paths[field] += "\0\x1b[2J"
    heartbeat.beat("device-plugin", 5.0, registered=None, **paths)
    rc, out, err = _run(capsys, "device-plugin")
    assert (rc, out) == (1, "") and "is missing" in err and err.count("\n") == 1
    assert "\x1b" not in err and "\0" not in err


def test_cni_watch_entry_and_binary(capsys: Any, tmp_path: Path) -> None:
    conf, bin_dir = tmp_path / "net.d", tmp_path / "bin"
    conf.mkdir()
    bin_dir.mkdir()
    args = ("cni-watch", "--cni-conf-dir", str(conf), "--cni-bin-dir", str(bin_dir))
    rc, _, err = _run(capsys, *args)
    assert rc == 1 and f"no CNI config in {conf}" in err
    primary = {"cniVersion": "0.4.0", "name": "p", "plugins": [{"type": "bridge"}]}
    (conf / "10-p.conflist").write_text(json.dumps(primary))
    rc, _, err = _run(capsys, *args)
    assert rc == 1 and "does not chain rdma-cni" in err
    primary["plugins"].append({"type": "rdma-cni", "mode": "shared"})
    (conf / "10-p.conflist").write_text(json.dumps(primary))
    rc, _, err = _run(capsys, *args)
    assert rc == 1 and "rdma-cni is missing" in err
    (bin_dir / "rdma-cni").write_text("#!/bin/sh\n")
    (bin_dir / "rdma-cni").chmod(0o755)
    rc, out, _ = _run(capsys, *args)
    assert rc == 0 and out.startswith("rdma-cni probe cni-watch: ok: entry chained in ")
    # a primary that keeps its conflist elsewhere: the link's absolute target is read
    # under --host-root, as install reads it (without it, "no CNI config": the liveness
    # probe restarted cni-watch forever)
    host = tmp_path / "host"
    (host / "etc" / "vpc").mkdir(parents=True)
    (conf / "10-p.conflist").rename(host / "etc" / "vpc" / "10-p.conflist")
    (conf / "10-p.conflist").symlink_to("/etc/vpc/10-p.conflist")
    rc, out, err = _run(capsys, *args, "--host-root", str(host))
    assert rc == 0, err
    (conf / "10-p.conflist").unlink()
    (conf / "10-p.conflist").write_text("{broken")
    rc, _, err = _run(capsys, *args)
    assert rc == 1 and "failed to parse config" in err


@pytest.fixture
def resident(tmp_path: Path) -> Iterator[Path]:
    from rdma_cni.resident.server import Server

    path = tmp_path / "r.sock"
    server = Server(str(path))
    server.bind()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield path
    server.stop()
    thread.join(5)


def test_serve_answers_version(capsys: Any, resident: Path) -> None:
    rc, out, _ = _run(capsys, "serve", "--socket", str(resident))
    assert rc == 0 and "answers" in out


def test_serve_missing_or_silent_socket(capsys: Any, tmp_path: Path) -> None:
    rc, _, err = _run(capsys, "serve", "--socket", str(tmp_path / "none.sock"))
    assert rc == 1 and "is missing" in err
    silent = tmp_path / "silent.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(silent))   # a socket whose server hangs up without answering
    s.listen(1)

    def hang_up() -> None:
        conn, _ = s.accept()
        conn.close()

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    try:
        rc, _, err = _run(capsys, "serve", "--socket", str(silent))
    finally:
        thread.join(5)
        s.close()
    assert rc == 1 and "did not answer" in err


def test_every_long_running_container_of_the_daemonset_has_both_probes() -> None:
    spec = k8srender.pod_spec(k8srender.render(k8srender.BASE))
    for c in spec["containers"]:
        for kind in ("livenessProbe", "readinessProbe"):
            p = c[kind]
            if "exec" in p:
                cmd = p["exec"]["command"]
                assert cmd[:2] == ["rdma-cni", "probe"] and cmd[2] in probe.CHECKS, c["name"]
            else:
                assert c["name"] == "exporter" and p["httpGet"]["port"] == 9469
