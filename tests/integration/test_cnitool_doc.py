"""docs/getting-started.md's cnitool section, run as written, on a "node" that runs a
kubelet (a fake one serving the real PodResources gRPC API, which knows no cnitool pod).

cnitool is not packaged by Debian: tests/tools/cnitool/main.go mirrors upstream's tool
and is built here against Debian's libcni (golang-github-appc-cni-dev), so ADD, CHECK
and DEL go through the real libcni (result cache, prevResult, disableCheck, capability
args). What the test changes in the block, and why (nothing else):
- ``NIC=eth2`` -> the stand-in NIC of the node netns the block runs in;
- ``CNI_PATH=/opt/cni/bin`` -> a temp bin dir holding the built rdma-cni and Debian's
  loopback;
- ``rdma-test`` -> a name unique to this run (netns, list and pod name);
- the test list's entry also gets ``dataDir``, ``logFile``, ``kubelet`` (the fake
  kubelet's sockets) and no resident socket or metrics file, so nothing is written to
  the host's /var/lib/cni, /var/log or /run/rdma-cni;
- ``CNI_CACHE_DIR`` keeps libcni's result cache in the temp dir.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cnirunner import REPO, ip_json, netns_path
from support.fakes.kubelet import FakeKubelet

PLUGIN_RUNNER = "binary"
pytestmark = pytest.mark.root
DOC = REPO / "docs" / "getting-started.md"
MARKER = "<!-- the block below is run as written by tests/integration/test_cnitool_doc.py -->"


def doc_block() -> str:
    text = DOC.read_text()
    assert MARKER in text
    m = re.search(r"```sh\n(.*?)```", text[text.index(MARKER):], re.S)
    assert m
    return m.group(1)


def replace(text: str, old: str, new: str) -> str:
    assert old in text, f"the doc's block no longer has {old!r}"
    return text.replace(old, new)


@pytest.fixture(scope="module")
def cnitool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cnitool")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": "/usr/share/gocode",
           "GOCACHE": str(out / "gocache"), "CGO_ENABLED": "0"}
    proc = subprocess.run(["go", "build", "-o", str(out / "cnitool"), "."],
                          cwd=REPO / "tests" / "tools" / "cnitool", env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"go build failed (./scripts/setup.sh installs golang-go " \
                                 f"and golang-github-appc-cni-dev): {proc.stderr}"
    return out


def _script(rig: Any, cnitool: Path, binary: str, kubelet_dir: Path, name: str,
            allocation_config: bool = True) -> str:
    bin_dir = rig.tmp / "cni-bin"
    bin_dir.mkdir(exist_ok=True)
    for link, target in (("rdma-cni", binary), ("loopback", "/usr/lib/cni/loopback")):
        if not (bin_dir / link).exists():
            os.symlink(target, bin_dir / link)
    test_keys = json.dumps({
        "dataDir": str(rig.data_dir), "logFile": str(rig.log_file), "residentSocket": "",
        "metricsFile": "", "kubelet": {
            "podResourcesSocket": str(kubelet_dir / "pr.sock"),
            "checkpointFile": str(kubelet_dir / "no-checkpoint"),
            "devicePluginDir": str(kubelet_dir)}})[1:-1]
    block = doc_block()
    block = replace(block, "NIC=eth2", "NIC=rnic0")
    block = replace(block, "CNI_PATH=/opt/cni/bin", f"CNI_PATH={bin_dir}")
    block = replace(block, "rdma-test", name)
    alloc = '"allocation": "config",'
    block = replace(block, alloc, (alloc if allocation_config else "") + f" {test_keys},")
    return f"export CNI_CACHE_DIR={rig.tmp / 'cache'} PATH={cnitool}:$PATH\n{block}"


def _run(rig: Any, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", rig.node.ns, "sh", "-ec", script],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def kubelet_dir() -> Any:
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="cnit-", dir="/tmp"))  # short: unix socket paths
    k = FakeKubelet(pr_socket=str(d / "pr.sock")).start()
    yield d
    k.stop()
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


def test_the_cnitool_section_works_as_written_on_a_kubelet_node(
        rig: Any, cnitool: Path, built_binary: list[str], kubelet_dir: Path) -> None:
    rig.nic("rnic0")
    rig.chain("shared-multi")  # the node's baseline, checked clean by the rig afterwards
    name = f"{rig.node.prefix}cnit"
    proc = _run(rig, _script(rig, cnitool, built_binary[0], kubelet_dir, name))
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n{rig.log_tail()}"
    result, end = json.JSONDecoder().raw_decode(proc.stdout)  # cnitool add prints the result
    assert [i["name"] for i in result["interfaces"]] == ["lo", "eth1"]
    assert any(ip["address"].startswith("198.51.100.") for ip in result["ips"])
    addr_line = proc.stdout[end:].strip().splitlines()[0]  # ip -br addr show eth1
    assert addr_line.startswith("eth1") and "198.51.100." in addr_line and "UP" in addr_line
    assert not os.path.exists(netns_path(name))  # the block removed its netns
    assert ip_json(rig.node.ns, "link", "show", "rnic0")  # the NIC is still on the node


def test_without_allocation_config_a_kubelet_node_refuses_the_made_up_pod(
        rig: Any, cnitool: Path, built_binary: list[str], kubelet_dir: Path) -> None:
    rig.nic("rnic0")
    rig.chain("shared-multi")
    name = f"{rig.node.prefix}cnit"
    script = _script(rig, cnitool, built_binary[0], kubelet_dir, name, allocation_config=False)
    upto_add = script[:script.index(f"cnitool add {name}")]
    add = f"cnitool add {name} /var/run/netns/{name} || rc=$?\n"
    cleanup = (f"cnitool del {name} /var/run/netns/{name}\nip netns del {name}\n"
               'rm -r "$T"\nexit ${rc:-0}\n')
    proc = _run(rig, upto_add + add + cleanup)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "vke.volcengine.com/rdma" in proc.stderr, proc.stderr
    assert not os.path.exists(netns_path(name))
