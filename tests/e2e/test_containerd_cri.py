"""End to end under a real runtime: containerd's CRI runs the conflist (a bridge
primary standing in for vpc-cni, then rdma-cni) through libcni for pod sandboxes
created over the CRI v1 gRPC API, exactly as the kubelet would."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest
from e2e_node import BINARY, HPC_ROUTE, NICS, install_plugin
from support.netns import ip_json
from support.proc import run

pytestmark = pytest.mark.root
ANNOTATION = "k8s.volcengine.com/pod-networks"


def blocks(n: int, **device_conf: Any) -> dict[str, str]:
    block: dict[str, Any] = {"cniConf": {"name": "rdma"}}
    if device_conf:
        block["deviceConf"] = device_conf
    return {ANNOTATION: json.dumps([block] * n)}


def links(netns: str) -> dict[str, dict[str, Any]]:
    return {i["ifname"]: i for i in ip_json(netns, "addr", "show")}


def v4(link: dict[str, Any]) -> list[str]:
    return [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
            if a["family"] == "inet"]


def host_snapshot() -> dict[str, Any]:
    """What must be the same before and after every pod: the stand-in NICs (name,
    addresses, up-state, MTU), their routes, and containerd's pod netns."""
    nics = {}
    for nic in NICS:
        link = ip_json(None, "addr", "show", "dev", nic)[0]
        nics[nic] = (v4(link), "UP" in link["flags"], link["mtu"], link["address"])
    # The route's protocol is left out: DEL restores an exclusive NIC's gateway routes
    # as "static" where the operator's were "boot" (same dst, gateway, dev, flags).
    routes = sorted(json.dumps({k: v for k, v in r.items() if k != "protocol"}, sort_keys=True)
                    for r in ip_json(None, "route", "show") if r.get("dev") in NICS)
    netns = sorted(n for n in os.listdir("/var/run/netns") if n.startswith("cni-")) \
        if os.path.isdir("/var/run/netns") else []  # containerd names its netns cni-<uuid>
    return {"nics": nics, "routes": routes, "netns": netns}


def store_files(data: Path) -> list[str]:
    return sorted(str(p.relative_to(data)) for p in data.rglob("*")
                  if p.is_file() and p.name != "lock")


def rdma_ls(node: dict[str, Any]) -> list[dict[str, str]]:
    cfg = node["data"].parent / "rdma-cni.json"
    out = run(str(BINARY), "ls", "--json", "--config", str(cfg))
    return list(json.loads(out.stdout))


def test_pod_without_annotation_gets_only_the_primary(node: dict[str, Any]) -> None:
    cd = node["cd"]
    before = host_snapshot()
    sid = cd.run_pod("plain", "uid-plain")
    netns = cd.netns_of(sid)
    pod = links(netns)
    assert sorted(pod) == ["eth0", "lo"]
    assert v4(pod["eth0"])[0].startswith("198.18.0.")
    assert store_files(node["data"]) == []
    cd.stop_pod(sid)
    cd.remove_pod(sid)
    assert host_snapshot() == before


def test_shared_multi_pod_gets_two_rdma_interfaces(node: dict[str, Any]) -> None:
    cd, data = node["cd"], node["data"]
    before = host_snapshot()
    sid = cd.run_pod("multi", "uid-multi", blocks(2))
    netns = cd.netns_of(sid)
    pod = links(netns)
    assert sorted(pod) == ["eth0", "eth1", "eth2", "lo"]
    assert v4(pod["eth1"]) == ["198.51.100.2/28"]   # from rdtest0's subnet, after the host
    assert v4(pod["eth2"]) == ["198.51.100.18/28"]  # round-robin onto rdtest1
    details = {i["ifname"]: i for i in ip_json(netns, "-d", "link", "show")}
    assert details["eth1"]["linkinfo"]["info_kind"] == "macvlan"
    rules = {(r.get("src"), r.get("table"), r.get("priority"))
             for r in ip_json(netns, "rule", "show")}
    assert {("198.51.100.2", "100", 20000), ("198.51.100.18", "101", 20000)} <= rules
    table100 = ip_json(netns, "route", "show", "table", "100")
    dst, via, _ = HPC_ROUTE
    hpc = [r for r in table100 if r["dst"] == dst]
    assert hpc and hpc[0]["gateway"] == via and hpc[0]["dev"] == "eth1"
    assert "onlink" in hpc[0].get("flags", [])
    assert not [r for r in ip_json(netns, "route", "show") if r.get("dev") in ("eth1", "eth2")
                and r["dst"] == "default"]
    rows = rdma_ls(node)
    assert [(r["pod"], r["interface"], r["nic"], r["address"]) for r in rows] == [
        ("e2e/multi", "eth1", "rdtest0", "198.51.100.2/28"),
        ("e2e/multi", "eth2", "rdtest1", "198.51.100.18/28"),
    ]
    assert store_files(data)
    cd.stop_pod(sid)       # DEL with the cached prevResult
    assert store_files(data) == []
    cd.remove_pod(sid)     # a second DEL, empty CNI_NETNS, no prevResult
    assert store_files(data) == [] and rdma_ls(node) == []
    assert host_snapshot() == before


@pytest.mark.parametrize("annotation, message", [
    (blocks(1, ifName="eth0"), "eth0"),
    (blocks(100), "at most 16"),
    ({ANNOTATION: "[{\"cniConf\": 5}]"}, "cniConf"),
], ids=["ifname-eth0", "100-blocks", "malformed"])
def test_hostile_annotation_fails_the_sandbox_cleanly(node: dict[str, Any], annotation: Any,
                                                      message: str) -> None:
    cd, data = node["cd"], node["data"]
    before = host_snapshot()
    pods_before = cd.pods()
    with pytest.raises(grpc.RpcError) as err:
        cd.run_pod("hostile", "uid-hostile", annotation)
    assert message.lower() in str(err.value.details()).lower()
    assert cd.pods() == pods_before
    assert store_files(data) == []
    assert host_snapshot() == before
    host_links = {i["ifname"] for i in ip_json(None, "link", "show")}
    assert not {n for n in host_links if n.startswith(("rdma", "eth1", "eth2"))}


def test_exclusive_pod_takes_the_nic_and_gives_it_back(node: dict[str, Any]) -> None:
    cd, data = node["cd"], node["data"]
    install_plugin(cd, data, "exclusive")
    try:
        before = host_snapshot()
        sid = cd.run_pod("excl", "uid-excl", blocks(1))
        netns = cd.netns_of(sid)
        pod = links(netns)
        assert sorted(pod) == ["eth0", "eth1", "lo"]
        assert v4(pod["eth1"]) == ["198.51.100.1/28"]  # the NIC's own address
        assert pod["eth1"]["address"] == before["nics"]["rdtest0"][3]
        host_links = {i["ifname"] for i in ip_json(None, "link", "show")}
        assert "rdtest0" not in host_links and "rdtest1" in host_links
        table100 = ip_json(netns, "route", "show", "table", "100")
        assert [r for r in table100 if r["dst"] == HPC_ROUTE[0]]
        assert [(r["pod"], r["nic"], r["mode"]) for r in rdma_ls(node)] == [
            ("e2e/excl", "rdtest0", "exclusive")]
        cd.stop_pod(sid)
        assert host_snapshot() == before  # back with name, address, route, up-state
        cd.remove_pod(sid)
        assert store_files(data) == []
        assert host_snapshot() == before
    finally:
        install_plugin(cd, data, "shared-multi")


def test_install_chained_the_entry_and_kept_the_primary(node: dict[str, Any]) -> None:
    cd = node["cd"]
    conflist = json.loads((cd.cni_conf / "10-vpc-cni.conflist").read_text())
    assert [p["type"] for p in conflist["plugins"]] == ["bridge", "rdma-cni"]
    assert conflist["plugins"][1]["capabilities"] == {"io.kubernetes.cri.pod-annotations": True}
    target = os.readlink(cd.cni_bin / "rdma-cni")  # a versioned tree's front
    assert target.startswith("rdma-cni.versions/") and target.endswith("/rdma-cni-front"), target
    version = subprocess.run([str(cd.cni_bin / "rdma-cni"), "--version"], capture_output=True,
                             text=True, check=True, timeout=30)
    assert version.stdout.startswith("rdma-cni ")
    assert (cd.cni_bin / "nccl_env.sh").exists()
