"""nccl_env: the Python implementation on the fake trees (tests/support/nccl_trees.py)."""

from __future__ import annotations

from ipaddress import IPv4Address
from pathlib import Path

import pytest
from support.fakes.sysfs import FakeSys
from support.nccl_trees import BAD, GOOD, base, differing_clean, equal_indices
from support.nccl_trees import tree as _tree

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import CniError
from rdma_cni.tools.nccl_env import (
    compute,
    covering_network,
    discover_pod_ifaces,
    format_exports,
    main,
    natural_key,
)

IP = IPv4Address


@pytest.mark.parametrize("name", sorted(GOOD))
def test_python_compute(tmp_path: Path, name: str) -> None:
    fixture, expected = GOOD[name]
    sysfs = Sysfs(str(_tree(tmp_path, fixture)))
    env = compute(sysfs, discover_pod_ifaces(sysfs))
    assert env == {**expected, "NCCL_SOCKET_IFNAME": "eth0"}


@pytest.mark.parametrize("name", sorted(BAD))
def test_python_errors(tmp_path: Path, name: str) -> None:
    fixture, needle = BAD[name]
    sysfs = Sysfs(str(_tree(tmp_path, fixture)))
    with pytest.raises(CniError, match=needle):
        compute(sysfs, discover_pod_ifaces(sysfs))


def test_compute_explicit_ifaces(tmp_path: Path) -> None:
    sysfs = Sysfs(str(_tree(tmp_path, differing_clean)))
    env = compute(sysfs, {"eth2": IP("192.0.2.11")})
    assert env == {
        "NCCL_IB_HCA": "=mlx5_1:1",
        "NCCL_IB_GID_INDEX": "7",
        "NCCL_SOCKET_IFNAME": "eth0",
    }
    with pytest.raises(CniError, match=r"::ffff:192\.0\.2\.12 owned by pod interface eth2"):
        compute(sysfs, {"eth2": IP("192.0.2.12")})
    with pytest.raises(CniError, match="no RDMA interfaces"):
        compute(sysfs, {})


def test_link_local_and_v1_never_exported(tmp_path: Path) -> None:
    fs = FakeSys(tmp_path)
    base(fs, hcas=1)
    fs.gid("mlx5_0", 1, 2, "::ffff:192.0.2.10", "IB/RoCE v1", "eth1")  # v1 only
    fs.gid("mlx5_0", 1, 3, "fe80::5", "RoCE v2", "eth1")
    with pytest.raises(CniError, match="eth1"):
        compute(Sysfs(str(tmp_path)), {"eth1": IP("192.0.2.10")})


def test_main_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path, equal_indices)
    assert main(["--root", str(root), "--json"]) == 0
    assert '"NCCL_IB_GID_INDEX": "5"' in capsys.readouterr().out
    assert main(["--root", str(root), "--verify"]) == 0  # a fake tree: warning only
    captured = capsys.readouterr()
    assert "export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in captured.out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--root", str(empty)]) == 1
    assert "nccl-env:" in capsys.readouterr().err


def test_helpers() -> None:
    assert sorted(["eth10", "eth2", "net1", "eth"], key=natural_key) == [
        "eth",
        "eth2",
        "eth10",
        "net1",
    ]
    assert str(covering_network([IP("192.0.2.10"), IP("192.0.2.20")])) == "192.0.2.0/27"
    assert str(covering_network([IP("192.0.2.10")])) == "192.0.2.10/32"
    assert str(covering_network([IP("192.0.2.1"), IP("198.51.100.1")])) == "192.0.0.0/5"
    assert format_exports({"A": "=x:1", "B": "a b"}) == "export A==x:1\nexport B='a b'\n"
