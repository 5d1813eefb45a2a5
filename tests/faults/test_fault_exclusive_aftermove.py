"""A step that fails right after it moved an exclusive NIC never strands it.

The owner of an ADD recorded what a step did to the NIC (its index in the pod, or on the
host once a rollback took it home: the identity DEL finds a NIC without a bus device
by) only when the step returned. A netlink error right after the move into the pod
(its index there not read yet) left the step unapplied: no rollback of it, the record
purged, the NIC stranded in the pod (a veth dies with the pod's netns, a physical NIC
falls to the init netns under the pod's name). A rollback failing right after it brought
the NIC home left the record naming its index in the pod: DEL found it nowhere, took it
for gone with its hardware, and released the attachment, the NIC home unrestored (no
address, down). Now the state is kept and names the NIC where it is, and the DEL the
runtime sends after a failed ADD brings it home.

Seam: ``RDMA_CNI_TEST_FAIL_AFTER_MOVE`` (given to the process that does the work: the
plugin, or ``serve``). Oracle: ``ip -j`` of the node and the pod (the rig compares the
whole node netns with its baseline: the NIC's name, addresses, routes, up-state), the
data dir."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from cnirunner import PYTHON, REPO, Pod, ip_json, rdma_blocks
from support.resident import Serve

pytestmark = pytest.mark.root
#: where ADD fails, and the error it answers with
CASES = {"pod": ({"RDMA_CNI_TEST_FAIL_AFTER_MOVE": "pod"},
                 "injected failure after the move into the pod"),
         "host": ({"RDMA_CNI_TEST_FAIL_AFTER_MOVE": "host", "RDMA_CNI_TEST_FAIL_AT_STEP": "2"},
                  "injected failure at step 2")}


def _seamed(faults, tmp_path, seam: Mapping[str, str]) -> None:  # type: ignore[no-untyped-def]
    """The resident path's server, started again with the seam (of this checkout)."""
    if faults.server is None:
        return
    faults.server.stop()
    faults.server = Serve(faults.rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log",
                          argv=("env", f"PYTHONPATH={REPO}",
                                *(f"{k}={v}" for k, v in seam.items()),
                                str(PYTHON), "-m", "rdma_cni"))


def _with_mac(ns: str, mac: str) -> list[str]:
    return [lk["ifname"] for lk in ip_json(ns, "link", "show") if lk["address"] == mac]


@pytest.mark.parametrize("where", list(CASES))
def test_a_failure_right_after_a_move_leaves_the_nic_to_del(rig, faults, tmp_path,  # type: ignore[no-untyped-def]
                                                            where: str) -> None:
    seam, failure = CASES[where]
    rig.nic("rnic0", extra_addrs=["198.51.100.2/26"])
    mac = rig.node.links()["rnic0"]["address"]
    _seamed(faults, tmp_path, seam)
    chain = faults.chain("exclusive")
    pod = rig.pod()
    run = chain.add("c1", pod.path, rdma_blocks(1),
                    env=seam if faults.server is None else None)
    assert run.rc == 1 and failure in run.out["msg"], run
    faults.expect_served("ADD", 1)
    # the state kept, with the NIC's claim: the DEL that follows finds it by its record
    assert "nics/rnic0" in rig.files(), (rig.files(), _with_mac(pod.name, mac))

    run = chain.delete("c1", pod.path, blocks=rdma_blocks(1))
    assert run.rc == 0, run
    assert _with_mac(rig.node.ns, mac) == ["rnic0"]
    assert not _with_mac(pod.name, mac)
    assert sorted(pod.links()) == ["eth0", "lo"]
    assert Pod(rig.node.ns).addrs("rnic0") == ["198.51.100.1/26", "198.51.100.2/26"]
    assert rig.node_changes() == {}
    assert rig.files() == []
