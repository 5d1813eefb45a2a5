"""The node's own NIC stays with the node, on a real kernel: a veth stand-in RDMA NIC in
a throwaway node netns that carries the node's default route, or holds the node's
address (``nodeIPs``), is refused when ``devices`` names it (one line, CNI error 7,
nothing made); a NIC whose default route has a higher metric than the node's is not
the node's own; the same for the IPv6 default route (``::/0``) and an IPv6 node address;
the device plugin refuses such a list in one line at start."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cnirunner import rdma_blocks, sh

pytestmark = pytest.mark.root
PLUGIN_RUNNER = "binary"  # the session build: this tree's plugin as a node runs it
REPO = Path(__file__).resolve().parents[2]
PYTHON = str(REPO / ".venv" / "bin" / "python")


#: the gateway of a NIC's default route by family; IPv6: the NIC's address and gateway
GATEWAY = {4: {"rnic0": "198.51.100.62", "ens0": "192.0.2.1"},
           6: {"rnic0": ("2001:db8:1::1/64", "2001:db8:1::fe"),
               "ens0": ("2001:db8:2::10/64", "2001:db8:2::1")}}


def _v6(rig: Any, dev: str, addr: str) -> None:
    """An IPv6 address on ``dev`` (no DAD wait)."""
    sh("ip", "-n", rig.node.ns, "-6", "addr", "add", addr, "dev", dev, "nodad")


def _default_route(rig: Any, dev: str, family: int = 4, metric: int = 0) -> None:
    """The main table's default route (``0.0.0.0/0`` or ``::/0``) through ``dev``."""
    via: Any = GATEWAY[family][dev]
    if family == 6:
        _v6(rig, dev, via[0])
        via = via[1]
    sh("ip", "-n", rig.node.ns, f"-{family}", "route", "add", "default", "via", via, "dev",
       dev, "metric", str(metric))


def _refused(rig: Any, run: Any, why: str, pod: Any) -> None:
    assert run.rc != 0 and run.code == 7, run
    msg = run.out["msg"]
    assert why in msg and "the node's own NIC is never given to pods" in msg, msg
    assert "\n" not in msg and "Traceback" not in run.err
    assert sorted(pod.links()) == ["eth0", "lo"] and rig.files() == []


@pytest.mark.parametrize("mode, family", [("shared-multi", 4), ("exclusive", 4),
                                          ("shared-multi", 6)])
def test_a_devices_list_naming_the_default_route_nic_is_refused(rig: Any, mode: str,
                                                                family: int) -> None:
    rig.nic("rnic0")
    rig.nic("rnic1", "198.51.100.65/26", gw=None)
    _default_route(rig, "rnic0", family)
    pod = rig.pod()
    chain = rig.chain(mode, ["rnic0", "rnic1"], allocation="config")
    run = chain.add("c1", pod.path, rdma_blocks(1))
    _refused(rig, run, "devices names rnic0, which carries the node's default route", pod)
    assert chain.delete("c1").rc == 0  # the runtime's DEL after the failed ADD


@pytest.mark.parametrize("address", ["198.51.100.1", "2001:db8:1::1"])
def test_a_devices_list_naming_the_nic_of_the_node_address_is_refused(rig: Any,
                                                                     address: str) -> None:
    rig.nic("rnic0")
    if ":" in address:
        _v6(rig, "rnic0", f"{address}/64")
    pod = rig.pod()
    chain = rig.chain("exclusive", ["rnic0"], allocation="config", nodeIPs=[address])
    run = chain.add("c1", pod.path, rdma_blocks(1))
    _refused(rig, run, f"devices names rnic0, which holds the node's address {address}", pod)
    assert chain.delete("c1").rc == 0


@pytest.mark.parametrize("family", [4, 6])
def test_a_nic_default_route_of_a_higher_metric_is_not_the_nodes(rig: Any, family: int) -> None:
    rig.node.add_nic("ens0", "192.0.2.10/24")
    _default_route(rig, "ens0", family, metric=100)
    rig.nic("rnic0")
    _default_route(rig, "rnic0", family, metric=200)
    pod = rig.pod()
    chain = rig.chain("shared-multi", ["rnic0"], allocation="config")
    run = chain.add("c1", pod.path, rdma_blocks(1))
    assert run.rc == 0, run
    assert "eth1" in pod.links()
    assert chain.delete("c1").rc == 0


def test_the_device_plugin_refuses_the_nodes_own_nic_in_one_line(rig: Any,
                                                                tmp_path: Path) -> None:
    rig.nic("rnic0")
    _default_route(rig, "rnic0")
    conf = tmp_path / "dp.json"
    conf.write_text(json.dumps({"mode": "exclusive", "devices": ["rnic0"],
                                "kubelet": {"devicePluginDir": str(tmp_path / "dp")}}))
    out = subprocess.run(["ip", "netns", "exec", rig.node.ns, PYTHON, "-m", "rdma_cni",
                          "device-plugin", "--config", str(conf), "--cni-conf-dir", "",
                          "--status-file", ""], capture_output=True, text=True, timeout=60,
                         cwd=str(REPO))
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == ("rdma-cni device-plugin: invalid config: devices names rnic0, which "
                          "carries the node's default route: the node's own NIC is never "
                          "given to pods (remove it from devices)\n")
