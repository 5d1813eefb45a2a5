"""nccl_env: the Python implementation and scripts/nccl_env.sh on the same fake trees."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from ipaddress import IPv4Address
from pathlib import Path

import pytest

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

sys.path.insert(0, str(Path(__file__).parent))
from support.fakes.sysfs import FakeSys

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "nccl_env.sh"
SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]
IP = IPv4Address


def _base(fs: FakeSys, hcas: int = 2) -> None:
    for name in ("lo", "eth0", "eth1", "eth2"):
        fs.netdev(name)
    for i in range(hcas):
        fs.ibdev(f"mlx5_{i}", pci=f"0000:3{i}:00.0", slots=10)
        # the host's own link-local pair, never exported
        fs.gid(f"mlx5_{i}", 1, 0, f"fe80::{i + 1}", "IB/RoCE v1", f"ens{i}")
        fs.gid(f"mlx5_{i}", 1, 1, f"fe80::{i + 1}", "RoCE v2", f"ens{i}")
    fs.pod_addr("eth0", "203.0.113.5/24")


def equal_indices(fs: FakeSys) -> None:
    _base(fs)
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.1", "ens0")  # host
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.10", "eth1")
    fs.roce_pair("mlx5_1", 1, 4, "198.51.100.10", "eth2")
    fs.roce_pair("mlx5_1", 1, 6, "198.51.100.11", "eth1")  # another pod's eth1
    fs.pod_addr("eth1", "192.0.2.10/24")
    fs.pod_addr("eth2", "198.51.100.10/24")


def differing_clean(fs: FakeSys) -> None:
    _base(fs)
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.1", "ens0")  # host, same /24
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.10", "eth1")
    fs.roce_pair("mlx5_1", 1, 6, "192.0.2.11", "eth2")
    fs.pod_addr("eth1", "192.0.2.10/24")
    fs.pod_addr("eth2", "192.0.2.11/24")


def differing_dirty(fs: FakeSys) -> None:
    _base(fs)
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.1", "ens0")  # host: inside 192.0.2.0/27
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.10", "eth1")
    fs.roce_pair("mlx5_1", 1, 6, "192.0.2.20", "eth2")
    fs.pod_addr("eth1", "192.0.2.10/24")
    fs.pod_addr("eth2", "192.0.2.20/24")


def no_pod_gid(fs: FakeSys) -> None:
    _base(fs)
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.1", "ens0")
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.99", "eth1")  # another pod's eth1
    fs.pod_addr("eth1", "192.0.2.10/24")


def only_socket(fs: FakeSys) -> None:
    _base(fs, hcas=1)


def natural_order(fs: FakeSys) -> None:
    _base(fs)
    fs.netdev("eth10")
    fs.roce_pair("mlx5_1", 1, 2, "192.0.2.10", "eth2")
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.11", "eth10")
    fs.pod_addr("eth10", "192.0.2.11/24")
    fs.pod_addr("eth2", "192.0.2.10/24")


def no_fib_trie(fs: FakeSys) -> None:
    equal_indices(fs)
    (fs.root / "sys/class/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/7").write_text("eth9\n")
    (fs.root / "proc/net/fib_trie").unlink()
    (fs.root / "proc/net/route").unlink()
    fs.gid("mlx5_1", 1, 7, "::ffff:198.51.100.11", "RoCE v2", "eth9")
    fs.gid("mlx5_1", 1, 6, "::ffff:198.51.100.11", "RoCE v2", "eth9")  # not eth1 any more


def no_fib_trie_ambiguous(fs: FakeSys) -> None:
    equal_indices(fs)
    (fs.root / "proc/net/fib_trie").unlink()


def same_hca_twice(fs: FakeSys) -> None:
    _base(fs)
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.10", "eth1")
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.11", "eth2")
    fs.pod_addr("eth1", "192.0.2.10/24")
    fs.pod_addr("eth2", "192.0.2.11/24")


Fixture = Callable[[FakeSys], None]
GOOD: dict[str, tuple[Fixture, dict[str, str]]] = {
    "equal_indices": (
        equal_indices,
        {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_GID_INDEX": "5"},
    ),
    "differing_clean": (
        differing_clean,
        {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_ADDR_RANGE": "192.0.2.10/31"},
    ),
    "natural_order": (
        natural_order,
        {"NCCL_IB_HCA": "=mlx5_1:1,mlx5_0:1", "NCCL_IB_GID_INDEX": "3"},
    ),
    "no_fib_trie": (no_fib_trie, {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_GID_INDEX": "5"}),
    "same_hca_twice": (
        same_hca_twice,
        {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IB_ADDR_RANGE": "192.0.2.10/31"},
    ),
}
BAD: dict[str, tuple[Fixture, str]] = {
    "differing_dirty": (differing_dirty, "192.0.2.1"),
    "no_pod_gid": (no_pod_gid, "eth1"),
    "only_socket": (only_socket, "no"),
    "no_fib_trie_ambiguous": (no_fib_trie_ambiguous, "eth1"),
}


def _tree(tmp_path: Path, fixture: Fixture) -> Path:
    fixture(FakeSys(tmp_path))
    return tmp_path


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "BASH_ENV", "ENV"))}
    env.update(NCCL_ENV_SYSFS_ROOT=str(root), **extra)
    return env


def _python(root: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rdma_cni.tools.nccl_env", *args]
    return subprocess.run(
        cmd,
        env=_env(root, **extra),
        capture_output=True,
        text=True,
        check=False,
        cwd=SCRIPT.parents[1],
    )


def _shell(shell: str, root: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shell, str(SCRIPT)], env=_env(root, **extra), capture_output=True, text=True, check=False
    )


def _sourced(shell: str, root: Path, body: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shell, "-c", f". '{SCRIPT}'; {body}"],
        env=_env(root, **extra),
        capture_output=True,
        text=True,
        check=False,
    )


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


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", sorted(GOOD))
def test_script_executed_equals_python(tmp_path: Path, name: str, shell: str) -> None:
    root = _tree(tmp_path, GOOD[name][0])
    py = _python(root)
    sh = _shell(shell, root)
    assert py.returncode == 0, py.stderr
    assert sh.returncode == 0, sh.stderr
    assert sh.stdout == py.stdout
    assert f"export NCCL_IB_HCA={GOOD[name][1]['NCCL_IB_HCA']}\n" in sh.stdout


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", sorted(BAD))
def test_script_executed_errors_like_python(tmp_path: Path, name: str, shell: str) -> None:
    root = _tree(tmp_path, BAD[name][0])
    py = _python(root)
    sh = _shell(shell, root)
    assert py.returncode == 1 and py.stdout == "" and py.stderr
    assert sh.returncode != 0 and sh.stdout == "" and "nccl_env.sh:" in sh.stderr


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", sorted(GOOD))
def test_script_sourced_exports(tmp_path: Path, name: str, shell: str) -> None:
    root = _tree(tmp_path, GOOD[name][0])
    body = 'echo "rc=$?"; env | grep "^NCCL_" | sort; set | grep -c "^_ne_" || true'
    res = _sourced(shell, root, body, NCCL_IB_GID_INDEX="99", NCCL_IB_ADDR_RANGE="10.0.0.0/8")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "rc=0"
    exported = dict(ln.split("=", 1) for ln in lines[1:-1] if not ln.startswith("NCCL_ENV_"))
    assert exported == {**GOOD[name][1], "NCCL_SOCKET_IFNAME": "eth0"}
    assert lines[-1] == "0", "helper variables or functions leaked into the shell"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("name", sorted(BAD))
def test_script_sourced_error_keeps_shell_alive(tmp_path: Path, name: str, shell: str) -> None:
    root = _tree(tmp_path, BAD[name][0])
    res = _sourced(shell, root, 'echo "alive $?"; echo "hca=${NCCL_IB_HCA:-unset}"')
    assert res.returncode == 0
    assert res.stdout == "alive 1\nhca=unset\n"
    assert "nccl_env.sh:" in res.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_script_sourced_under_set_u(tmp_path: Path, shell: str) -> None:
    root = _tree(tmp_path, equal_indices)
    res = subprocess.run(
        [shell, "-uc", f". '{SCRIPT}'; echo \"ok $? $NCCL_IB_GID_INDEX\""],
        env=_env(root),
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.stdout == "ok 0 5\n", res.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_pinned_ifaces_and_socket_name(tmp_path: Path, shell: str) -> None:
    root = _tree(tmp_path, equal_indices)
    extra = {"NCCL_ENV_IFACES": "eth2", "NCCL_ENV_SOCKET_IFNAME": "eth1"}
    sh = _shell(shell, root, **extra)
    assert sh.stdout == _python(root, **extra).stdout
    assert sh.stdout == (
        "export NCCL_IB_HCA==mlx5_1:1\nexport NCCL_IB_GID_INDEX=5\nexport NCCL_SOCKET_IFNAME=eth1\n"
    )
    missing = _shell(shell, root, NCCL_ENV_IFACES="eth7")
    assert missing.returncode != 0 and "eth7" in missing.stderr


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
    _base(fs, hcas=1)
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
