"""Issue 14: the PodResources faults of ADD, through the built binary, in-process and
through the resident server, against a fake kubelet speaking the real gRPC API.

- A kubelet whose ``Get`` answers NOT_FOUND is handled like a plain error: ``List``,
  then 101 when the pod is not listed (today: code 5, the pod fails to start).
- PodResources v1 names pods by namespace/name only. A pod recreated under the
  same name while the old one still terminates is listed twice (or ``Get`` answers
  with the old one); ADD tells them apart through the checkpoint, keyed by
  ``K8S_POD_UID``, and refuses with 11 (leaving nothing) when nothing can tell.

Oracle: the pod's ``eth1`` address (the NIC's subnet says which NIC it got) and the
data dir.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cnirunner import Chain, Node, data_files, plugin_conf, rdma_blocks
from support.agent import plugin_binary
from support.fakes.kubelet import FakeKubelet, PodEntry
from support.resident import Serve

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

RES = "vke.volcengine.com/rdma"
NIC0, NIC1 = "198.51.100.1/26", "198.51.100.65/26"


class Site:
    def __init__(self, tmp: Path, resident: bool) -> None:
        self.node = Node()
        try:
            self._build(tmp, resident)
        except BaseException:
            self.close()  # nothing made here outlives a failed set-up
            raise

    def _build(self, tmp: Path, resident: bool) -> None:
        self.node.add_nic("rnic0", NIC0)
        self.node.add_nic("rnic1", NIC1)
        self.kubelet = FakeKubelet(pr_socket=str(tmp / "kubelet.sock")).start()
        self.checkpoint = tmp / "kubelet_internal_checkpoint"
        sock = tmp / "r.sock"
        self.serve = Serve(self.node.ns, sock, tmp / "serve.log",
                           [plugin_binary()]) if resident else None
        conf = plugin_conf("shared-multi", ["rnic0", "rnic1"], tmp,
                           residentSocket=str(sock) if resident else "",
                           kubelet={"podResourcesSocket": self.kubelet.pr_socket,
                                    "checkpointFile": str(self.checkpoint),
                                    "devicePluginDir": str(tmp)})
        self.data_dir = tmp / "data"
        self.chain = Chain(conf, node_ns=self.node.ns, binary=plugin_binary())

    def write_checkpoint(self, entries: dict[str, list[str]]) -> None:
        self.checkpoint.write_text(json.dumps({"Data": {"PodDeviceEntries": [
            {"PodUID": uid, "ContainerName": "c", "ResourceName": RES,
             "DeviceIDs": {"0": ids}} for uid, ids in entries.items()],
            "RegisteredDevices": {}}, "Checksum": 0}))

    def add(self, cid: str, pod: str = "train") -> tuple[int, object, str]:
        """ADD of pod ``default/<pod>`` (UID ``uid-<pod>``); (rc, CNI code, eth1 address)."""
        p = self.node.add_pod()
        run = self.chain.add(cid, p.path, rdma_blocks(1), pod=pod)
        addrs = p.addrs("eth1") if run.rc == 0 else []
        assert self.serve is None or self.serve.served("ADD") >= 1, "not the resident path"
        return run.rc, run.code, addrs[0] if addrs else ""

    def close(self) -> None:
        for key in list(getattr(self, "chain", Chain({})).cache):
            self.chain.delete(key[0])
        serve = getattr(self, "serve", None)
        if serve:
            serve.stop()
        kubelet = getattr(self, "kubelet", None)
        if kubelet:
            kubelet.stop()
        self.node.close()


@pytest.fixture(params=["in-process", "resident"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    s = Site(tmp_path, request.param == "resident")
    try:
        yield s
    finally:
        s.close()


def test_get_not_found_falls_back_to_list(site: Site) -> None:
    site.kubelet.get_mode = "notfound"
    site.kubelet.set_pod("default", "train", {RES: ["rnic1"]})
    rc, code, addr = site.add("a" * 64)
    assert (rc, code) == (0, None)
    assert addr.startswith("198.51.100.") and int(addr.split(".")[3].split("/")[0]) > 64
    assert site.kubelet.calls[:2] == ["Get", "List"]


def test_get_not_found_and_unlisted_is_101(site: Site) -> None:
    site.kubelet.get_mode = "notfound"
    rc, code, _ = site.add("b" * 64)
    assert (rc, code) == (1, 101)
    assert data_files(site.data_dir) == []


def test_two_generations_listed_without_a_checkpoint_is_try_again(site: Site) -> None:
    site.kubelet.get_mode = "unimplemented"
    site.kubelet.older.append(PodEntry("default", "train", {"main": {RES: ["rnic0"]}}))
    site.kubelet.set_pod("default", "train", {RES: ["rnic1"]})
    rc, code, _ = site.add("c" * 64)
    assert (rc, code) == (1, 11)
    assert data_files(site.data_dir) == []


def test_two_generations_told_apart_by_the_checkpoint_uid(site: Site) -> None:
    site.kubelet.get_mode = "unimplemented"
    site.kubelet.older.append(PodEntry("default", "train", {"main": {RES: ["rnic0"]}}))
    site.kubelet.set_pod("default", "train", {RES: ["rnic1"]})
    site.write_checkpoint({"uid-old": ["rnic0"], "uid-train": ["rnic1"]})
    rc, code, addr = site.add("d" * 64)
    assert (rc, code) == (0, None)
    assert int(addr.split(".")[3].split("/")[0]) > 64, f"got the old pod's NIC: {addr}"


def test_get_answering_the_old_generation_is_refused(site: Site) -> None:
    site.kubelet.set_pod("default", "train", {RES: ["rnic0"]})  # still the old pod's
    site.write_checkpoint({"uid-old": ["rnic0"]})  # the new pod's allocation not in yet
    rc, code, _ = site.add("e" * 64)
    assert (rc, code) == (1, 11)
    assert data_files(site.data_dir) == []
