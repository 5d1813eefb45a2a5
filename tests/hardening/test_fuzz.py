"""Fuzzing the parsers (netconf, CNI_ARGS, annotation, kubelet checkpoint, prevResult
and result conversion) and ``dispatch.run`` with fake handlers: property-based
(hypothesis, structured inputs) and coverage-guided (atheris, raw bytes).

Zero uncaught exceptions: only the CniError family (and, for the checkpoint parser,
what its wrapper maps to a CniError) may escape. Bounded by RDMA_CNI_FUZZ_BUDGET
seconds in total (default 60: about a third hypothesis, the rest atheris); at the
default budget at least 100 000 inputs must be tried.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fuzz_targets as ft
import pytest
from harness import bump, put
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow
SUITE = "fuzz"
HERE = Path(__file__).resolve().parent
DEFAULT_BUDGET = 60.0
BUDGET = float(os.environ.get("RDMA_CNI_FUZZ_BUDGET", DEFAULT_BUDGET))
HYP_SHARE, N_HYP = 0.34, 6

KEYS = ["cniVersion", "name", "type", "mode", "devices", "ipam", "ranges", "rangeStart",
        "rangeEnd", "exclude", "routing", "tableBase", "rulePriority", "kubelet", "mtu",
        "maxInterfaces", "dataDir", "logLevel", "runtimeConfig", "deviceID", "prevResult",
        "interfaces", "ips", "routes", "dns", "address", "interface", "version", "gw",
        "cniConf", "deviceConf", "ifName", "mac", "Data", "PodDeviceEntries", "PodUID",
        "ResourceName", "DeviceIDs", "cniConfName", "slotsPerNic", "allocation"]
scalars = (st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
           | st.text(max_size=20) | st.sampled_from(
               ["0.3.1", "0.4.0", "1.1.0", "shared", "shared-multi", "exclusive", "rdma",
                "eth1", "198.51.100.7", "198.51.100.0/24", "02:00:00:00:00:01", "uid-1",
                "vke.volcengine.com/rdma", "../x", "lo", ""]))
keys = st.sampled_from(KEYS) | st.text(max_size=8)
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=5)
                           | st.dictionaries(keys, c, max_size=6), max_leaves=25)
netconfs = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=10) | st.fixed_dictionaries(
    {"cniVersion": st.sampled_from(["0.4.0", "1.1.0", "x"]), "name": scalars,
     "mode": st.sampled_from(["shared", "shared-multi", "exclusive", "shared-host", "x"])},
    optional={"devices": st.lists(scalars, max_size=3), "mtu": scalars,
              "ipam": st.fixed_dictionaries({}, optional={"ranges": st.dictionaries(
                  scalars.map(str), st.dictionaries(st.sampled_from(
                      ["rangeStart", "rangeEnd", "exclude"]), json_values), max_size=2)}),
              "routing": st.dictionaries(st.sampled_from(["tableBase", "rulePriority"]), scalars),
              "maxInterfaces": scalars, "dataDir": scalars})
arg_keys = st.sampled_from(["IgnoreUnknown", "K8S_POD_NAME", "K8S_POD_NAMESPACE",
                            "K8S_POD_UID", "K8S_POD_INFRA_CONTAINER_ID", "X"]) | st.text(max_size=5)
cni_args = st.lists(st.tuples(arg_keys, st.text(max_size=10), st.sampled_from(["=", "", "=="])),
                    max_size=6).map(lambda ps: ";".join(k + s + v for k, v, s in ps)) | st.text()
device_conf = st.fixed_dictionaries({}, optional={
    "ifName": scalars,
    "mac": scalars | st.from_regex(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}", fullmatch=True),
    "ips": st.lists(scalars, max_size=3) | scalars, "bogus": scalars})
blocks = st.lists(st.fixed_dictionaries(
    {"cniConf": st.fixed_dictionaries({"name": st.sampled_from(["rdma", "other"]) | scalars})},
    optional={"deviceConf": device_conf | json_values, "name": scalars}) | json_values,
    max_size=20)
annotation_values = blocks | json_values | st.text()
entries = st.fixed_dictionaries({"PodUID": st.sampled_from(["uid-1", "uid-2"]) | scalars,
                                 "ResourceName": st.just(ft.RESOURCE) | scalars},
                                optional={"DeviceIDs": json_values | st.dictionaries(
                                    st.text(max_size=2), st.lists(st.text(max_size=8)))})
checkpoints = st.fixed_dictionaries({"Data": st.fixed_dictionaries(
    {}, optional={"PodDeviceEntries": st.lists(entries | json_values, max_size=4) | json_values})
    | json_values}).map(lambda d: __import__("json").dumps(d)) | st.text()
ip_entries = st.fixed_dictionaries({}, optional={"address": scalars, "interface": scalars,
                                                 "version": scalars, "gateway": scalars})
prev_results = st.fixed_dictionaries({}, optional={
    "cniVersion": scalars, "interfaces": st.lists(json_values, max_size=3) | json_values,
    "ips": st.lists(ip_entries, max_size=3) | json_values,
    "routes": st.lists(json_values, max_size=3) | json_values, "dns": json_values}) | json_values
env_names = st.sampled_from(["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME",
                             "CNI_PATH", "CNI_ARGS"])
env_values = st.sampled_from(["ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION", "c1", "eth0",
                              "/var/run/netns/x", "..", ""]) | st.text(max_size=30).filter(
                                  lambda s: "\x00" not in s)
envs = st.dictionaries(env_names, env_values, max_size=6)
stdins = (netconfs.map(lambda d: __import__("json").dumps(d).encode())
          | st.binary(max_size=200))


def _drive(name: str, strategy: Any, target: Callable[[Any], None], seconds: float) -> int:
    count = [0]

    @settings(max_examples=300, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def inner(value: Any) -> None:
        count[0] += 1
        ft.guarded(target, value)

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        inner()
    bump(SUITE, f"hypothesis {name}", count[0])
    bump(SUITE, "inputs", count[0])
    return count[0]


HYP = {
    "netconf": (netconfs, ft.netconf),
    "cni_args": (cni_args, ft.cni_args),
    "annotation": (annotation_values, ft.annotation),
    "checkpoint": (checkpoints, ft.checkpoint),
    "prev_result": (st.tuples(prev_results, st.sampled_from(["0.3.0", "0.4.0", "1.1.0"])),
                    lambda v: ft.prev_result(*v)),
    "dispatch": (st.tuples(envs, stdins), lambda v: ft.run_dispatch(*v)),
}


@pytest.mark.parametrize("name", sorted(HYP))
def test_hypothesis(name: str) -> None:
    strategy, target = HYP[name]
    assert _drive(name, strategy, target, BUDGET * HYP_SHARE / N_HYP) > 0


def test_atheris(tmp_path: Path) -> None:
    """Coverage-guided for real: the edges libFuzzer counts in rdma_cni grow past what
    the seed corpus reached, and new inputs join the corpus (an uninstrumented run
    reports no edges and adds nothing)."""
    try:
        import atheris  # noqa: F401
    except ImportError:
        pytest.skip("atheris is not installed (pip install atheris)")
    seconds = max(int(BUDGET * (1 - HYP_SHARE)), 1)
    art = tmp_path / "artifacts"
    art.mkdir()
    proc = subprocess.run(
        [sys.executable, str(HERE / "fuzz_atheris.py"), f"-max_total_time={seconds}",
         "-print_final_stats=1", "-rss_limit_mb=2048", f"-artifact_prefix={art}/",
         str(tmp_path / "corpus")],
        capture_output=True, text=True, timeout=seconds + 120, cwd=HERE.parents[1],
        env={**os.environ, "PYTHONPATH": str(HERE.parents[1])})
    n = _stat(r"stat::number_of_executed_units:\s*(\d+)", proc.stderr)
    bump(SUITE, "atheris runs", n)
    bump(SUITE, "inputs", n)
    crashes = list(art.iterdir())
    bump(SUITE, "uncaught exceptions", len(crashes))
    assert proc.returncode == 0 and not crashes, proc.stderr[-4000:]
    assert n > 0
    seeds = _stat(r"INITED cov: (\d+)", proc.stderr)
    end = _stat(r"DONE +cov: (\d+)", proc.stderr)
    added = _stat(r"stat::new_units_added:\s*(\d+)", proc.stderr)
    put(SUITE, "atheris edges (seed corpus)", seeds)
    put(SUITE, "atheris edges (end)", end)
    assert seeds > 0, "no coverage reported: rdma_cni is not instrumented\n" + proc.stderr[-2000:]
    assert end > seeds and added > 0, (seeds, end, added)


def _stat(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    return int(found.group(1)) if found else 0


def test_total_inputs() -> None:
    """Runs last in this module (pytest keeps file order): the 100 000-input floor."""
    from harness import FIGURES

    total = FIGURES[SUITE].get("inputs", 0)
    if BUDGET >= DEFAULT_BUDGET and "atheris runs" in FIGURES[SUITE]:
        assert total >= 100_000, total
