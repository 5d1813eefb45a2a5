"""rdma-cni ls: table and JSON from the state store."""

from __future__ import annotations

import json
from ipaddress import IPv4Interface
from pathlib import Path

import pytest

from rdma_cni.store.core import Store
from rdma_cni.store.state import make_state
from rdma_cni.tools import ls
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import READY
from rdma_cni.vocab.plan import IfacePlan


def _fill(store: Store) -> None:
    for cid, pod, mode, ips in (("c" * 64, "ns/b", "exclusive", ["198.51.100.17"]),
                                ("a" * 64, "ns/a", "shared-multi",
                                 ["198.51.100.2", "198.51.100.3"])):
        plans = [IfacePlan(k=k, name=f"eth{k + 1}", tmp="t", nic=f"rdnic{k}",
                           kind="physical" if mode == "exclusive" else "macvlan", mtu=1500,
                           table=100 + k, addresses=(IPv4Interface(f"{ip}/28"),))
                 for k, ip in enumerate(ips)]
        result = {"interfaces": [{"name": p.name, "mac": f"02:00:00:00:00:1{p.k}"} for p in plans]}
        store.put_state(AttachmentKey("vpc-cni", cid, "eth0"), make_state(
            READY, mode, "/var/run/netns/x", pod, "u", 20000, plans, result))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    store = Store(str(tmp_path / "data"))
    _fill(store)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"type": "rdma-cni", "mode": "shared", "dataDir": store.root}))
    return cfg


def test_rows_are_sorted_per_interface(config: Path) -> None:
    rows = ls.rows(Store(json.loads(config.read_text())["dataDir"]).list_states())
    assert [(r["pod"], r["interface"], r["nic"], r["address"], r["mac"], r["mode"])
            for r in rows] == [
        ("ns/a", "eth1", "rdnic0", "198.51.100.2/28", "02:00:00:00:00:10", "shared-multi"),
        ("ns/a", "eth2", "rdnic1", "198.51.100.3/28", "02:00:00:00:00:11", "shared-multi"),
        ("ns/b", "eth1", "rdnic0", "198.51.100.17/28", "02:00:00:00:00:10", "exclusive"),
    ]


def test_main_json_and_table(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ls.main(["--json", "--config", str(config)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out) == 3 and out[0]["container"] == "a" * 64 and out[2]["status"] == "ready"
    assert ls.main(["--config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["POD", "CONTAINER", "INTERFACE", "NIC", "ADDRESS", "MAC",
                                "MODE", "STATUS"]
    assert lines[1].split()[:4] == ["ns/a", "a" * 12, "eth1", "rdnic0"]
    assert len(lines) == 4


def test_main_reads_the_conflist_and_reports_bad_config(
        config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    entry = json.loads(config.read_text())
    (conf_dir / "10-x.conflist").write_text(json.dumps(
        {"cniVersion": "0.4.0", "name": "vpc-cni", "plugins": [{"type": "vpc-cni"}, entry]}))
    assert ls.main(["--json"], conf_dir=str(conf_dir)) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    assert ls.main(["--config", str(bad)]) == 1
    assert "not a JSON object" in capsys.readouterr().err


def test_empty_store_prints_only_the_header(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"dataDir": str(tmp_path / "none")}))
    assert ls.main(["--config", str(cfg)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_ls_never_changes_the_data_dir(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A corrupt record was moved aside by `ls` (the store's tidying reader), and on a
    data dir mounted read-only (the device plugin's container) `ls` failed listing
    nothing. It reads the dir as the exporter does, and says what it could not read."""
    data = Path(json.loads(config.read_text())["dataDir"])
    (data / "state" / ("0" * 40 + ".json")).write_text("{not json")
    before = sorted((p.relative_to(data), p.read_bytes()) for p in data.rglob("*") if p.is_file())
    assert ls.main(["--json", "--config", str(config)]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)) == 3
    assert "1 state record(s)" in captured.err and "not listed" in captured.err
    after = sorted((p.relative_to(data), p.read_bytes()) for p in data.rglob("*") if p.is_file())
    assert before == after
