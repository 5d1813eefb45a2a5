"""bench/floor.py and bench/floor_batch.py, the kernel's floor beside each figure, run
end to end in a throwaway node: the records count the requests the ADD and DEL of one
and of eight interfaces made, which the run's report quotes; the eight-interface floor
makes in the pod what figure 1's ADD makes and its DEL takes it all away; figure 4's
batch gives each pod its own address; the node is gone afterwards."""

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
import argparse, hashlib, json, subprocess, sys
sys.path[:0] = [{str(BENCH)!r}]
import floor, floor_batch, lab

def addrs(pod):
    out = subprocess.run(["ip", "-j", "-n", pod.name, "addr"], capture_output=True,
                         text=True, check=True).stdout
    return sorted((i["ifname"], a["local"]) for i in json.loads(out)
                  for a in i.get("addr_info", []) if a["family"] == "inet")

def inner(args):
    pods = lab.Pods(lab.Names(args.prefix))
    try:
        one = floor.add_del_floor(args.tmp, pods, 3)
        many = floor.add_del_floor(args.tmp, pods, 2, 8)
        (pod,) = pods.create(1)
        store = floor.Store(args.tmp + "/seen-store")
        a = floor.Attachment(pod.path, hashlib.sha1(pod.name.encode()).hexdigest(),
                             tuple(floor.Iface(k) for k in range(8)))
        floor.floor_add(a, store)
        made = addrs(pod)
        floor.floor_del(a, store)
        left = addrs(pod)
        pods.delete([pod])
        true = floor.static_true(args.tmp)
        batch = floor_batch.batch_floor(args.tmp, pods, 4, 1, true)
        print(json.dumps({{"one": one, "many": many, "made": made, "left": left,
                          "batch": batch, "pass": floor.pass_through_floor(args.tmp, 5)}}))
    finally:
        pods.close()
    return 0

sys.exit(lab.node_main(argparse.ArgumentParser(), "rcflr", __file__, inner))
"""


def test_the_floors_count_their_requests_and_make_what_the_plugin_makes(tmp_path: Path) -> None:
    before = named("rcflr")
    driver = tmp_path / "floor_driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    one, many = got["one"], got["many"]
    # ADD: the NIC, the two default-route probes, the host's addresses and routes, the
    # pod's rules and table, the name check, the link made and found, its rename, its
    # IPv4 settings, its address, up, two routes, the rule; DEL: the rule, both names,
    # the deletion, the index looked up again
    assert (one["add_requests"], one["del_requests"]) == (17, 5), one
    assert one["n"] == 3 and one["add_ms"] > 0 and one["del_ms"] > 0
    # eight: the probes once, each NIC, the host's addresses once and each NIC's routes,
    # the pod's rules once and each table, then ten requests per interface; DEL: per
    # interface the rule and both names, each link marked with the group, the group
    # deleted in one request, each index looked up again
    assert (many["add_requests"], many["del_requests"]) == (2 + 8 + 1 + 8 + 1 + 8 + 80,
                                                          24 + 8 + 1 + 8), many
    assert many["interfaces"] == 8
    # what the kernel shows in the pod: eth1..eth8, each with its NIC's address, then none
    ours = [tuple(x) for x in got["made"] if x[0] not in ("eth0", "lo")]
    assert ours == [(f"eth{k + 1}", f"198.18.{k}.2") for k in range(8)], got["made"]
    assert [x for x in got["left"] if x[0] not in ("eth0", "lo")] == [], got["left"]
    batch = got["batch"]
    assert batch["pods"] == 4 and batch["n"] == 1 and batch["with_exec"] is True
    assert batch["add_ms"] > 0 and batch["del_ms"] > 0
    assert got["pass"]["add_ms"] > 0
    assert named("rcflr") == before
