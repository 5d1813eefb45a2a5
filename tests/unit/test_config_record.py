"""Configuration changes need a restart, and the node says when one is due (issue 32
item 2): cni-watch compares the ConfigMap file (updated in place by the kubelet) and
the node label with what the pod started with; the exporter publishes
``rdma_cni_config_stale``; ``doctor`` prints whether a restart is needed. No root."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from rdma_cni.errors import ConfigError
from rdma_cni.kube.exporter.configstate import ConfigCollector
from rdma_cni.store.run import configrecord
from rdma_cni.tools.doctor_files import check_restart


class Label:
    """The node label as the API would answer, and how often it was asked."""

    def __init__(self, value: str | None) -> None:
        self.value: str | None = value
        self.reads = 0
        self.error = ""

    def __call__(self) -> str | None:
        self.reads += 1
        if self.error:
            raise ConfigError(self.error)
        return self.value


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def started(tmp_path: Path, label: str | None = "shared", used: bool = True,
            interval: float | None = 30.0) -> tuple[Path, Path]:
    """A ConfigMap file (a mounted volume) and the record install wrote at the start."""
    cfg = tmp_path / "etc" / "config.json"
    cfg.parent.mkdir(exist_ok=True)
    cfg.write_text(json.dumps({"dataDir": "/var/lib/cni/rdma-cni"}))
    path = tmp_path / "run" / configrecord.NAME
    path.parent.mkdir(exist_ok=True)
    configrecord.write(str(path), configrecord.started(str(cfg), label, used, "shared",
                                                       interval, 1000.0))
    return cfg, path


def scrape(path: Path) -> str:
    registry = CollectorRegistry()
    registry.register(ConfigCollector(str(path)))
    return generate_latest(registry).decode()


def test_nothing_changed_is_not_stale(tmp_path: Path) -> None:
    _, path = started(tmp_path)
    label = Label("shared")
    assert configrecord.Checker(str(path), label, Clock(1030.0)).once() == []
    assert "rdma_cni_config_stale 0.0" in scrape(path)
    assert "rdma_cni_config_checked_timestamp_seconds 1030.0" in scrape(path)
    check = check_restart(str(path), 1040.0)
    assert (check.status, check.detail) == ("ok", "not needed: the ConfigMap's file and the "
                                                  "node label are what the pod started with "
                                                  "(checked 10 s ago)")


def test_an_edited_configmap_file_is_stale(tmp_path: Path) -> None:
    cfg, path = started(tmp_path)
    cfg.write_text(json.dumps({"dataDir": "/var/lib/cni/rdma-cni", "mtu": 4200}))
    stale = configrecord.Checker(str(path), Label("shared"), Clock(1030.0)).once()
    assert stale and "(the ConfigMap) changed since the pod started" in stale[0]
    assert "rdma_cni_config_stale 1.0" in scrape(path)
    check = check_restart(str(path), 1040.0)
    assert check.status == "warn" and check.detail.startswith("needed: ")
    assert check.fix.startswith("kubectl rollout restart -n <namespace> daemonset/rdma-cni")


def test_a_changed_or_removed_node_label_is_stale(tmp_path: Path) -> None:
    _, path = started(tmp_path)
    label = Label("exclusive")
    checker = configrecord.Checker(str(path), label, Clock(1030.0))
    assert checker.once() == ["the node label vke.node.rdma.mode is 'exclusive', the pod "
                              "started with 'shared'"]
    label.value = None
    checker.clock = Clock(1030.0 + configrecord.LABEL_EVERY)
    assert checker.once() == ["the node label vke.node.rdma.mode is unset, the pod started "
                              "with 'shared'"]
    assert label.reads == 2


def test_the_label_is_read_at_most_every_label_every_seconds(tmp_path: Path) -> None:
    _, path = started(tmp_path)
    label = Label("shared")
    clock = Clock(1030.0)
    checker = configrecord.Checker(str(path), label, clock)
    for step in range(10):
        clock.now = 1030.0 + step * 30
        checker.once()
    assert label.reads == 1
    label.error = "failed to read node n from the Kubernetes API: 503"  # changes nothing
    clock.now += configrecord.LABEL_EVERY
    assert checker.once() == [] and label.reads == 2


def test_a_mode_given_by_flag_ignores_the_label(tmp_path: Path) -> None:
    _, path = started(tmp_path, label=None, used=False)
    label = Label("exclusive")
    assert configrecord.Checker(str(path), label, Clock(1030.0)).once() == []
    assert label.reads == 0


def test_a_check_that_stopped_is_said(tmp_path: Path) -> None:
    _, path = started(tmp_path)
    check = check_restart(str(path), 1000.0 + 3 * 30 + 61)
    assert check.status == "warn" and "last checked 151 s ago" in check.detail
    (tmp_path / "once").mkdir()
    _, path = started(tmp_path / "once", interval=None)  # install without --watch
    assert check_restart(str(path), 99999.0).detail.startswith("not needed as of the pod's")


def test_no_record_no_metric_and_doctor_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    assert scrape(missing).strip() == ""
    assert check_restart(str(missing), 0.0).status == "ok"
    assert configrecord.Checker(str(missing), Label("shared")).once() is None
    missing.write_text("not json")
    assert configrecord.read(str(missing)) is None


def test_the_loop_checks_every_interval_until_stopped(tmp_path: Path) -> None:
    cfg, path = started(tmp_path)
    cfg.write_text("{}")
    stop = threading.Event()
    checker = configrecord.Checker(str(path), Label("shared"))
    thread = threading.Thread(target=checker.loop, args=(0.0, stop))
    thread.start()
    try:
        for _ in range(50):
            if configrecord.read(str(path))["stale"]:  # type: ignore[index]
                break
            stop.wait(0.1)
    finally:
        stop.set()
        thread.join(5)
    assert configrecord.read(str(path))["stale"]  # type: ignore[index]
