"""bench/floor.py, the kernel's floor beside figures 2 and 2b, runs end to end (3 rounds
in a throwaway node): its record counts the requests its ADD and DEL made, which the
run's report quotes, and its node is gone afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.netns import named

pytestmark = pytest.mark.root
BENCH = Path(__file__).resolve().parents[2] / "bench"
DRIVER = f"""
import argparse, json, sys
sys.path[:0] = [{str(BENCH)!r}]
import floor, lab

def inner(args):
    pods = lab.Pods(lab.Names(args.prefix))
    try:
        print(json.dumps(floor.add_del_floor(args.tmp, pods, 3)))
    finally:
        pods.close()
    return 0

sys.exit(lab.node_main(argparse.ArgumentParser(), "rcflr", __file__, inner))
"""


def test_the_floor_counts_the_requests_it_made(tmp_path: Path) -> None:
    before = named("rcflr")
    driver = tmp_path / "floor_driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    # ADD: the NIC, the two default-route probes, the host's addresses and routes, the
    # pod's rules and table, the name check, the link made and found, its rename, its
    # IPv4 settings, its address, up, two routes, the rule; DEL: the rule, both names,
    # the deletion, the index looked up again
    assert (record["add_requests"], record["del_requests"]) == (17, 5), record
    assert record["n"] == 3 and record["add_ms"] > 0 and record["del_ms"] > 0
    assert named("rcflr") == before
