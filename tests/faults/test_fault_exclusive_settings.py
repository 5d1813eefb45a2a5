"""An exclusive NIC comes back with its own settings, not the node's defaults: its IPv4
and IPv6 settings (the kernel makes a link's ``/proc/sys/net/ipv{4,6}/conf/<link>``
again from the netns's ``default`` at every move), the link flags and queue length the
pod may change, and its alias (which carries our mark while it is in the pod). Both
after a DEL and after a failed ADD's rollback, on both request paths.

Oracle: the rig compares the whole node netns (``ip -j -d link``, addresses, routes,
rules, every interface's /proc/sys/net/ipv{4,6}/conf) with the baseline taken before
ADD; the settings are also read back by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cnirunner import PYTHON, REPO, link_detail, rdma_blocks, sh
from support.resident import Serve

pytestmark = pytest.mark.root
#: the NIC's own settings on the node, none of them the node's defaults
SETTINGS = {"ipv4": {"rp_filter": "0", "arp_ignore": "2", "accept_local": "1",
                     "forwarding": "1", "arp_announce": "1"},
            "ipv6": {"disable_ipv6": "1", "accept_ra": "2", "forwarding": "1",
                     "autoconf": "0"}}


def _conf(ns: str, family: str, key: str) -> str:
    return sh("ip", "netns", "exec", ns, "cat",
              f"/proc/sys/net/{family}/conf/rnic0/{key}").strip()


def _set_up_nic(rig) -> None:  # type: ignore[no-untyped-def]
    """rnic0 with settings of its own: sysctls, an alias and a queue length."""
    rig.nic("rnic0")
    ns = rig.node.ns
    for family, values in SETTINGS.items():
        for key, value in values.items():
            sh("ip", "netns", "exec", ns, "sh", "-c",
               f"echo {value} > /proc/sys/net/{family}/conf/rnic0/{key}")
    sh("ip", "-n", ns, "link", "set", "dev", "rnic0", "alias", "uplink-A", "txqueuelen", "500")
    # disable_ipv6 took the link-local address away, and its routes
    assert not [a for a in link_detail(ns, "rnic0").get("addr_info", []) if a["family"] == "inet6"]


def _assert_settings_back(rig) -> None:  # type: ignore[no-untyped-def]
    ns = rig.node.ns
    link = link_detail(ns, "rnic0")
    got = {**{family: {k: _conf(ns, family, k) for k in values}
              for family, values in SETTINGS.items()},
           "alias": link.get("ifalias"), "txqlen": link["txqlen"],
           "flags": sorted({"MULTICAST", "NOARP", "PROMISC", "ALLMULTI"} & set(link["flags"])),
           "ipv6 addresses": sh("ip", "-n", ns, "-6", "addr", "show", "dev", "rnic0").strip()}
    assert got == {**SETTINGS, "alias": "uplink-A", "txqlen": 500, "flags": ["MULTICAST"],
                   "ipv6 addresses": ""}
    assert rig.node_changes() == {}


def test_settings_come_back_after_del(rig, faults) -> None:  # type: ignore[no-untyped-def]
    _set_up_nic(rig)
    chain = faults.chain("exclusive")
    pod = rig.pod()
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    # the pod's own changes to its NIC
    sh("ip", "-n", pod.name, "link", "set", "dev", "eth1", "arp", "off", "promisc", "on",
       "multicast", "off", "allmulticast", "on", "txqueuelen", "77", "alias", "mine")
    flags = set(link_detail(pod.name, "eth1")["flags"])
    assert {"NOARP", "PROMISC", "ALLMULTI"} <= flags and "MULTICAST" not in flags
    run = chain.delete("c1")
    assert run.rc == 0, run
    faults.expect_served("ADD", 1)
    _assert_settings_back(rig)


def test_settings_come_back_after_a_failed_add(rig, faults, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ADD fails once the NIC is in the pod (the executor's step 7): its rollback brings
    the NIC back with its settings."""
    _set_up_nic(rig)
    seam = {"RDMA_CNI_TEST_FAIL_AT_STEP": "7"}
    if faults.server is not None:  # the seam must reach the server that does the work
        faults.server.stop()
        faults.server = Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log",
                              argv=("env", f"PYTHONPATH={REPO}", "RDMA_CNI_TEST_FAIL_AT_STEP=7",
                                    str(PYTHON), "-m", "rdma_cni"))
    chain = faults.chain("exclusive")
    pod = rig.pod()
    run = chain.add("c1", pod.path, rdma_blocks(1), env=seam)
    assert run.rc == 1 and "injected failure at step 7" in run.out["msg"], run
    assert "eth1" not in sh("ip", "-n", pod.name, "link", "show")
    faults.expect_served("ADD", 1)
    _assert_settings_back(rig)
    assert chain.delete("c1", blocks=rdma_blocks(1)).rc == 0


def _unreadable_record(rig) -> Path:  # type: ignore[no-untyped-def]
    """The attachment's state record made unreadable; the NIC's claim."""
    [state] = (Path(rig.data_dir) / "state").glob("*.json")
    state.write_text(json.dumps({"schema": 1, "key": {"network": 7}}))
    return Path(rig.data_dir) / "nics" / "rnic0"


def test_settings_come_back_after_a_del_of_an_unreadable_record(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """DEL rebuilds the interface from the NIC's claim, which holds its settings too."""
    _set_up_nic(rig)
    chain = faults.chain("exclusive")
    pod = rig.pod()
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    sh("ip", "-n", pod.name, "link", "set", "dev", "eth1", "arp", "off", "txqueuelen", "77")
    assert "host_link" in json.loads(_unreadable_record(rig).read_text())["plan"]
    run = chain.delete("c1")
    assert run.rc == 0, run
    _assert_settings_back(rig)
    assert rig.files() == []


def test_a_claim_whose_settings_do_not_read_still_brings_the_nic_home(rig, faults) -> None:  # type: ignore[no-untyped-def]
    """Its recorded settings unusable, the rest of the claim still is: the NIC comes home
    by its identity, under its name, up, with its addresses and routes (before: the
    whole claim was dropped, and a NIC without a bus device stayed in the pod)."""
    rig.nic("rnic0")
    chain = faults.chain("exclusive")
    pod = rig.pod()
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    claim = _unreadable_record(rig)
    rec = json.loads(claim.read_text())
    rec["plan"]["host_link"] = {"flags": "none", "ipv4": []}
    claim.write_text(json.dumps(rec))
    run = chain.delete("c1")
    assert run.rc == 0, run
    assert "eth1" not in pod.links()
    assert "UP" in link_detail(rig.node.ns, "rnic0")["flags"]
    assert "settings the claim of exclusive NIC rnic0 records do not read" in faults.log_text()
    assert rig.node_changes() == {} and rig.files() == []
