"""Soft-RoCE: pods on one RoCE NIC get their own GIDs, and the NCCL variables computed
inside each pod (nccl_env.sh executed and sourced, `rdma-cni nccl-env` of the built
binary, `--verify` through pyverbs) name that pod's own GID index only.

The RDMA netns mode stays `shared` (rxe cannot move netns). Oracle: the GID table in
/sys/class/infiniband/<dev>/ports/1/{gids,gid_attrs}.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pytest
import vmkit
from cnirunner import HPC_NET, REPO, Pod, rdma_blocks, sh
from support.proc import wait_for
from vmkit import Rxe
from vmrig import SETTLE, PodView, VmRig

pytestmark = [pytest.mark.vm, pytest.mark.root]

GW = "198.51.100.14"
NCCL_SH = REPO / "scripts" / "nccl_env.sh"
PYTHON = REPO / ".venv" / "bin" / "python"
PYVERBS = Path("/usr/lib/python3/dist-packages/pyverbs")
# what a process in one pod reads of another pod's GID slot through libibverbs
CROSS_READ = """
import json, sys
from pyverbs.device import Context
ibdev, idx = sys.argv[1], int(sys.argv[2])
ctx = Context(name=ibdev)
out = {}
try:
    out["query_gid"] = str(ctx.query_gid(1, idx).gid)
except Exception as exc:
    out["query_gid"] = "error: %s" % exc
try:
    e = ctx.query_gid_ex(1, idx)
    gid = e.gid_str() if callable(e.gid_str) else e.gid_str
    out["query_gid_ex"] = {"gid": gid, "type": int(e.gid_type), "ndev_ifindex": e.ndev_ifindex}
except Exception as exc:
    out["query_gid_ex"] = "error: %s" % exc
print(json.dumps(out))
"""


def _pod_run(pod: Pod, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run in the pod netns (ip netns exec remounts /sys for it), without NCCL_* inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    return subprocess.run(["ip", "netns", "exec", pod.name, *argv], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120, check=False)


def _exports(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        words = shlex.split(line)
        assert words[0] == "export", line
        key, _, value = words[1].partition("=")
        out[key] = value
    return out


def _nccl_vars(text: str) -> dict[str, str]:
    pairs = (line.partition("=") for line in text.splitlines())
    return {k: v for k, _, v in pairs if k.startswith("NCCL_") and not k.startswith("NCCL_ENV_")}


def _nccl_views(pod: Pod, binary: Sequence[str]) -> dict[str, dict[str, str]]:
    """The NCCL variables as each tool computes them inside the pod."""
    views = {}
    for label, argv, parse in (
        ("nccl_env.sh executed", ("sh", str(NCCL_SH)), _exports),
        ("nccl_env.sh sourced", ("sh", "-c", f". {shlex.quote(str(NCCL_SH))} && env"),
         _nccl_vars),
        ("rdma-cni nccl-env", (*binary, "nccl-env"), _exports),
    ):
        proc = _pod_run(pod, *argv)
        assert proc.returncode == 0, (label, proc.stderr)
        views[label] = parse(proc.stdout)
    return views


def _macvlan_possible(nic: str) -> bool:
    """False while an ipvlan of an earlier test still sits on ``nic`` (a dying netns):
    a lower device cannot carry ipvlan and macvlan at once (EBUSY)."""
    try:
        sh("ip", "link", "add", "link", nic, "name", "rprobe0", "type", "macvlan")
    except RuntimeError:
        return False
    sh("ip", "link", "del", "dev", "rprobe0")
    return True


def test_pods_get_their_own_gid_and_nccl_env(rig: VmRig, rxe: Rxe,
                                               vm_binary: list[str]) -> None:
    assert wait_for(lambda: _macvlan_possible(rxe.netdev), timeout=SETTLE), \
        f"{rxe.netdev} carries an ipvlan"
    # renamed: the host NIC must not share a name with the pods' interfaces
    nic = rig.borrow(rxe.netdev, rename="rnic1")
    rig.configure(nic, "198.51.100.1/28", routes=[(HPC_NET, GW)])
    host_gid = wait_for(lambda: vmkit.roce_v2_gid_for(rxe.name, "198.51.100.1", nic),
                        timeout=SETTLE)
    assert host_gid is not None, vmkit.read_gids(rxe.name)
    a, b = rig.pod(), rig.pod("203.0.113.6/24")
    chain = rig.chain("shared-multi", [nic])

    gids = {}
    for cid, pod, ip in (("ca", a, "198.51.100.2"), ("cb", b, "198.51.100.3")):
        run = chain.add(cid, pod.path, rdma_blocks(1), pod=cid)
        assert run.rc == 0, run
        assert run.out["ips"][1]["address"] == f"{ip}/28", run
        # ADD waited for the GID: it is there right away, owned by the pod's eth1
        gids[pod.name] = vmkit.roce_v2_gid_for(rxe.name, ip, "eth1")
        assert gids[pod.name] is not None, (ip, vmkit.read_gids(rxe.name))
    ga, gb = gids[a.name], gids[b.name]
    assert ga is not None and gb is not None
    assert len({ga.index, gb.index, host_gid.index}) == 3

    for pod, own, other in ((a, ga, gb), (b, gb, ga)):
        want = {"NCCL_IB_HCA": f"={rxe.name}:1", "NCCL_IB_GID_INDEX": str(own.index),
                "NCCL_SOCKET_IFNAME": "eth0"}
        views = _nccl_views(pod, vm_binary)
        assert views == dict.fromkeys(views, want), (views, other.index, host_gid.index)

    if PYVERBS.is_dir():
        _verify_and_cross_read(a, b, rxe, ga.index, gb.index, vm_binary)

    for cid, ip in (("ca", "198.51.100.2"), ("cb", "198.51.100.3")):
        run = chain.delete(cid)
        assert run.rc == 0 and run.out is None, run
        assert wait_for(partial(_gid_gone, rxe.name, ip), timeout=SETTLE), \
            (ip, vmkit.read_gids(rxe.name))


def _gid_gone(ibdev: str, ip: str) -> bool:
    return all(str(g.ipv4) != ip for g in vmkit.read_gids(ibdev))


def _verify_and_cross_read(a: Pod, b: Pod, rxe: Rxe, idx_a: int, idx_b: int,
                           binary: Sequence[str]) -> None:
    """`nccl-env --verify` agrees with sysfs through pyverbs; record what pod A reads of
    pod B's GID slot through verbs (shared RDMA netns mode: no per-netns filtering)."""
    proc = _pod_run(a, str(PYTHON), "-m", "rdma_cni", "nccl-env", "--verify")
    assert proc.returncode == 0 and "skipped" not in proc.stderr, proc
    assert _exports(proc.stdout)["NCCL_IB_GID_INDEX"] == str(idx_a)
    proc = _pod_run(a, *binary, "nccl-env", "--verify")  # the bundle may lack pyverbs
    assert proc.returncode == 0, proc
    assert _exports(proc.stdout)["NCCL_IB_GID_INDEX"] == str(idx_a)
    print(f"binary nccl-env --verify stderr: {proc.stderr.strip()!r}")

    proc = _pod_run(a, str(PYTHON), "-c", CROSS_READ, rxe.name, str(idx_b))
    assert proc.returncode == 0, proc
    seen = json.loads(proc.stdout)
    b_ifindex = PodView.read(b).links["eth1"]["ifindex"]
    a_ifindex = PodView.read(a).links["eth1"]["ifindex"]
    print(f"pod A (eth1 ifindex {a_ifindex}) reads pod B's GID index {idx_b} "
          f"(B's eth1 ifindex {b_ifindex}) through verbs: {seen}")
    # The kernel's answer, for the README's security notes: in RDMA netns mode `shared`
    # the GID table is not filtered per netns. A process in pod A reads pod B's GID
    # (sysfs-backed ibv_query_gid and the ioctl-backed ibv_query_gid_ex alike), with
    # type RoCE v2 (2) and B's ifindex, which is meaningless (or another device) in A.
    b_gid = "0000:0000:0000:0000:0000:ffff:c633:6403"  # ::ffff:198.51.100.3
    assert seen == {"query_gid": b_gid,
                    "query_gid_ex": {"gid": b_gid, "type": 2, "ndev_ifindex": b_ifindex}}, seen
