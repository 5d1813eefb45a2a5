"""32 pods at once on one shared-multi NIC: every ADD succeeds with a distinct address,
then 32 parallel DELs leave the node and the data dir clean."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Interface

import pytest
from cnirunner import rdma_blocks

pytestmark = pytest.mark.root
PLUGIN_RUNNER = "binary"  # the session build: immune to edits of the tree mid-run

PODS = 32


def test_32_parallel_pods(rig) -> None:
    rig.nic("rnic0", "198.51.100.1/26", "198.51.100.62")
    chain = rig.chain("shared-multi")
    pods = [rig.pod(eth0=None) for _ in range(PODS)]

    with ThreadPoolExecutor(PODS) as pool:  # each run is its own plugin process
        adds = list(pool.map(lambda i: chain.add(f"c{i}", pods[i].path, rdma_blocks(1),
                                                 pod=f"p{i}"), range(PODS)))
    failed = [(i, r) for i, r in enumerate(adds) if r.rc != 0]
    assert failed == [], failed[:3]

    seen = [pod.addrs("eth1") for pod in pods]
    assert all(len(a) == 1 for a in seen), seen
    addrs = [a[0] for a in seen]
    assert len(set(addrs)) == PODS, sorted(addrs)
    net = IPv4Interface("198.51.100.1/26").network
    hosts = {IPv4Interface(a).ip for a in addrs}
    assert all(IPv4Interface(a).network == net for a in addrs)
    assert not hosts & {net.network_address, net.broadcast_address,
                        IPv4Interface("198.51.100.1/26").ip,
                        IPv4Interface("198.51.100.62/26").ip}
    # what each pod got is what its result says
    assert [r.out["ips"][-1]["address"] for r in adds] == addrs
    assert len(rig.files()) == 2 * PODS

    with ThreadPoolExecutor(PODS) as pool:
        dels = list(pool.map(lambda i: chain.delete(f"c{i}"), range(PODS)))
    assert [r.rc for r in dels] == [0] * PODS, [r for r in dels if r.rc][:3]
    assert all(sorted(pod.links()) == ["lo"] for pod in pods)
    assert rig.files() == []


def test_parallel_pods_race_for_exclusive_nics(rig) -> None:
    rig.nic("rnic0", "198.51.100.1/26", "198.51.100.62")
    rig.nic("rnic1", "198.51.100.65/26", None)
    chain = rig.chain("exclusive", ["rnic0", "rnic1"])
    n = 8
    pods = [rig.pod(eth0=None) for _ in range(n)]
    with ThreadPoolExecutor(n) as pool:
        adds = list(pool.map(lambda i: chain.add(f"c{i}", pods[i].path, rdma_blocks(1),
                                                 pod=f"p{i}"), range(n)))
    won = [i for i, r in enumerate(adds) if r.rc == 0]
    lost = [(i, r.code) for i, r in enumerate(adds) if r.rc != 0]
    assert len(won) == 2 and sorted(code for _, code in lost) == [104] * (n - 2), adds
    got = sorted(pods[i].addrs("eth1")[0] for i in won)
    assert got == ["198.51.100.1/26", "198.51.100.65/26"]
    for i, _ in lost:
        assert sorted(pods[i].links()) == ["lo"]
    assert rig.node.links().keys().isdisjoint({"rnic0", "rnic1"})
    with ThreadPoolExecutor(n) as pool:
        dels = list(pool.map(lambda i: chain.delete(f"c{i}", netns=pods[i].path,
                                                    blocks=rdma_blocks(1)), range(n)))
    assert [r.rc for r in dels] == [0] * n, [r for r in dels if r.rc][:3]
    assert rig.files() == []
