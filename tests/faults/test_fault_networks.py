"""Issue 14 item 5: two RDMA networks on one node: two rdma-cni entries of the one
conflist, each with its own ``cniConfName``, devices and (shared or separate)
``dataDir``. Supported: each entry keys its state by its cniConfName too, takes
routing tables nothing in the pod uses yet, and ``install`` keeps every network's
entry. Two entries with the same cniConfName are refused with a clear message.

Oracles: each pod interface, its rule and its table's routes as ``ip -j`` shows
them, the chained result, the data dir."""

from __future__ import annotations

import pytest
from cnirunner import HPC_NET, rdma_blocks, sh, table_routes, vpc_result

from rdma_cni.tools.conflist import insert_entry

GW0, GW1 = "198.51.100.62", "198.51.100.126"


def _networks(rig, faults, shared_dir: bool):  # type: ignore[no-untyped-def]
    rig.nic("rnic0", "198.51.100.1/26", gw=GW0)
    rig.nic("rnic1", "198.51.100.65/26", routes=[])
    # the same fabric through both NICs (a second route, by metric), as dual-rail nodes have
    sh("ip", "-n", rig.node.ns, "route", "add", HPC_NET, "via", GW1, "dev", "rnic1",
       "metric", "200")
    a = faults.chain("shared-multi", ("rnic0",))
    extra = {} if shared_dir else {"dataDir": str(rig.tmp / "data-b")}
    b = faults.chain("shared-multi", ("rnic1",), cniConfName="rdma-b", **extra)
    return a, b


BLOCKS = [{"cniConf": {"name": "rdma"}}, {"cniConf": {"name": "rdma-b"}}]


def _add_both(a, b, pod, cid: str = "cid-1"):  # type: ignore[no-untyped-def]
    ra = a.add(cid, pod.path, BLOCKS)
    assert ra.rc == 0, ra
    rb = b.add(cid, pod.path, BLOCKS, prev=ra.out)
    assert rb.rc == 0, rb
    return rb.out


def _fabric(pod, table: int, gw: str) -> bool:
    return any(r[0] == HPC_NET and r[1] == gw for r in table_routes(pod.name, table))


@pytest.mark.root
@pytest.mark.parametrize("shared_dir", [True, False], ids=["shared-dataDir", "own-dataDirs"])
def test_two_networks_attach_side_by_side(rig, faults, shared_dir: bool) -> None:  # type: ignore[no-untyped-def]
    a, b = _networks(rig, faults, shared_dir)
    pod = rig.pod()
    out = _add_both(a, b, pod)
    assert [i["name"] for i in out["interfaces"]] == ["eth0", "eth1", "eth2"], out
    assert pod.addrs("eth1") == ["198.51.100.2/26"] and pod.addrs("eth2") == ["198.51.100.66/26"]
    assert _fabric(pod, 100, GW0) and _fabric(pod, 101, GW1), "each network its own table"
    assert not _fabric(pod, 100, GW1)
    # the first network goes first (not libcni's order, the issue's): the second keeps all
    assert a.delete("cid-1").rc == 0
    assert "eth1" not in pod.links() and pod.addrs("eth2") == ["198.51.100.66/26"]
    assert _fabric(pod, 101, GW1), "the second network's fabric route went with the first"
    assert b.delete("cid-1").rc == 0
    assert set(pod.links()) == {"lo", "eth0"}
    if not shared_dir:
        assert [p for p in (rig.tmp / "data-b").rglob("*") if p.is_file() and
                p.parent.name in ("state", "addrs", "nics")] == []
    faults.expect_served("ADD", 2)


@pytest.mark.root
def test_a_repeated_add_of_each_network_returns_its_own_result(rig, faults) -> None:  # type: ignore[no-untyped-def]
    a, b = _networks(rig, faults, True)
    pod = rig.pod()
    first = _add_both(a, b, pod)
    again_a = a.add("cid-1", pod.path, BLOCKS, prev=vpc_result(pod.path))
    assert again_a.rc == 0, again_a
    again = b.add("cid-1", pod.path, BLOCKS, prev=again_a.out)
    assert again.rc == 0 and again.out == first, again
    assert b.delete("cid-1").rc == 0 and a.delete("cid-1").rc == 0


@pytest.mark.root
def test_two_entries_with_one_cni_conf_name_are_refused(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0", "198.51.100.1/26", gw=GW0)
    a = faults.chain("shared-multi", ("rnic0",))
    twin = faults.chain("shared-multi", ("rnic0",))
    pod = rig.pod()
    ra = a.add("cid-1", pod.path, rdma_blocks(1))
    assert ra.rc == 0, ra
    rb = twin.add("cid-1", pod.path, rdma_blocks(1), prev=ra.out)
    assert rb.code == 7, rb
    assert "give each RDMA network its own cniConfName" in rb.out["msg"]
    assert pod.addrs("eth1") == ["198.51.100.2/26"]  # the first network's is untouched
    assert twin.delete("cid-1").rc == 0  # the DEL of either cleans the one attachment up
    assert a.delete("cid-1").rc == 0


def test_install_keeps_one_entry_per_network() -> None:
    primary = {"type": "vpc-cni"}
    first = {"type": "rdma-cni", "mode": "shared"}
    second = {"type": "rdma-cni", "mode": "shared", "cniConfName": "rdma-b"}
    doc = {"name": "vpc-cni", "plugins": [primary]}
    doc = insert_entry(doc, first)
    doc = insert_entry(doc, second)
    assert doc["plugins"] == [primary, first, second]
    updated = {**first, "mtu": 1400}
    doc = insert_entry(doc, updated)
    assert doc["plugins"] == [primary, updated, second]
    assert insert_entry(doc, second) == doc  # idempotent
    twins = {"name": "vpc-cni", "plugins": [primary, first, dict(first)]}
    assert insert_entry(twins, first)["plugins"] == [primary, first]
