"""``rdma-cni install --watch`` (the built binary, as the DaemonSet's cni-watch runs it)
against a stand-in primary that keeps rewriting its conflist, and a pod ADD that the
runtime starts right after each rewrite, through the binary the install put in the
CNI bin dir, with the plugin list read from the conf dir the way libcni picks it.

The watch's backstop poll is 60 s here, so every re-apply within 1 s comes from inotify.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cnirunner import Chain, ip_json, rdma_blocks

from rdma_cni.models.subconfig import find_entry, first_conf_file

PLUGIN_RUNNER = "binary"
pytestmark = pytest.mark.root


def primary(gen: int) -> dict[str, Any]:
    """vpc-cni's list; ``gen`` is a field of its own that changes with every rewrite."""
    return {"cniVersion": "0.4.0", "name": "vpc-cni", "disableCheck": True,
            "plugins": [{"type": "vpc-cni", "generation": gen,
                         "capabilities": {"bandwidth": True}},
                        {"type": "portmap", "capabilities": {"portMappings": True}}]}


def rewrite_atomic(path: Path, doc: dict[str, Any]) -> None:
    """As vpc-cni writes it: a temp file in the same dir, then a rename over the list."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, path)


def rewrite_in_place(path: Path, doc: dict[str, Any]) -> None:
    """open(O_TRUNC) and write, as a naive agent (or `cat > file`) does."""
    with open(path, "w") as f:
        f.write(json.dumps(doc, indent=2))


def chained(path: Path) -> bool:
    try:
        return find_entry(json.loads(path.read_text())) is not None
    except (OSError, ValueError):
        return False


def until(cond: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < timeout, f"not within {timeout} s"
        time.sleep(0.005)
    return time.monotonic() - start


class Node:
    def __init__(self, rig: Any, binary: Path) -> None:
        self.rig = rig
        self.bin = rig.tmp / "opt-cni-bin"
        self.conf = rig.tmp / "net.d"
        self.conf.mkdir()
        self.conflist = self.conf / "10-vpc-cni.conflist"
        rewrite_atomic(self.conflist, primary(0))
        rig.nic("rnic0")
        cfg = rig.tmp / "config.json"
        cfg.write_text(json.dumps(rig.plugin("shared-multi")))
        argv = [str(binary), "install", "--watch", "--interval", "60",
                "--bundle", str(binary.parent),
                "--cni-bin-dir", str(self.bin), "--cni-conf-dir", str(self.conf),
                "--config", str(cfg), "--mode", "shared-multi"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def runtime_chain(self) -> Chain:
        """What libcni runs now: our entry of the first conflist of the conf dir, executed
        from the CNI bin dir (the binary the install put there)."""
        path = first_conf_file(str(self.conf))
        assert path is not None
        doc = json.loads(Path(path).read_text())
        entry = find_entry(doc)
        assert entry is not None, f"the runtime would skip rdma-cni: {doc}"
        plugin = {k: v for k, v in entry.items() if k not in ("name", "cniVersion")}
        return Chain(plugin, name=doc["name"], cni_version=doc["cniVersion"],
                     node_ns=self.rig.node.ns, binary=[str(self.bin / "rdma-cni")])

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=20)
        return err


@pytest.fixture
def node(rig: Any, built_binary: list[str]) -> Iterator[Node]:
    n = Node(rig, Path(built_binary[0]))
    try:
        until(lambda: chained(n.conflist), 20.0)  # installed (bundle copied, entry added)
        yield n
    finally:
        err = n.stop()
        print(err)


@pytest.mark.parametrize("rewrite", [rewrite_atomic, rewrite_in_place])
def test_entry_back_within_a_second_and_the_next_pod_chains_through_rdma_cni(
        rig: Any, node: Node, rewrite: Callable[[Path, dict[str, Any]], None]) -> None:
    took = []
    for gen in range(1, 4):
        rewrite(node.conflist, primary(gen))
        took.append(until(lambda: chained(node.conflist), 1.0))
        doc = json.loads(node.conflist.read_text())
        assert [p["type"] for p in doc["plugins"]] == ["vpc-cni", "rdma-cni", "portmap"]
        assert doc["plugins"][0]["generation"] == gen  # the primary's own change kept
        assert doc["disableCheck"] is True
        # the runtime starts a pod now: it chains through the installed rdma-cni
        pod = rig.pod()
        chain = node.runtime_chain()
        run = chain.add(f"c{gen}", pod.path, rdma_blocks(1))
        assert run.rc == 0, run.err
        assert [i["name"] for i in run.out["interfaces"]] == ["eth0", "eth1"]
        link = ip_json(pod.name, "-d", "link", "show", "eth1")[0]
        assert link["linkinfo"]["info_kind"] == "macvlan"
        assert pod.addrs("eth1"), "eth1 has no address"
        assert chain.delete(f"c{gen}").rc == 0
        rig.node.delete_pod(pod)
    print(f"re-applied after {rewrite.__name__}: "
          + ", ".join(f"{t * 1000:.0f} ms" for t in took))
    assert node.proc.poll() is None
    assert sorted(os.listdir(node.conf)) == ["10-vpc-cni.conflist",
                                             "10-vpc-cni.conflist.rdma-cni.bak"]
    assert [p["type"] for p in json.loads(
        (node.conf / "10-vpc-cni.conflist.rdma-cni.bak").read_text())["plugins"]] == [
        "vpc-cni", "portmap"]


def test_the_watch_follows_a_replaced_conf_dir(rig: Any, node: Node) -> None:
    new = node.conf.with_name("net.d.new")
    new.mkdir()
    rewrite_atomic(new / "10-vpc-cni.conflist", primary(5))
    old = node.conf.with_name("net.d.old")
    os.rename(node.conf, old)
    os.rename(new, node.conf)
    until(lambda: chained(node.conflist), 1.0)
    for f in old.iterdir():
        f.unlink()
    old.rmdir()
    rewrite_in_place(node.conflist, primary(6))
    until(lambda: chained(node.conflist), 1.0)
    assert json.loads(node.conflist.read_text())["plugins"][0]["generation"] == 6
