"""The hand-written trees of the nccl_env tests: each a fixture (FakeSys -> None), and the
variables (GOOD) or the text of the error (BAD) both implementations give on it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support.fakes.sysfs import FakeSys


def base(fs: FakeSys, hcas: int = 2) -> None:
    for name in ("lo", "eth0", "eth1", "eth2"):
        fs.netdev(name)
    for i in range(hcas):
        fs.ibdev(f"mlx5_{i}", pci=f"0000:3{i}:00.0", slots=10)
        # the host's own link-local pair, never exported
        fs.gid(f"mlx5_{i}", 1, 0, f"fe80::{i + 1}", "IB/RoCE v1", f"ens{i}")
        fs.gid(f"mlx5_{i}", 1, 1, f"fe80::{i + 1}", "RoCE v2", f"ens{i}")
    fs.pod_addr("eth0", "203.0.113.5/24")


def equal_indices(fs: FakeSys) -> None:
    base(fs)
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.1", "ens0")  # host
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.10", "eth1")
    fs.roce_pair("mlx5_1", 1, 4, "198.51.100.10", "eth2")
    fs.roce_pair("mlx5_1", 1, 6, "198.51.100.11", "eth1")  # another pod's eth1
    fs.pod_addr("eth1", "192.0.2.10/24")
    fs.pod_addr("eth2", "198.51.100.10/24")


def differing_clean(fs: FakeSys) -> None:
    base(fs)
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.1", "ens0")  # host, same /24
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.10", "eth1")
    fs.roce_pair("mlx5_1", 1, 6, "192.0.2.11", "eth2")
    fs.pod_addr("eth1", "192.0.2.10/24")
    fs.pod_addr("eth2", "192.0.2.11/24")


def differing_dirty(fs: FakeSys) -> None:
    base(fs)
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.1", "ens0")  # host: inside 192.0.2.0/27
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.10", "eth1")
    fs.roce_pair("mlx5_1", 1, 6, "192.0.2.20", "eth2")
    fs.pod_addr("eth1", "192.0.2.10/24")
    fs.pod_addr("eth2", "192.0.2.20/24")


def no_pod_gid(fs: FakeSys) -> None:
    base(fs)
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.1", "ens0")
    fs.roce_pair("mlx5_0", 1, 4, "192.0.2.99", "eth1")  # another pod's eth1
    fs.pod_addr("eth1", "192.0.2.10/24")


def only_socket(fs: FakeSys) -> None:
    base(fs, hcas=1)


def natural_order(fs: FakeSys) -> None:
    base(fs)
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
    base(fs)
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


def tree(tmp_path: Path, fixture: Fixture) -> Path:
    fixture(FakeSys(tmp_path))
    return tmp_path
