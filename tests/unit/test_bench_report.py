"""bench/report.py's rows of figures measured against rdma-cni itself (figures 7 and 8:
a busier node against a quiet one) and the kernel's floor beside each figure."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import report
from figures import Scenario


def _scenario(key: str, samples: dict[str, dict[str, list[float]]], load: int = 0) -> Scenario:
    sc = Scenario(key, key, [], 3, load=load)
    sc.samples = samples
    return sc


def _figure(fig_id: str) -> report.Figure:
    return next(f for f in report.FIGURES if f.id == fig_id)


def test_a_figure_against_itself_takes_its_reference_from_the_baseline_scenario() -> None:
    quiet = _scenario("s7-0", {"resident": {"add_ms": [10.0, 12.0, 11.0],
                                            "add_total_cpu_ms": [4.0, 4.0, 4.0]}})
    busy = _scenario("s7", {"resident": {"add_ms": [13.0, 15.0, 14.0],
                                         "add_total_cpu_ms": [5.0, 5.0, 5.0]}}, load=512)
    row = report.figure_row(_figure("7"), busy, "resident", quiet)
    assert row["rdma_cni"]["median"] == 14.0 and row["go"]["median"] == 11.0
    assert row["ratio"] == round(14.0 / 11.0, 3)
    assert row["goal"] == 1.3 and row["met"] is True
    assert row["cpu_ms"] == {"rdma_cni": 5.0, "go": 4.0}
    assert row["title"].startswith("1 interface, ADD, 512 attachments already on the node")
    assert row["reference"] == "none"


def test_a_figure_against_itself_misses_its_goal_past_the_ratio() -> None:
    quiet = _scenario("s8-0", {"resident": {"add_ms": [10.0, 10.0, 10.0]}})
    flood = _scenario("s8", {"resident": {"add_ms": [25.0, 21.0, 30.0]}}, load=400)
    row = report.figure_row(_figure("8"), flood, "resident", quiet)
    assert row["ratio"] == 2.5 and row["met"] is False
    assert "400 idle and slow connections" in row["title"]


def test_rows_leave_out_a_figure_whose_baseline_did_not_run_and_paths_it_lacks() -> None:
    samples = {"resident": {"add_ms": [5.0], "add_total_cpu_ms": [1.0]}}
    only_busy = {"s7": _scenario("s7", samples, load=64)}
    assert report.rows(only_busy, ["inproc", "resident"]) == []
    both = {**only_busy, "s7-0": _scenario("s7-0", samples)}
    out = report.rows(both, ["inproc", "resident"])
    assert [(r["id"], r["path"]) for r in out] == [("7", "resident")]


def _row(fig_id: str, median: float) -> dict[str, Any]:
    cell = {"n": 3, "median": median, "p90": median, "min": median, "max": median}
    return {"id": fig_id, "title": "t", "path": "resident", "unit": "ms", "rdma_cni": cell,
            "go": cell, "ratio": 1.0, "goal": None, "goal_kind": "ratio"}


FLOOR = {"static_true": {"wall_ms": 0.1, "cpu_ms": 0.05, "n": 5},
         "add_del": {"add_ms": 3.0, "del_ms": 30.0, "n": 5, "add_requests": 17,
                     "del_requests": 5},
         "add_del_many": {"add_ms": 10.0, "del_ms": 5.0, "n": 5, "interfaces": 8,
                          "add_requests": 108, "del_requests": 41},
         "pass_through": {"add_ms": 0.01, "n": 20},
         "batch": {"add_ms": 40.0, "del_ms": 50.0, "n": 2, "pods": 32, "with_exec": True},
         "add_del_busy": {"add_ms": 4.0, "del_ms": 31.0, "n": 5, "attachments": 512}}


def test_each_figures_floor_is_its_commands_with_one_exec_per_exec() -> None:
    want = {"1": 0.2 + 15.0, "1a": 10.1, "1b": 5.1, "2": 3.1, "2b": 30.1, "3": 0.11,
            "4": 40.0, "4b": 50.0, "6": 3.1, "6l": 3.1, "7": 4.1, "8": 3.1}
    rows = [_row(i, 9.3) for i in want] + [_row("5", 1.0), _row("5b", 60.0)]
    report.add_floor(rows, FLOOR)
    got = {r["id"]: r.get("floor_ms") for r in rows}
    assert got == {**{i: round(v, 3) for i, v in want.items()}, "5": None, "5b": None}
    two = next(r for r in rows if r["id"] == "2")
    assert two["floor_ratio"] == 3.0
    assert "kernel's floor 3.1 ms: 3.0x" in report._line(two)


def test_a_floor_not_measured_whole_is_not_shown() -> None:
    rows = [_row("2", 9.3), _row("4", 100.0), _row("1", 20.0)]
    report.add_floor(rows, {**FLOOR, "static_true": None, "add_del_many": None})
    assert [r.get("floor_ms") for r in rows] == [None, 40.0, None]


def test_the_floor_line_says_figures_1_3_and_4s_floors() -> None:
    (line,) = [t for t in report._floor_line({**FLOOR, "netlink": {"rtt_ms": 0.002}})
               if t]
    assert "of figure 1's ADD of 8 interfaces" in line
    assert "figure 3's pass-through ADD" in line and "10 us" in line
    assert "figure 4's 32 ADDs at once" in line and "40.00 ms" in line
    assert "one exec of the static `true` per exec" in line


def test_no_floor_of_the_command_leaves_the_rows_as_they_are() -> None:
    rows = [_row("2", 9.3)]
    report.add_floor(rows, {"add_del": None})
    report.add_floor(rows, None)
    assert "floor_ms" not in rows[0]
    assert "floor" not in report._line(rows[0])


def test_the_reference_cell_of_a_figure_against_itself_says_what_it_is() -> None:
    row = _row("7", 14.0) | {"reference": "none"}
    assert "| rdma-cni, none: 14.0 ms (14.0) |" in report._line(row)
    assert "| 14.0 ms (14.0) |" in report._line(_row("2", 14.0))


def test_figure_7s_floor_is_said_against_the_floor_without_the_attachments() -> None:
    fl = {"static_true": None, "netlink": {"rtt_ms": 0.008},
          "add_del": {"add_ms": 2.0, "del_ms": 20.0, "n": 5, "add_requests": 15,
                      "del_requests": 4},
          "add_del_busy": {"add_ms": 3.0, "del_ms": 24.0, "n": 5, "attachments": 512}}
    (line,) = [t for t in report._floor_line(fl) if t]
    assert ("With figure 7's 512 attachments on the node, the same floor ADD took 3.00 ms "
            "(1.50x the floor without them) and its DEL 24.00 ms, medians of 5.") in line
    del fl["add_del_busy"]
    assert "figure 7" not in "".join(report._floor_line(fl))


def test_the_cost_of_a_new_file_where_the_stores_are_is_said_with_the_floor() -> None:
    fl = {"static_true": None, "netlink": {"rtt_ms": 0.008},
          "file_create": {"create_us": 412.4, "n": 200}}
    (line,) = [t for t in report._floor_line(fl) if t]
    assert "a new file in the run's temp dir, where both sides' stores are, 412 us" in line
    del fl["file_create"]
    assert "new file" not in "".join(report._floor_line(fl))



def test_the_exec_floor_is_the_front_s_toolchain_s_with_glibc_s_beside_it() -> None:
    fl = {"static_true": {"wall_ms": 0.154, "cpu_ms": 0.112, "n": 50},
          "static_true_glibc": {"wall_ms": 0.653, "cpu_ms": 0.577, "n": 50},
          "netlink": {"rtt_ms": 0.008}}
    (line,) = [t for t in report._floor_line(fl) if t]
    assert ("exec of a static C `true` built as the front is (musl) 0.15 ms wall (0.11 ms "
            "CPU), against glibc 0.65 ms wall (0.58 ms CPU);") in line
    fl["static_true_glibc"] = None
    assert "glibc" not in "".join(report._floor_line(fl))


def test_the_header_says_how_figure_4s_batch_began_and_what_timed_each_exec() -> None:
    record: dict[str, Any] = {"scenarios": {"s4": {}}, "config": {"spawn": "gated"},
                              "measurer": "musl-gcc"}
    said = report._batches(record)
    assert "Each exec timed by bench/measure-exec.c built with musl-gcc." in said
    assert "held at a gate, then all let go at once" in said
    assert "collected" not in said  # gated, from before the driver slept through the batch
    record["config"]["collect"] = "after"
    assert "; the driver collected none of them until the last had exited." in \
        report._batches(record)
    record["config"] = {}  # a record from before the gate: its batches were serial
    assert "one after the other" in report._batches(record)
    record["measurer"] = True  # a record from before: a bool, no compiler named
    assert "measure-exec" not in report._batches(record)
    assert report._batches({"scenarios": {"s2": {}}, "config": {"spawn": "gated"}}) == ""


def test_a_record_names_the_commit_its_binary_was_built_from(tmp_path: Path) -> None:
    """A ``--binary`` of another checkout was credited to this checkout's HEAD."""
    binary = tmp_path / "rdma-cni"
    binary.write_text("#!/bin/sh\necho 'rdma-cni 0.2.0 (commit 0123456789ab-dirty)'\n")
    binary.chmod(0o755)
    v = report.versions(str(binary), str(Path(__file__).resolve().parents[2]))
    assert v["git"] == "0123456-dirty"
    binary.write_text("#!/bin/sh\necho 'rdma-cni 0.2.0 (commit unknown)'\n")
    head = report._cmd("git", "-C", str(Path(__file__).resolve().parents[2]), "rev-parse",
                       "--short", "HEAD")
    assert report.versions(str(binary), str(Path(__file__).resolve().parents[2]))[
        "git"].startswith(head)
