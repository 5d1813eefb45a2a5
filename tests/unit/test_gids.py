"""GID table scan and the bounded wait for a pod interface's RoCE v2 GID."""

from __future__ import annotations

import os
import sys
from ipaddress import IPv4Address
from pathlib import Path

import pytest

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import TryAgain
from rdma_cni.node.gids import ROCE_V1, ROCE_V2, roce_v2_ipv4, scan, wait_for_gids
from rdma_cni.vocab.nic import Gid, ipv4_of

sys.path.insert(0, str(Path(__file__).parent))
from support.fakes.sysfs import CountingSysfs, FakeSys

IP = IPv4Address


@pytest.fixture
def fs(tmp_path: Path) -> FakeSys:
    fs = FakeSys(tmp_path)
    fs.ibdev("mlx5_0", pci="0000:3b:00.0", slots=12)
    fs.ibdev("mlx5_1", slots=4)
    fs.gid("mlx5_0", 1, 0, "fe80::5054:ff:fe12:3456", ROCE_V1, "eth1")
    fs.gid("mlx5_0", 1, 1, "fe80::5054:ff:fe12:3456", ROCE_V2, "eth1")
    fs.roce_pair("mlx5_0", 1, 6, "192.0.2.10", "eth1")  # sparse: 2..5 empty
    fs.roce_pair("mlx5_1", 1, 2, "198.51.100.7", "eth2")
    return fs


def test_scan_skips_empty_and_zero_slots(fs: FakeSys) -> None:
    gids = scan(Sysfs(str(fs.root)))
    assert [(g.ibdev, g.index, g.type) for g in gids] == [
        ("mlx5_0", 0, ROCE_V1),
        ("mlx5_0", 1, ROCE_V2),
        ("mlx5_0", 6, ROCE_V1),
        ("mlx5_0", 7, ROCE_V2),
        ("mlx5_1", 2, ROCE_V1),
        ("mlx5_1", 3, ROCE_V2),
    ]
    v2 = gids[3]
    assert v2 == Gid("mlx5_0", 1, 7, "0000:0000:0000:0000:0000:ffff:c000:020a", ROCE_V2, "eth1")
    assert v2.ipv4 == IP("192.0.2.10") and not v2.link_local
    assert gids[0].link_local and gids[0].ipv4 is None


def test_scan_einval_type_with_value_and_missing_ndev(fs: FakeSys) -> None:
    base = "sys/class/infiniband/mlx5_0/ports/1"
    fs.write(f"{base}/gids/3", "0000:0000:0000:0000:0000:ffff:c000:0263")  # stale value
    fs.unreadable(f"{base}/gid_attrs/types/3")  # type read fails: empty slot
    fs.gid("mlx5_0", 1, 4, "::ffff:192.0.2.100", ROCE_V2, None)  # ndev unreadable
    gids = scan(Sysfs(str(fs.root)), ["mlx5_0"])
    assert 3 not in [g.index for g in gids]
    assert [g.ndev for g in gids if g.index == 4] == [None]
    assert {g.ibdev for g in gids} == {"mlx5_0"}


def test_scan_reads_each_slots_type_once_from_the_tables_directory(fs: FakeSys) -> None:
    sysfs = CountingSysfs(str(fs.root))
    assert len(scan(sysfs, ["mlx5_0"])) == 4
    assert [p for p in sysfs.asked if "/gid_attrs/types" in p] == \
        ["sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types"]


def test_roce_v2_ipv4_excludes_v1_and_link_local(fs: FakeSys) -> None:
    picked = roce_v2_ipv4(scan(Sysfs(str(fs.root))))
    assert [(g.ibdev, g.index) for g in picked] == [("mlx5_0", 7), ("mlx5_1", 3)]


def test_ipv4_of() -> None:
    assert ipv4_of("::ffff:192.0.2.1") == IP("192.0.2.1")
    assert ipv4_of("0000:0000:0000:0000:0000:ffff:c633:6407") == IP("198.51.100.7")
    assert ipv4_of("fe80::1") is None
    assert ipv4_of("garbage") is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_wait_for_gids_polls_until_present(fs: FakeSys) -> None:
    clock = FakeClock()
    sysfs = Sysfs(str(fs.root))
    calls = []

    def sleep(s: float) -> None:
        calls.append(s)
        clock.sleep(s)
        if len(calls) == 3:  # the kernel fills the slot asynchronously
            fs.roce_pair("mlx5_1", 1, 0, "198.51.100.9", "eth3")

    got = wait_for_gids(
        sysfs,
        {"eth1": ("mlx5_0", IP("192.0.2.10")), "eth3": ("mlx5_1", IP("198.51.100.9"))},
        timeout=2,
        clock=clock,
        sleep=sleep,
    )
    assert len(calls) == 3
    assert (got["eth1"].index, got["eth3"].index) == (7, 1)


def test_wait_for_gids_times_out(fs: FakeSys) -> None:
    clock = FakeClock()
    with pytest.raises(TryAgain, match=r"eth3 \(::ffff:198\.51\.100\.9 on mlx5_1\)") as exc:
        wait_for_gids(
            Sysfs(str(fs.root)),
            {"eth1": ("mlx5_0", IP("192.0.2.10")), "eth3": ("mlx5_1", IP("198.51.100.9"))},
            timeout=1,
            clock=clock,
            sleep=clock.sleep,
            interval=0.25,
        )
    assert exc.value.code == 11
    assert "eth1" not in str(exc.value)
    assert clock.now == pytest.approx(1.0)


def test_wait_for_gids_wrong_ibdev_does_not_count(fs: FakeSys) -> None:
    clock = FakeClock()
    with pytest.raises(TryAgain):
        wait_for_gids(
            Sysfs(str(fs.root)),
            {"eth1": ("mlx5_1", IP("192.0.2.10"))},
            timeout=0.1,
            clock=clock,
            sleep=clock.sleep,
        )


def test_wait_for_gids_looks_again_soon_then_less_often(fs: FakeSys) -> None:
    clock = FakeClock()
    calls: list[float] = []

    def sleep(s: float) -> None:
        calls.append(s)
        clock.sleep(s)

    with pytest.raises(TryAgain):
        wait_for_gids(Sysfs(str(fs.root)), {"eth3": ("mlx5_1", IP("198.51.100.9"))},
                      timeout=0.3, clock=clock, sleep=sleep, interval=0.05)
    assert calls[:8] == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05])
    assert sum(calls) == pytest.approx(0.3)  # the last pause ends at the deadline


def test_wait_for_gids_reads_only_the_slots_of_the_interfaces_it_waits_for(
        fs: FakeSys) -> None:
    sysfs = CountingSysfs(str(fs.root))
    got = wait_for_gids(sysfs, {"eth1": ("mlx5_0", IP("192.0.2.10"))}, timeout=1)
    assert got["eth1"].index == 7
    read = sorted(p.split("/ports/1/", 1)[1] for p in sysfs.asked if "/ports/1/" in p)
    assert read == ["gid_attrs/ndevs"] + [f"{kind}/{i}" for kind in ("gid_attrs/types", "gids")
                                          for i in (0, 1, 6, 7)]


def test_wait_for_gids_stops_reading_a_table_at_the_last_gid_it_waits_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fs = FakeSys(tmp_path)
    fs.ibdev("mlx5_0", slots=256)
    fs.gid("mlx5_0", 1, 0, "fe80::5054:ff:fe12:3456", ROCE_V1, "eth1")
    fs.roce_pair("mlx5_0", 1, 2, "192.0.2.10", "net1")  # a new GID takes the first free slot
    opened: list[str] = []
    real_open = os.open

    def counting(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if dir_fd is not None:
            opened.append(path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", counting)
    got = wait_for_gids(Sysfs(str(fs.root)), {"net1": ("mlx5_0", IP("192.0.2.10"))}, timeout=1)
    assert got["net1"].index == 3
    assert opened == ["0", "1", "2", "3"]  # slots read in order, not one past the GID
