"""doctor on a kernel with an RDMA subsystem (Soft-RoCE on a virtio NIC): the RDMA
netns mode is read over RDMA netlink, as ADD reads it, with no `rdma` or `ip` tool
on PATH. Oracle: `rdma system show` of iproute2, run by the test itself."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cnirunner import sh
from vmkit import Rxe

pytestmark = [pytest.mark.vm, pytest.mark.root]


def test_doctor_reads_the_rdma_netns_mode_over_netlink(vm_binary: list[str], rxe: Rxe,
                                                       tmp_path: Path) -> None:
    words = sh("rdma", "system", "show").split()  # "netns shared copy-on-fork on"
    mode = words[words.index("netns") + 1]
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"type": "rdma-cni", "mode": "exclusive",
                                "devices": [rxe.netdev]}))
    res = subprocess.run(["env", "PATH=/nonexistent", *vm_binary, "doctor", "--json",
                          "--config", str(conf), "--cni-conf-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in res.stderr, res
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    check = checks["rdma-netns"]
    assert check["status"] == "ok", check
    assert check["detail"] == (f"RDMA netns mode {mode} fits mode exclusive (it needs "
                               "shared or exclusive)"), check
    assert checks["nics"]["detail"].endswith(f"{rxe.netdev}={rxe.name}"), checks["nics"]
