"""DEL from saved state only (twice, no netns, netns gone, no prevResult, NIC gone,
never added, an old sandbox's late DEL), CHECK, GC and STATUS, driven like libcni."""

from __future__ import annotations

import pytest
from cnirunner import CAP_ANNOTATIONS, rdma_blocks, rule_of, sh

pytestmark = pytest.mark.root
PLUGIN_RUNNER = "binary"  # the session build: immune to edits of the tree mid-run

MODES = ["shared-multi", "exclusive"]


def _added(rig, mode: str, **chain_kw):
    rig.nic()
    pod = rig.pod()
    chain = rig.chain(mode, **chain_kw)
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert "eth1" in pod.links()
    return chain, pod


def _pod_clean(pod) -> None:
    assert sorted(pod.links()) == ["eth0", "lo"]
    assert [r["priority"] for r in pod.rules()] == [0, 32766, 32767]


@pytest.mark.parametrize("mode", MODES)
def test_del_twice(rig, mode: str) -> None:
    chain, pod = _added(rig, mode)
    cached = chain.cache[("c1", "eth0")]
    assert chain.delete("c1").rc == 0
    _pod_clean(pod)
    chain.cache[("c1", "eth0")] = cached  # the runtime retries with the same cached result
    run = chain.delete("c1")
    assert run.rc == 0 and run.out is None, run
    _pod_clean(pod)


@pytest.mark.parametrize("mode", MODES)
def test_del_with_empty_netns(rig, mode: str) -> None:
    chain, pod = _added(rig, mode)
    run = chain.delete("c1", netns="")
    assert run.rc == 0, run
    _pod_clean(pod)  # found through the netns saved at ADD


@pytest.mark.parametrize("mode", MODES)
def test_del_with_netns_gone(rig, mode: str) -> None:
    chain, pod = _added(rig, mode)
    rig.node.delete_pod(pod)
    if mode == "exclusive":
        rig.gone.add("rnic0")  # a veth stand-in dies with the netns it is in
    run = chain.delete("c1")
    assert run.rc == 0, run
    assert rig.files() == []


@pytest.mark.parametrize("mode", MODES)
def test_del_without_prev_result(rig, mode: str) -> None:
    chain, pod = _added(rig, mode)
    run = chain.delete("c1", with_prev=False)
    assert run.rc == 0, run
    _pod_clean(pod)


@pytest.mark.parametrize("mode", MODES)
def test_del_from_saved_state_only(rig, mode: str) -> None:
    """The DEL config no longer asks for anything (no annotation, other devices)."""
    chain, pod = _added(rig, mode)
    chain.plugin["devices"] = ["other0"]
    run = chain.delete("c1", blocks=[])
    assert run.rc == 0, run
    _pod_clean(pod)


@pytest.mark.parametrize("mode", MODES)
def test_del_with_nic_gone(rig, mode: str) -> None:
    chain, pod = _added(rig, mode)
    if mode == "exclusive":
        sh("ip", "-n", pod.name, "link", "del", "dev", "eth1")  # the NIC itself, in the pod
    else:
        rig.node.delete_nic("rnic0")  # its macvlan in the pod goes with it
    rig.gone.add("rnic0")
    run = chain.delete("c1")
    assert run.rc == 0, run
    _pod_clean(pod)


def test_del_never_added(rig) -> None:
    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi")
    run = chain.delete("never", netns=pod.path, blocks=rdma_blocks(1))
    assert run.rc == 0 and run.out is None, run
    _pod_clean(pod)


def test_old_sandbox_del_keeps_new_sandbox_address(rig) -> None:
    rig.nic()
    chain = rig.chain("shared-multi")
    old, new = rig.pod(), rig.pod()
    assert chain.add("old", old.path, rdma_blocks(1)).rc == 0
    old_cache = chain.cache[("old", "eth0")]
    assert chain.delete("old").rc == 0
    rig.node.delete_pod(old)
    run = chain.add("new", new.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert new.addrs("eth1") == ["198.51.100.2/26"]  # the address the old sandbox had
    files = rig.files()
    # the old sandbox's DEL comes again, late (same pod, other container ID)
    chain.cache[("old", "eth0")] = old_cache
    assert chain.delete("old").rc == 0
    assert rig.files() == files
    assert new.addrs("eth1") == ["198.51.100.2/26"]
    assert chain.check("new").rc == 0
    # and the address is still taken: a third pod gets the next one
    third = rig.pod()
    assert chain.add("third", third.path, rdma_blocks(1)).rc == 0
    assert third.addrs("eth1") == ["198.51.100.3/26"]
    assert chain.delete("third").rc == 0
    assert chain.delete("new").rc == 0


# --- CHECK ----------------------------------------------------------------------
def _drop_iface(pod) -> None:
    sh("ip", "-n", pod.name, "link", "del", "dev", "eth1")


def _drop_address(pod) -> None:
    sh("ip", "-n", pod.name, "addr", "del", pod.addrs("eth1")[0], "dev", "eth1")


def _drop_rule(pod) -> None:
    ip = pod.addrs("eth1")[0].split("/")[0]
    assert rule_of(pod.name, ip)
    sh("ip", "-n", pod.name, "rule", "del", "from", ip, "lookup", "100", "priority", "20000")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("breaks", [_drop_iface, _drop_address, _drop_rule],
                         ids=["iface", "address", "rule"])
def test_check_detects_damage(rig, mode: str, breaks) -> None:
    chain, pod = _added(rig, mode)
    assert chain.check("c1").rc == 0
    if mode == "exclusive" and breaks is _drop_iface:
        rig.gone.add("rnic0")
    breaks(pod)
    run = chain.check("c1")
    assert run.rc == 1 and run.code == 105, run
    assert chain.delete("c1").rc == 0
    _pod_clean(pod)


def test_check_consults_the_prev_result(rig) -> None:  # type: ignore[no-untyped-def]
    """The spec: CHECK "must consult the prevResult to determine the expected interfaces
    and addresses". It read only its own record: a prevResult without our interface (a
    stale cache of the runtime) passed."""
    rig.nic()
    chain = rig.chain("shared-multi")
    pod = rig.pod()
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    assert chain.check("c1").rc == 0
    cached = chain.cache[("c1", "eth0")]
    full = cached["result"]
    primary = {**full, "interfaces": full["interfaces"][:1],
               "ips": [ip for ip in full["ips"] if ip.get("interface") == 0]}
    annotations = cached["conf"].get("runtimeConfig", {}).get(CAP_ANNOTATIONS)
    run = chain._run("CHECK", chain.conf(primary, annotations), "c1", cached["netns"], "eth0",
                     cached["args"])
    assert run.rc == 1 and run.code == 105 and "prevResult lacks interface" in run.out["msg"]
    assert chain.delete("c1").rc == 0
    _pod_clean(pod)


# --- GC and STATUS ----------------------------------------------------------------
def test_gc_releases_unlisted_keeps_listed(rig) -> None:
    rig.nic()
    chain = rig.chain("shared-multi", cni_version="1.1.0")
    keep, drop = rig.pod(), rig.pod()
    assert chain.add("keep", keep.path, rdma_blocks(1)).rc == 0
    assert chain.add("drop", drop.path, rdma_blocks(2)).rc == 0
    run = chain.gc([("keep", "eth0")])
    assert run.rc == 0 and run.out is None, run
    _pod_clean(drop)
    assert keep.addrs("eth1") == ["198.51.100.2/26"]
    assert len(rig.files()) == 2  # keep's state and reservation
    assert chain.check("keep").rc == 0
    # a GC that lists it again changes nothing; one that does not releases it
    assert chain.gc([("keep", "eth0")]).rc == 0 and len(rig.files()) == 2
    assert chain.gc([]).rc == 0
    _pod_clean(keep)
    chain.cache.clear()


def test_gc_reads_the_list_under_either_name_and_refuses_none(rig) -> None:  # type: ignore[no-untyped-def]
    """The published text of spec 1.1.0 names the list ``cni.dev/attachments`` (libcni sends
    both names since v1.2.3): a GC naming only that one released every pod of the network,
    and so did a GC naming no list at all. The latter is now refused (7), changing nothing."""
    rig.nic()
    chain = rig.chain("shared-multi", cni_version="1.1.0")
    keep, drop = rig.pod(), rig.pod()
    assert chain.add("keep", keep.path, rdma_blocks(1)).rc == 0
    assert chain.add("drop", drop.path, rdma_blocks(1)).rc == 0
    run = chain._run("GC", chain.conf())
    assert run.rc == 1 and run.code == 7 and "cni.dev/valid-attachments" in run.out["msg"], run
    assert keep.addrs("eth1") and drop.addrs("eth1") and len(rig.files()) == 4
    listed = [{"containerID": "keep", "ifname": "eth0"}]
    run = chain._run("GC", chain.conf(extra={"cni.dev/attachments": listed}))
    assert run.rc == 0 and run.out is None, run
    _pod_clean(drop)
    assert keep.addrs("eth1") == ["198.51.100.2/26"] and len(rig.files()) == 2
    assert chain.gc([]).rc == 0
    _pod_clean(keep)
    chain.cache.clear()


def test_status_ok_and_unusable_data_dir(rig, tmp_path) -> None:
    rig.nic()
    chain = rig.chain("shared-multi", cni_version="1.1.0")
    run = chain.status()
    assert run.rc == 0 and run.out is None, run
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    bad = rig.chain("shared-multi", cni_version="1.1.0", dataDir=str(blocker / "data"))
    run = bad.status()
    assert run.rc == 1 and run.code == 50, run
    assert "a-file" in run.out["msg"]
