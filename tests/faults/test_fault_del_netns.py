"""Issue 14, smaller faults: DEL with ``CNI_NETNS`` naming the node's own netns, or a
relative path, must not stop the chain (an error from our DEL keeps the primary's
DEL from running): it does the state-only cleanup, says so in the log, and
succeeds. ADD with either keeps refusing (code 4) and leaves nothing behind.

Oracle: the exit code, the data dir, the node netns (the rig checks it is as it
was: nothing of the node was deleted) and the pod's own links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cnirunner import rdma_blocks

pytestmark = pytest.mark.root


def _repoint(link: Path, target: str) -> None:
    tmp = link.with_suffix(".new")
    tmp.symlink_to(target)
    os.replace(tmp, link)


@pytest.mark.parametrize("which", ["node", "relative"])
def test_del_with_the_nodes_netns_or_a_relative_path_cleans_state_only(  # type: ignore[no-untyped-def]
        rig, faults, which: str) -> None:
    rig.nic("rnic0")
    chain = faults.chain("shared-multi")
    pod = rig.pod()
    # the path the runtime gave at ADD (a /proc/<pid>/ns/net whose pid was reused by a node
    # process names the node's netns at DEL time: a symlink models that exactly)
    path = rig.tmp / "netns-path"
    _repoint(path, pod.path)
    assert chain.add("cid-a", str(path), rdma_blocks(2)).rc == 0
    node_links = set(rig.node.links())
    if which == "node":
        _repoint(path, rig.node.path)
        odd = str(path)
    else:
        odd = pod.path.lstrip("/")
    run = chain.delete("cid-a", odd)
    assert run.rc == 0, run
    assert run.out is None
    assert rig.files() == [], "state and reservations must be released"
    assert set(rig.node.links()) == node_links
    faults.expect_served("DEL", 1)
    if which == "node":
        assert "is the plugin's own (host) netns: state-only cleanup" in faults.log_text()
        # nothing was done through the node's netns: the pod's links go with the pod
        assert {"eth1", "eth2"} <= set(pod.links())
    else:
        assert "DEL ignores CNI_NETNS" in faults.log_text()
        # the netns recorded at ADD is still the pod's: the teardown went through it
        assert set(pod.links()) == {"lo", "eth0"}
    assert chain.delete("cid-a", odd).rc == 0  # again: nothing left


@pytest.mark.parametrize("which", ["node", "relative"])
def test_add_with_the_nodes_netns_or_a_relative_path_is_refused(  # type: ignore[no-untyped-def]
        rig, faults, which: str) -> None:
    rig.nic("rnic0")
    chain = faults.chain("shared-multi")
    pod = rig.pod()
    odd = rig.node.path if which == "node" else pod.path.lstrip("/")
    run = chain.add("cid-a", odd, rdma_blocks(1))
    assert run.code == 4, run
    assert "CNI_NETNS" in run.out["msg"]
    assert rig.files() == []
    assert set(pod.links()) == {"lo", "eth0"}
