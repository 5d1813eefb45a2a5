"""bench/cni.py's batch of execs at once (figures 4 and 4b): gated, no plugin of the batch
begins before the last one is started, each gets its whole config on stdin, and the
batch's wall runs from the gate's opening to the last exit; serial, as runs before
2026-12-06 measured, each begins as it is started."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import cni  # noqa: E402

#: a stand-in plugin, fast to start: notes when it began (CLOCK_MONOTONIC ns) and how much
#: stdin it read, then sleeps 20 ms and answers an empty result
PLUGIN = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct timespec t, nap = {0, 20000000};
    char buf[65536], line[64];
    long size = 0;
    ssize_t n;
    clock_gettime(CLOCK_MONOTONIC, &t);
    while ((n = read(0, buf, sizeof buf)) > 0) size += n;
    int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT, 0600);
    int len = snprintf(line, sizeof line, "%lld %ld\n",
                       (long long)t.tv_sec * 1000000000LL + t.tv_nsec, size);
    if (fd < 0 || write(fd, line, len) != len) return 1;
    nanosleep(&nap, NULL);
    puts("{}");
    return 0;
}
"""


@pytest.fixture
def measurer(tmp_path: Path) -> Iterator[None]:
    if cni.use_measurer(str(tmp_path)) is None:
        pytest.fail("gcc could not build bench/measure-exec.c")
    way = cni.SPAWN
    yield
    cni.SPAWN, cni.MEASURER, cni.MEASURER_CC = way, None, None


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """When each exec of a batch was started (CLOCK_MONOTONIC ns, once its process is)."""
    out: list[int] = []
    real = cni._Running.__init__

    def init(self: cni._Running, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        out.append(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    monkeypatch.setattr(cni._Running, "__init__", init)
    return out


def _compile(tmp_path: Path, name: str, source: str) -> str:
    """A stand-in plugin built from C ``source``; its path."""
    src, exe = tmp_path / f"{name}.c", tmp_path / name
    src.write_text(source)
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(src)], check=True, timeout=120)
    return str(exe)


def _invocation(argv: list[str], conf: dict[str, Any], i: int) -> cni.Invocation:
    return cni.Invocation(argv=argv, conf=conf, container_id=f"c{i}", netns="/nonexistent",
                          ifname="net1", cni_args="", cni_path="/")


def _batch(tmp_path: Path, n: int, conf_bytes: int) -> list[cni.Invocation]:
    exe, notes = _compile(tmp_path, "plugin", PLUGIN), tmp_path / "notes"
    return [_invocation([exe, str(notes)], {"name": "t", "pad": "x" * conf_bytes}, i)
            for i in range(n)]


def _notes(tmp_path: Path) -> list[tuple[int, int]]:
    lines = (tmp_path / "notes").read_text().split()
    return [(int(a), int(b)) for a, b in zip(lines[::2], lines[1::2], strict=True)]


def test_gated_nothing_begins_before_the_gate_and_the_wall_is_the_batchs(
        tmp_path: Path, measurer: None, started: list[int]) -> None:
    cni.SPAWN = "gated"
    invs = _batch(tmp_path, 16, 100_000)  # more than a pipe's buffer holds
    wall, execs = cni.run_parallel(invs, "ADD")
    ends = [ex.end_ns for ex in execs]
    assert all(e is not None for e in ends)
    opened = max(e for e in ends if e is not None) - wall
    notes = _notes(tmp_path)
    assert len(notes) == len(started) == 16
    assert min(began for began, _ in notes) > max(started)
    assert min(began for began, _ in notes) >= opened
    assert {size for _, size in notes} == {len(json.dumps(invs[0].conf).encode())}
    assert all(inv.cached == {} for inv in invs)
    assert wall >= 20_000_000  # each sleeps 20 ms after it began


def test_serial_each_begins_as_it_is_started(tmp_path: Path, measurer: None,
                                              started: list[int]) -> None:
    cni.SPAWN = "serial"
    invs = _batch(tmp_path, 16, 10)
    wall, _ = cni.run_parallel(invs, "ADD")
    notes = _notes(tmp_path)
    assert len(notes) == len(started) == 16
    assert wall >= 20_000_000
    assert min(began for began, _ in notes) < max(started)


def test_the_measurer_is_built_against_musl_where_musl_gcc_is(measurer: None) -> None:
    """A static glibc start costs 0.6 ms of CPU where CPUID traps (a VM): it would count in
    both sides' CPU column."""
    if shutil.which("musl-gcc") is None:
        pytest.skip("no musl-gcc (scripts/setup.sh installs musl-tools)")
    assert cni.MEASURER_CC == "musl-gcc"
    assert b"GLIBC_TUNABLES" not in Path(str(cni.MEASURER)).read_bytes()  # glibc's start


#: a stand-in that sleeps argv[1] ms, then writes argv[2] bytes of a JSON string to stdout
SLEEPER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
    long ms = atol(argv[1]), size = atol(argv[2]);
    struct timespec nap = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&nap, NULL);
    putchar('"');
    for (long i = 0; i < size; i++) putchar('x');
    puts("\"");
    return 0;
}
"""


def test_gated_the_driver_collects_only_once_the_batch_is_over(
        tmp_path: Path, measurer: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver sleeps through the batch (it would take CPU from the plugins while it
    collects each exec as it ends): the first exec is collected no earlier than the slow
    one's exit. Each result, larger than a pipe holds, is read whole."""
    cni.SPAWN = "gated"
    exe = _compile(tmp_path, "sleeper", SLEEPER)
    collected: list[int] = []
    real = cni._Running.finish

    def finish(self: cni._Running) -> cni.Exec:
        collected.append(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
        return real(self)
    monkeypatch.setattr(cni._Running, "finish", finish)
    size = 200_000
    invs = [_invocation([exe, "300" if i == 5 else "0", str(size)], {}, i) for i in range(8)]
    wall, execs = cni.run_parallel(invs, "ADD")
    slow = execs[5].end_ns
    assert slow is not None and wall >= 300_000_000
    assert min(collected) >= slow
    assert all(inv.cached == "x" * size for inv in invs)
