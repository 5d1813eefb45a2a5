"""`rdma-cni verify` names what broke a rail: two pods on two stand-in nodes (shared
mode, the rxe on each pod's own interface: tests/vm/noderig.py), every rail broken in
turn and mended again. The device gone in exclusive RDMA netns mode ("RDMA device not
visible in the pod") is in test_vm_rdma_traffic.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cnirunner import rdma_blocks, sh
from noderig import TwoNodes, rdma_netns_mode, rxe_serves_netns, two_nodes, verify_pair

pytestmark = [pytest.mark.vm, pytest.mark.root]


def _causes(rig: TwoNodes, binary: list[str], **env: dict[str, str]) -> tuple[str, str]:
    """(listener's cause, connector's cause) of the one rail; both must exit 1."""
    a, b = rig.pods[0], rig.pods[1]
    server, client = verify_pair(binary, a, b, rig.ip(a, "eth0"), **env)
    assert server.returncode == 1 and client.returncode == 1, (server, client)
    docs: list[dict[str, Any]] = [json.loads(p.stdout) for p in (server, client)]
    [mine], [theirs] = docs[0]["rails"], docs[1]["rails"]
    assert not mine["ok"] and not theirs["ok"]
    return mine["cause"], theirs["cause"]


@pytest.mark.skipif(os.environ.get("RDMA_CNI_IN_VM") == "1" and not rxe_serves_netns(),
                    reason="rxe of this kernel serves the initial netns only (Debian 12's "
                    "6.1): no RDMA between pods")
def test_verify_names_each_broken_rail(tmp_path: Path, vm_plugin: list[str],
                                       vm_binary: list[str]) -> None:
    assert rdma_netns_mode() == "shared"
    with two_nodes(tmp_path, vm_plugin, "shared") as rig:
        a = rig.pod(rig.nodes[0], rdma_blocks(1), "ca")
        b = rig.pod(rig.nodes[1], rdma_blocks(1), "cb")
        rig.pod_rxe(a)
        rxe_b = rig.pod_rxe(b)
        ip_a, ip_b = rig.ip(a), rig.ip(b)
        server, client = verify_pair(vm_binary, a, b, rig.ip(a, "eth0"))
        assert (server.returncode, client.returncode) == (0, 0), (server, client)

        # a GID index exported that is not the pod's (index 0: the link-local GID)
        served, got = _causes(rig, vm_binary, env_c={"NCCL_IB_GID_INDEX": "0"})
        assert got.startswith("wrong GID index: NCCL_IB_GID_INDEX=0 selects fe80:"), got
        assert served.startswith("the peer's eth1: wrong GID index"), served

        # the pod's routes to the fabric removed: to A it leaves through eth0
        routes = sh("ip", "-n", b.name, "-4", "route", "show", "table", "100")
        sh("ip", "-n", b.name, "route", "flush", "table", "100")
        sh("ip", "-n", b.name, "route", "del", "198.51.100.0/24", "dev", "eth1")
        served, got = _causes(rig, vm_binary)
        assert got == (f"no route to the peer's rail: no route from {ip_b} to {ip_a} (eth1 "
                       "of the peer) through eth1 (it leaves through eth0)"), got
        assert served.startswith("the peer's eth1: no route to the peer's rail"), served
        sh("ip", "-n", b.name, "route", "add", "198.51.100.0/24", "dev", "eth1", "src", ip_b)
        for line in routes.splitlines():
            sh("ip", "-n", b.name, "route", "add", *line.split(), "table", "100")

        # an MTU lowered on one side
        sh("ip", "-n", b.name, "link", "set", "dev", "eth1", "mtu", "1400")
        served, got = _causes(rig, vm_binary)
        assert got == (f"MTU mismatch: eth1 has MTU 1400 here, the peer's eth1 ({ip_a}) "
                       "1500"), got
        assert served.startswith("MTU mismatch: eth1 has MTU 1500 here"), served
        sh("ip", "-n", b.name, "link", "set", "dev", "eth1", "mtu", "1500")

        # the fabric drops the peer's rail (its switch port down): nothing static is
        # wrong, the queue pair gets no answer
        port = f"{rig.nodes[1].ns[-6:]}rnic0"[-15:]
        sh("ip", "-n", rig.switch, "link", "set", "dev", port, "down")
        served, got = _causes(rig, vm_binary)
        assert got.startswith(f"the peer's rail unreachable: {ip_a} (eth1"), got
        assert served.startswith(f"the peer's rail unreachable: {ip_b} (eth1"), served
        sh("ip", "-n", rig.switch, "link", "set", "dev", port, "up")

        # the peer's RDMA device gone (in RDMA netns mode shared, the other pods' devices
        # stay visible: no device has a GID for the interface)
        rig.delete_rxe(rxe_b, b.name)
        served, got = _causes(rig, vm_binary)
        assert got.startswith(f"no GID for the interface: no single RoCE v2 GID "
                              f"::ffff:{ip_b} owned by eth1"), got
        assert served.startswith("the peer's eth1: no GID for the interface"), served
        for node, cid in ((0, "ca"), (1, "cb")):
            assert rig.nodes[node].chain.delete(cid).rc == 0
        assert rig.clean() == []
