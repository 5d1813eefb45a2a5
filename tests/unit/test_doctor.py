"""doctor: every check against fake trees and temp files."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from ipaddress import IPv4Interface
from pathlib import Path

import pytest

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.doctor import Facts, load_config, main, run_checks
from rdma_cni.errors import NicUnavailable
from rdma_cni.rdma_mode import check_mode, parse_system_show, read_netns_mode

sys.path.insert(0, str(Path(__file__).parent))
from fakesys import FakeSys

PRIMARY = {"type": "vpc-cni"}
OURS = {"type": "rdma-cni", "mode": "shared"}


@pytest.fixture
def facts(tmp_path: Path) -> Facts:
    fs = FakeSys(tmp_path / "root")
    fs.netdev("eth1", pci="0000:3b:00.0")
    fs.ibdev("mlx5_0", pci="0000:3b:00.0", uverbs="uverbs0")
    kubelet = tmp_path / "config.yaml"
    kubelet.write_text("kind: KubeletConfiguration\ntopologyManagerPolicy: best-effort\n")
    (tmp_path / "dev-ib").mkdir()
    binary = tmp_path / "rdma-cni"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    conf = tmp_path / "net.d"
    conf.mkdir()
    (conf / "10-vpc.conflist").write_text(
        json.dumps({"cniVersion": "0.4.0", "name": "vpc-cni", "plugins": [PRIMARY, OURS]})
    )
    addrs = {"eth1": [IPv4Interface("192.0.2.1/24")]}
    return Facts(
        sysfs=Sysfs(str(fs.root)),
        addrs=lambda n: addrs.get(n, []),
        netns_mode=lambda: "shared",
        kubelet_config=str(kubelet),
        dev_infiniband=str(tmp_path / "dev-ib"),
        plugin_binary=str(binary),
        cni_conf_dir=str(conf),
    )


def _status(checks: list, name: str) -> str:
    return next(c.status for c in checks if c.name == name)


def test_healthy_node(facts: Facts, tmp_path: Path) -> None:
    checks = run_checks({**OURS, "dataDir": str(tmp_path / "data")}, facts=facts)
    assert [(c.name, c.status) for c in checks] == [
        ("nics", "ok"),
        ("netmask", "ok"),
        ("rdma-netns", "ok"),
        ("topology", "ok"),
        ("dev-infiniband", "ok"),
        ("binary", "ok"),
        ("conflist", "ok"),
        ("data-dir", "ok"),
    ]


def test_failures(facts: Facts, tmp_path: Path) -> None:
    Path(facts.kubelet_config).write_text('topologyManagerPolicy: "single-numa-node"\n')
    os.rmdir(facts.dev_infiniband)
    os.unlink(facts.plugin_binary)
    (Path(facts.cni_conf_dir) / "10-vpc.conflist").write_text(
        json.dumps({"plugins": [OURS, PRIMARY]})
    )
    bad = replace(
        facts, addrs=lambda n: [IPv4Interface("192.0.2.1/30")], netns_mode=lambda: "exclusive"
    )
    checks = run_checks({**OURS, "dataDir": str(tmp_path / "d")}, facts=bad)
    by = {c.name: c for c in checks}
    assert by["netmask"].status == "fail" and "eth1 192.0.2.1/30" in by["netmask"].detail
    assert by["rdma-netns"].status == "fail" and "exclusive" in by["rdma-netns"].detail
    assert by["topology"].status == "fail" and "single-numa-node" in by["topology"].detail
    assert {by[n].status for n in ("dev-infiniband", "binary", "conflist")} == {"fail"}
    assert all(c.fix for c in checks if c.status == "fail")


def test_nic_checks(facts: Facts, tmp_path: Path) -> None:
    assert _status(run_checks({**OURS, "devices": ["eth1", "gone"]}, facts=facts), "nics") == "fail"
    fs = FakeSys(tmp_path / "root")
    fs.write("sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN")
    checks = run_checks(OURS, facts=facts)
    assert _status(checks, "nics") == "fail" and "DOWN" in checks[0].detail
    empty = Sysfs(str(tmp_path / "nothing"))
    assert _status(run_checks(OURS, empty, facts), "nics") == "fail"


def test_mode_dependent_checks(facts: Facts) -> None:
    Path(facts.kubelet_config).write_text("kind: KubeletConfiguration\n")  # policy none
    excl = replace(facts, addrs=lambda n: [], netns_mode=lambda: None)
    checks = run_checks({"mode": "exclusive"}, facts=excl)
    assert _status(checks, "netmask") == "ok"  # exclusive needs no /30 rule
    assert _status(checks, "rdma-netns") == "warn"
    assert _status(checks, "topology") == "fail"
    host = run_checks({"mode": "shared-host"}, facts=excl)
    assert _status(host, "topology") == "ok" and _status(host, "netmask") == "fail"
    assert _status(run_checks({}, facts=facts), "config") == "fail"


def test_main_json_and_exit(
    facts: Facts, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**OURS, "dataDir": str(tmp_path / "data")}))
    assert main(["--json", "--config", str(cfg)], facts) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {c["status"] for c in doc} == {"ok"}
    os.unlink(facts.plugin_binary)
    assert main(["--config", str(cfg)], facts) == 1
    out = capsys.readouterr().out
    assert "[FAIL] binary:" in out and "fix: run `rdma-cni install`" in out
    # the entry as libcni runs it: the list's name and cniVersion copied in
    want = {**OURS, "name": "vpc-cni", "cniVersion": "0.4.0"}
    assert load_config(None, facts.cni_conf_dir) == want


def test_rdma_mode() -> None:
    assert parse_system_show('[{"netns":"exclusive","privileged-qkey":"off"}]') == "exclusive"
    assert parse_system_show('{"netns":"shared"}') == "shared"
    assert parse_system_show("netns shared copy-on-fork on") == "shared"
    assert parse_system_show("nonsense") is None
    assert read_netns_mode(lambda cmd: None) is None
    assert read_netns_mode(lambda cmd: '[{"netns":"shared"}]') == "shared"
    check_mode("exclusive", "exclusive")
    check_mode("shared", "shared")
    check_mode("shared", None)
    with pytest.raises(NicUnavailable, match=r"shared-multi.*exclusive") as exc:
        check_mode("shared-multi", "exclusive")
    assert exc.value.code == 104
