"""doctor in a cluster (issue 32 item 4): ``--kubelet-root`` (and the DaemonSet's
environment) decide where the kubelet's config, PodResources socket and checkpoint are
read; a read-only data dir is said, not failed. No root."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdma_cni.tools import doctor
from rdma_cni.tools.doctor import Facts, main
from rdma_cni.tools.doctor_files import check_datadir
from rdma_cni.tools.doctor_kubelet import check_sources

OURS = {"type": "rdma-cni", "mode": "shared"}


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A kubelet root elsewhere than /var/lib/kubelet: config.yaml, a listening
    PodResources socket, the device-plugin checkpoint."""
    kubelet = tmp_path / "k0s" / "kubelet"
    (kubelet / "pod-resources").mkdir(parents=True)
    (kubelet / "device-plugins").mkdir()
    (kubelet / "config.yaml").write_text("topologyManagerPolicy: best-effort\n")
    (kubelet / "device-plugins" / "kubelet_internal_checkpoint").write_text("{}")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(kubelet / "pod-resources" / "kubelet.sock"))
    sock.listen()
    try:
        yield kubelet
    finally:
        sock.close()


def run(argv: list[str], facts: Facts, capsys: pytest.CaptureFixture[str]) -> dict[str, dict]:
    main(["--json", *argv], facts)
    return {c["name"]: c for c in json.loads(capsys.readouterr().out)}


def config(tmp_path: Path, kubelet: Path | None) -> str:
    entry: dict[str, object] = {**OURS}
    if kubelet is not None:  # as `install --kubelet-dir` writes it
        entry["kubelet"] = {"podResourcesSocket": f"{kubelet}/pod-resources/kubelet.sock",
                            "checkpointFile":
                                f"{kubelet}/device-plugins/kubelet_internal_checkpoint"}
    path = tmp_path / "entry.json"
    path.write_text(json.dumps(entry))
    return str(path)


def test_kubelet_root_is_where_the_kubelet_is_read(tmp_path: Path, root: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    facts = Facts(config_record=str(tmp_path / "none.json"))
    by = run(["--config", config(tmp_path, root), "--kubelet-root", str(root)], facts, capsys)
    assert by["topology"]["status"] == "ok"  # read from <root>/config.yaml
    assert by["kubelet-sources"] == {
        "name": "kubelet-sources", "status": "ok", "fix": "",
        "detail": f"the kubelet's PodResources socket {root}/pod-resources/kubelet.sock"}

    (root / "pod-resources" / "kubelet.sock").unlink()  # the kubelet is down: its checkpoint
    by = run(["--config", config(tmp_path, root), "--kubelet-root", str(root)], facts, capsys)
    assert by["kubelet-sources"]["status"] == "ok"
    assert f"{root}/device-plugins/kubelet_internal_checkpoint" in by["kubelet-sources"]["detail"]

    (root / "device-plugins" / "kubelet_internal_checkpoint").unlink()
    by = run(["--config", config(tmp_path, root), "--kubelet-root", str(root)], facts, capsys)
    assert by["kubelet-sources"]["status"] == "warn"
    assert "discovery order" in by["kubelet-sources"]["detail"]


def test_a_config_reading_the_default_root_fails_against_another(
        tmp_path: Path, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = Facts(config_record=str(tmp_path / "none.json"))
    by = run(["--config", config(tmp_path, None), "--kubelet-root", str(root)], facts, capsys)
    check = by["kubelet-sources"]
    assert check["status"] == "fail"
    assert "/var/lib/kubelet/pod-resources/kubelet.sock" in check["detail"]
    assert check["fix"].startswith(f"rdma-cni install --kubelet-dir {root}")


def test_the_daemonsets_environment_names_the_paths(tmp_path: Path, root: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    host = tmp_path / "host"
    conf_dir, bin_dir = host / "etc" / "cni" / "net.d", host / "opt" / "cni" / "bin"
    conf_dir.mkdir(parents=True)
    bin_dir.mkdir(parents=True)
    entry = json.loads(Path(config(tmp_path, root)).read_text())
    (conf_dir / "10-vpc.conflist").write_text(json.dumps(
        {"cniVersion": "0.4.0", "name": "vpc-cni", "plugins": [{"type": "vpc-cni"}, entry]}))
    (bin_dir / "rdma-cni").write_text("#!/bin/sh\n")
    (bin_dir / "rdma-cni").chmod(0o755)
    monkeypatch.setenv(doctor.ENV["kubelet_root"], str(root))
    monkeypatch.setenv(doctor.ENV["cni_conf_dir"], str(conf_dir))
    monkeypatch.setenv(doctor.ENV["cni_bin_dir"], str(bin_dir))
    by = run([], Facts(config_record=str(tmp_path / "none.json")), capsys)  # no option at all
    assert {n: by[n]["status"] for n in ("topology", "kubelet-sources", "conflist", "binary")} \
        == dict.fromkeys(("topology", "kubelet-sources", "conflist", "binary"), "ok")
    assert str(conf_dir) in by["conflist"]["detail"]
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"schema": 1, "stale": ["x changed"]}))
    by = run(["--config-record", str(record)], Facts(), capsys)
    assert by["restart"]["status"] == "warn" and "x changed" in by["restart"]["detail"]
    # a flag wins over the environment
    other = tmp_path / "elsewhere"
    by = run(["--kubelet-root", str(other)], Facts(config_record=str(tmp_path / "n")), capsys)
    assert by["kubelet-sources"]["status"] == "fail" and str(other) in by["kubelet-sources"]["fix"]


def test_without_a_root_the_config_paths_are_read(tmp_path: Path, root: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(doctor.ENV["kubelet_root"], raising=False)
    facts = Facts(config_record=str(tmp_path / "none.json"))
    by = run(["--config", config(tmp_path, root)], facts, capsys)
    assert by["kubelet-sources"]["status"] == "ok" and str(root) in by["kubelet-sources"]["detail"]
    assert check_sources({}, str(root)).status == "ok"  # no entry: `conflist` says so
    no_alloc = tmp_path / "config-alloc.json"
    no_alloc.write_text(json.dumps({**OURS, "allocation": "config"}))
    assert run(["--config", str(no_alloc), "--kubelet-root", str(tmp_path / "x")],
               facts, capsys)["kubelet-sources"]["status"] == "ok"


def test_a_read_only_data_dir_is_said_not_failed(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import tempfile

    def read_only(*args: object, **kwargs: object) -> object:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    check = check_datadir(str(tmp_path))
    assert check.status == "warn" and "read-only here" in check.detail

    def denied(*args: object, **kwargs: object) -> object:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", denied)
    assert check_datadir(str(tmp_path)).status == "fail"
