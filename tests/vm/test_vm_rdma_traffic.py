"""RDMA traffic between pods the plugin made, on two stand-in nodes (tests/vm/noderig.py).

Each test makes pods through the host plugin (ADD in the node's netns), then runs
`rdma-cni verify` of the image's bundle in two pods: an RC queue pair per rail moving
SEND/RECV and RDMA WRITE traffic, the data checked on the other side, with the GID
index the pod's `nccl_env.sh` exports. Needs a kernel whose rxe serves network
namespaces (per-netns sockets: trixie-backports' 7.3); on Debian 12's 6.1 rxe routes
and listens in the initial netns only, and these tests are skipped there.

Which stand-in proves what (measured; README "Tests"):
- across nodes (shared, shared-multi, shared-host): an rxe on the pod's own interface,
  so the pod's address, routing table and rule, and ARP sysctls carry the traffic. An
  rxe on the node's NIC cannot: its UDP socket is in the node's netns, the pod drops
  the replies.
- one node, two pods (shared-host): the node NIC's shared rxe with each pod's own GID
  in the shared table; shared-multi on one node fails (each macvlan has its own MAC,
  rxe does not loop the packet back and it lands in the other pod, where rxe has no
  socket): asserted as the stand-in's limit.
- exclusive: RDMA netns mode exclusive; the rxe is made on the moved NIC in the pod
  and follows it into the pod.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cnirunner import Pod, rdma_blocks
from noderig import (
    TwoNodes,
    pod_exec,
    rdma_netns_mode,
    rxe_serves_netns,
    set_rdma_netns_mode,
    two_nodes,
    verify_pair,
)
from runner import NEXT_RELEASE

pytestmark = [pytest.mark.vm, pytest.mark.root]
needs_netns_rxe = pytest.mark.skipif(
    os.environ.get("RDMA_CNI_IN_VM") == "1" and not rxe_serves_netns(),
    reason="rxe of this kernel routes and listens in the initial netns only (Debian 12's "
    "6.1): no RDMA between pods")


def test_the_tiers_kernel_serves_rdma_between_pods() -> None:
    """The traffic tests skip on a kernel whose rxe serves the initial netns only; on the
    kernel this tier boots by default they must run: there, no per-netns rxe is a
    failure, not a row of skips."""
    if os.environ.get("RDMA_CNI_IN_VM") != "1" or os.uname().release != NEXT_RELEASE:
        pytest.skip(f"not the tier's default kernel ({NEXT_RELEASE})")
    subprocess.run(["modprobe", "rdma_rxe"], check=True, capture_output=True)
    assert rxe_serves_netns(), f"{NEXT_RELEASE}: rxe has no per-netns sockets"


def _nccl_index(plugin: list[str], pod: Pod) -> str:
    """NCCL_IB_GID_INDEX as the installed nccl_env.sh exports it in the pod."""
    script = Path(plugin[0]).parent / "nccl_env.sh"
    proc = pod_exec(pod, "sh", str(script))
    assert proc.returncode == 0, proc.stderr
    env = dict(shlex.split(line)[1].split("=", 1) for line in proc.stdout.splitlines())
    return env["NCCL_IB_GID_INDEX"]


def _docs(pair: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    server, client = pair
    try:
        return json.loads(server.stdout), json.loads(client.stdout)
    except ValueError:
        raise AssertionError(f"verify printed no JSON: {server}\n{client}") from None


def _assert_passed(pair: Any, indices: list[tuple[str, str]]) -> None:
    """Both sides exit 0; every rail moved checked data with nccl_env.sh's index."""
    server, client = pair
    docs = _docs(pair)
    assert server.returncode == 0 and client.returncode == 0, (server, client)
    for doc, index in zip(docs, indices, strict=True):
        assert doc["ok"] is True
        assert [r["ok"] for r in doc["rails"]] == [True] * len(doc["rails"]), doc
        assert [str(r["gid_index"]) for r in doc["rails"]] == list(index), doc
        assert doc["rails"][0]["checked"] == ["SEND/RECV payloads", "RDMA WRITE bytes"]
        assert doc["rails"][0]["latency_us"] > 0
    assert docs[1]["rails"][0]["bandwidth_MBps"] > 0


def _delete_all(rig: TwoNodes, node_pods: list[tuple[int, str]]) -> None:
    for node, cid in node_pods:
        run = rig.nodes[node].chain.delete(cid)
        assert run.rc == 0, run
    assert rig.clean() == []


@pytest.fixture
def shared_rdma_netns() -> Iterator[None]:
    assert rdma_netns_mode() == "shared"
    yield


@needs_netns_rxe
@pytest.mark.parametrize("mode", ["shared", "shared-multi"])
def test_pods_on_two_nodes_exchange_rdma(tmp_path: Path, vm_plugin: list[str],
                                         vm_binary: list[str], mode: str,
                                         shared_rdma_netns: None) -> None:
    with two_nodes(tmp_path, vm_plugin, mode) as rig:
        a = rig.pod(rig.nodes[0], rdma_blocks(1), "ca")
        b = rig.pod(rig.nodes[1], rdma_blocks(1), "cb")
        assert rig.ip(a) == "198.51.100.2" and rig.ip(b) == "198.51.100.66"
        rig.pod_rxe(a)
        rig.pod_rxe(b)
        index = (_nccl_index(vm_plugin, a), _nccl_index(vm_plugin, b))
        pair = verify_pair(vm_binary, a, b, f"{rig.ip(a, 'eth0')}")
        _assert_passed(pair, [(index[0],), (index[1],)])
        _delete_all(rig, [(0, "ca"), (1, "cb")])


@needs_netns_rxe
def test_shared_host_pods_on_two_nodes_use_every_rail(
        tmp_path: Path, vm_plugin: list[str], vm_binary: list[str],
        shared_rdma_netns: None) -> None:
    """shared-host: one block, a sub-interface on each of the node's two NICs: two rails."""
    with two_nodes(tmp_path, vm_plugin, "shared-host", rails=2) as rig:
        a = rig.pod(rig.nodes[0], rdma_blocks(1), "ca")
        b = rig.pod(rig.nodes[1], rdma_blocks(1), "cb")
        assert (rig.ip(a, "eth2"), rig.ip(b, "eth2")) == ("198.18.0.2", "198.18.0.66")
        for pod in (a, b):
            rig.pod_rxe(pod, "eth1")
            rig.pod_rxe(pod, "eth2")
        index = (_nccl_index(vm_plugin, a), _nccl_index(vm_plugin, b))
        pair = verify_pair(vm_binary, a, b, rig.ip(a, "eth0"))
        _assert_passed(pair, [(index[0],) * 2, (index[1],) * 2])
        assert [r["ifname"] for r in _docs(pair)[1]["rails"]] == ["eth1", "eth2"]
        _delete_all(rig, [(0, "ca"), (1, "cb")])


@needs_netns_rxe
def test_two_pods_on_one_node_share_the_nics_rxe(
        tmp_path: Path, vm_plugin: list[str], vm_binary: list[str],
        shared_rdma_netns: None) -> None:
    """shared-host, one node: the node NIC's rxe carries both pods' GIDs; each pod's
    traffic uses its own index (they differ). A pod without an allocation has no RDMA
    interface; another pod's index exported in a pod is refused, and a deleted pod's
    GID leaves the table."""
    with two_nodes(tmp_path, vm_plugin, "shared-host", nic_rxe=True) as rig:
        node = rig.nodes[0]
        a = rig.pod(node, rdma_blocks(1), "ca")
        b = rig.pod(node, rdma_blocks(1), "cb")
        c = rig.pod(node, None, "cc")  # no block: the plugin passes it through
        index = (_nccl_index(vm_plugin, a), _nccl_index(vm_plugin, b))
        assert index[0] != index[1]
        pair = verify_pair(vm_binary, a, b, rig.ip(a, "eth0"))
        _assert_passed(pair, [(index[0],), (index[1],)])
        assert {r["hca"] for d in _docs(pair) for r in d["rails"]} == {f"{node.rxes[0]}:1"}

        # a pod's GID never serves another pod: B told to use A's index (a job-wide
        # NCCL_IB_GID_INDEX that fits A) is refused, both sides name it
        server, client = verify_pair(vm_binary, a, b, rig.ip(a, "eth0"),
                                     env_c={"NCCL_IB_GID_INDEX": index[0]})
        assert server.returncode == 1 and client.returncode == 1
        [rail] = json.loads(client.stdout)["rails"]
        assert rail["cause"] == (
            f"GID index differs between pods: NCCL_IB_GID_INDEX={index[0]} is the peer's "
            f"eth1 GID, but eth1's GID is at index {index[1]} here: NCCL uses one index for "
            "every HCA and pod, so export it per pod (nccl_env.sh) or use "
            "NCCL_IB_ADDR_RANGE"), rail
        [rail] = json.loads(server.stdout)["rails"]
        assert rail["cause"].startswith("the peer's eth1: wrong GID index: NCCL_IB_GID_"
                                        f"INDEX={index[0]} selects ::ffff:{rig.ip(a)}"), rail

        # no allocation: no RDMA interface, nccl_env.sh refuses, verify names it
        proc = pod_exec(c, *vm_binary, "verify", "--listen", "--timeout", "5")
        assert proc.returncode == 1 and "the pod has no RDMA interface" in proc.stderr, proc
        assert pod_exec(c, "sh", str(Path(vm_plugin[0]).parent / "nccl_env.sh")).returncode

        ip_a = rig.ip(a)
        _delete_all(rig, [(0, "ca"), (0, "cb"), (0, "cc")])
        gids = (Path("/sys/class/infiniband") / node.rxes[0] / "ports/1/gids").iterdir()
        assert all(ip_a not in _gid_ipv4(p) for p in gids)


def _gid_ipv4(path: Path) -> str:
    import ipaddress

    mapped = ipaddress.IPv6Address(path.read_text().strip()).ipv4_mapped
    return str(mapped) if mapped else ""


@needs_netns_rxe
def test_shared_multi_on_one_node_is_beyond_soft_roce(
        tmp_path: Path, vm_plugin: list[str], vm_binary: list[str],
        shared_rdma_netns: None) -> None:
    """The stand-in's limit, measured: two macvlan pods on one node's rxe. Each macvlan
    has its own MAC, so rxe does not loop the packet back; it lands in the other pod's
    netns, where rxe has no socket (Udp NoPorts): the queue pair never connects."""
    with two_nodes(tmp_path, vm_plugin, "shared-multi", nic_rxe=True) as rig:
        a = rig.pod(rig.nodes[0], rdma_blocks(1), "ca")
        b = rig.pod(rig.nodes[0], rdma_blocks(1), "cb")
        server, client = verify_pair(vm_binary, a, b, rig.ip(a, "eth0"))
        assert server.returncode == 1 and client.returncode == 1, (server, client)
        [rail] = json.loads(client.stdout)["rails"]
        assert rail["cause"].startswith("the peer's rail unreachable"), rail
        _delete_all(rig, [(0, "ca"), (0, "cb")])


@pytest.fixture
def exclusive_rdma_netns() -> Iterator[None]:
    """RDMA netns mode exclusive for one test (the kernel switches only while no netns
    but the initial one exists), shared again after it."""
    set_rdma_netns_mode("exclusive")
    try:
        yield
    finally:
        set_rdma_netns_mode("shared")


@needs_netns_rxe
def test_exclusive_nics_carry_rdma_between_nodes(
        tmp_path: Path, vm_plugin: list[str], vm_binary: list[str],
        exclusive_rdma_netns: None) -> None:
    """exclusive, RDMA netns mode exclusive: the NIC moves into the pod with its address;
    the rxe made on it there follows it (`rdma dev set ... netns`). A pod without an
    allocation sees no RDMA device at all. When the peer's device goes, both sides name
    it."""
    with two_nodes(tmp_path, vm_plugin, "exclusive", ipam=False) as rig:
        a = rig.pod(rig.nodes[0], rdma_blocks(1), "ca")
        b = rig.pod(rig.nodes[1], rdma_blocks(1), "cb")
        c = rig.pod(rig.nodes[0], None, "cc")
        assert (rig.ip(a), rig.ip(b)) == ("198.51.100.1", "198.51.100.65")  # the NICs' own
        rxe_a, rxe_b = rig.pod_rxe(a, move=True), rig.pod_rxe(b, move=True)
        for pod, own in ((a, rxe_a), (b, rxe_b), (c, None)):
            seen = pod_exec(pod, "ls", "/sys/class/infiniband").stdout.split()
            assert seen == ([own] if own else []), (pod.name, seen)
        index = (_nccl_index(vm_plugin, a), _nccl_index(vm_plugin, b))
        pair = verify_pair(vm_binary, a, b, rig.ip(a, "eth0"))
        _assert_passed(pair, [(index[0],), (index[1],)])

        proc = pod_exec(c, *vm_binary, "verify", "--listen", "--timeout", "5")
        assert proc.returncode == 1 and "the pod has no RDMA interface" in proc.stderr, proc

        rig.delete_rxe(rxe_b, b.name)  # the peer's RDMA device gone
        server, client = verify_pair(vm_binary, a, b, rig.ip(a, "eth0"))
        assert server.returncode == 1 and client.returncode == 1
        [mine] = json.loads(client.stdout)["rails"]
        [theirs] = json.loads(server.stdout)["rails"]
        assert mine["cause"].startswith("RDMA device not visible in the pod"), mine
        assert theirs["cause"].startswith("the peer's eth1: RDMA device not visible"), theirs
        _delete_all(rig, [(0, "ca"), (1, "cb"), (0, "cc")])
