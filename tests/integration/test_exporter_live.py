"""rdma-cni exporter against a real ADD: the plugin runs in a throwaway "node"
netns whose veth end stands in for the RDMA NIC; the exporter runs in that
netns too and is scraped from inside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.proc import run as _sh

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
PYTHON = str(REPO / ".venv" / "bin" / "python")
PORT = 19469
ANNOTATION = "k8s.volcengine.com/pod-networks"


class Node:
    def __init__(self, tmp: Path) -> None:
        sfx = f"{os.getpid() % 100000}"
        self.node, self.pod, self.peer = f"xn{sfx}", f"xp{sfx}", f"xr{sfx}"
        self.nic = f"xnic{sfx}"
        self.tmp = tmp
        self.base = {"cniVersion": "0.4.0", "name": "vpc-cni", "type": "rdma-cni",
                     "mode": "shared-multi", "devices": [self.nic],
                     "dataDir": str(tmp / "data"), "logFile": str(tmp / "log"),
                     "metricsFile": str(tmp / "metrics")}
        self.conf = tmp / "conf.json"
        self.conf.write_text(json.dumps(self.base))

    def up(self) -> None:
        for ns in (self.node, self.pod, self.peer):
            _sh("ip", "netns", "add", ns)
        _sh("ip", "-n", self.node, "link", "set", "lo", "up")
        _sh("ip", "-n", self.node, "link", "add", self.nic, "type", "veth", "peer", "name",
            "xpeer0", "netns", self.peer)
        _sh("ip", "-n", self.node, "addr", "add", "198.51.100.1/28", "dev", self.nic)
        _sh("ip", "-n", self.node, "link", "set", self.nic, "up")
        _sh("ip", "-n", self.peer, "addr", "add", "198.51.100.13/28", "dev", "xpeer0")
        _sh("ip", "-n", self.peer, "link", "set", "xpeer0", "up")

    def down(self) -> None:
        for ns in (self.pod, self.peer, self.node):
            _sh("ip", "netns", "del", ns, check=False)

    def cni(self, command: str, blocks: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
        conf = {**self.base,
                "runtimeConfig": {"io.kubernetes.cri.pod-annotations":
                                  {ANNOTATION: json.dumps(blocks)}},
                "prevResult": {"cniVersion": "0.4.0",
                               "interfaces": [{"name": "eth0",
                                               "sandbox": f"/var/run/netns/{self.pod}"}],
                               "ips": [{"version": "4", "address": "203.0.113.5/24",
                                        "interface": 0}]}}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": command,
               "CNI_CONTAINERID": "c1", "CNI_NETNS": f"/var/run/netns/{self.pod}",
               "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin",
               "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1"}
        return _sh("ip", "netns", "exec", self.node, PYTHON, "-m", "rdma_cni",
                   input=json.dumps(conf), env=env, cwd=str(REPO), check=False)

    def udp(self, ns: str, src: str, dst: str, count: int = 5) -> None:
        code = (f"import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);"
                f"s.bind(('{src}',0))\n"
                f"for _ in range({count}): s.sendto(b'x'*200,('{dst}',9))")
        _sh("ip", "netns", "exec", ns, sys.executable, "-c", code)

    def scrape(self, at: str = f"127.0.0.1:{PORT}") -> dict[
            tuple[str, frozenset[tuple[str, str]]], float]:
        code = ("import urllib.request;print(urllib.request.urlopen("
                f"'http://{at}/metrics',timeout=10).read().decode())")
        deadline = time.monotonic() + 20
        while True:
            proc = _sh("ip", "netns", "exec", self.node, sys.executable, "-c", code, check=False)
            if proc.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert proc.returncode == 0, proc.stderr
        out = {}
        for fam in text_string_to_metric_families(proc.stdout):
            for s in fam.samples:
                out[(s.name, frozenset(s.labels.items()))] = s.value
        return out


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    n.down()
    n.up()
    try:
        yield n
    finally:
        n.cni("DEL", [{"cniConf": {"name": "rdma"}}])
        n.down()


@pytest.fixture
def exporter(node: Node) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        ["ip", "netns", "exec", node.node, PYTHON, "-m", "rdma_cni", "exporter",
         "--config", str(node.conf), "--listen", f"127.0.0.1:{PORT}"],
        cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_attachment_and_pod_traffic_after_real_add(node: Node, exporter: Any) -> None:
    add = node.cni("ADD", [{"cniConf": {"name": "rdma"}}])
    assert add.returncode == 0, add.stdout + add.stderr
    node.udp(node.pod, "198.51.100.2", "198.51.100.13", 5)
    node.udp(node.peer, "198.51.100.13", "198.51.100.2", 3)
    s = node.scrape()
    assert _value(s, "rdma_cni_attachment_info", namespace="default", pod="p1",
                  container_id="c1", interface="eth1", nic=node.nic,
                  address="198.51.100.2/28", mode="shared-multi") == 1
    pod = {"namespace": "default", "pod": "p1", "interface": "eth1"}
    tx = _value(s, "rdma_cni_pod_interface_transmit_bytes_total", **pod)
    rx = _value(s, "rdma_cni_pod_interface_receive_bytes_total", **pod)
    assert tx is not None and tx >= 5 * 200
    assert rx is not None and rx >= 3 * 200
    a = {"nic": node.nic, "subnet": "198.51.100.0/28"}
    assert _value(s, "rdma_cni_ipam_reserved_addresses", **a) == 1
    assert _value(s, "rdma_cni_ipam_free_addresses", **a) == 12  # .2-.14 minus .2
    lab = {"resource": "vke.volcengine.com/rdma", "mode": "shared-multi"}
    assert _value(s, "rdma_cni_slots_allocated", **lab) == 1
    assert _value(s, "rdma_cni_slots_capacity", **lab) == 13

    assert node.cni("DEL", [{"cniConf": {"name": "rdma"}}]).returncode == 0
    after = node.scrape()
    assert not [k for k in after if k[0] == "rdma_cni_attachment_info"]
    assert _value(after, "rdma_cni_ipam_free_addresses", **a) == 13


def test_failing_add_counts_an_error(node: Node, exporter: Any) -> None:
    bad = node.cni("ADD", [{"notCniConf": 1}])  # a block without cniConf.name: code 7
    assert bad.returncode != 0
    assert json.loads(bad.stdout)["code"] == 7
    ok = node.cni("ADD", [{"cniConf": {"name": "rdma"}}])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    s = node.scrape()
    assert _value(s, "rdma_cni_operations_total", command="ADD", result="error",
                  code="7") == 1
    assert _value(s, "rdma_cni_operations_total", command="ADD", result="success",
                  code="0") == 1
    assert (_value(s, "rdma_cni_operation_duration_seconds_count", command="ADD",
                   result="error") or 0) == 1


@pytest.mark.parametrize("listen, why", [
    ("198.51.100.1:{port}", "refusing to listen on 198.51.100.1: an address of RDMA NIC"),
    ("0.0.0.0:{port}", "refusing to listen on every address (0.0.0.0)"),
    (":{port}", "refusing to listen on every address (0.0.0.0)"),
])
def test_the_exporter_refuses_the_fabric_and_every_address(node: Node, listen: str,
                                                           why: str) -> None:
    """Never where the pods' RDMA fabric reaches it: one line, exit 1, nothing listening."""
    out = subprocess.run(["ip", "netns", "exec", node.node, PYTHON, "-m", "rdma_cni",
                          "exporter", "--config", str(node.conf),
                          "--listen", listen.format(port=PORT)],
                         cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith(f"rdma-cni exporter: {why}") and out.stderr.count("\n") == 1
    listening = _sh("ip", "netns", "exec", node.node, "ss", "-Hltn").stdout
    assert f":{PORT}" not in listening


def test_the_exporter_listens_on_the_host_ip_of_the_nodes_own_rdma_nic(node: Node) -> None:
    """A RoCE-capable primary NIC (the node's default route, $HOST_IP on it) is the node's,
    not the fabric: the exporter listens there by default; the other RDMA NIC's address is
    still refused. Veth stand-ins are not discovered, so the config names both."""
    own = f"xown{os.getpid() % 100000}"
    _sh("ip", "-n", node.node, "link", "add", own, "type", "veth", "peer", "name", "xpeer1",
        "netns", node.peer)
    _sh("ip", "-n", node.node, "addr", "add", "192.0.2.10/24", "dev", own)
    _sh("ip", "-n", node.node, "link", "set", own, "up")
    _sh("ip", "-n", node.node, "route", "add", "default", "via", "192.0.2.1", "dev", own)
    node.conf.write_text(json.dumps({**node.base, "devices": [own, node.nic]}))
    run = ["ip", "netns", "exec", node.node, PYTHON, "-m", "rdma_cni", "exporter",
           "--config", str(node.conf)]
    env = {**os.environ, "HOST_IP": "192.0.2.10"}
    refused = subprocess.run([*run, "--listen", f"198.51.100.1:{PORT}"], env=env,
                             cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and refused.stderr == (
        f"rdma-cni exporter: refusing to listen on 198.51.100.1: an address of RDMA NIC "
        f"{node.nic}, the fabric pods share; give the node's address\n")
    proc = subprocess.Popen(run, env=env, cwd=str(REPO), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        samples = node.scrape("192.0.2.10:9469")  # the default: $HOST_IP:9469
        assert proc.poll() is None
        assert any(name == "rdma_cni_slots_capacity" for name, _ in samples)
        listening = _sh("ip", "netns", "exec", node.node, "ss", "-Hltn").stdout
        assert "192.0.2.10:9469" in listening, listening
    finally:
        proc.terminate()
        proc.wait(10)
