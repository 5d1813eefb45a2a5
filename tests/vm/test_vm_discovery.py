"""NIC discovery on a kernel with an RDMA subsystem (Soft-RoCE on a virtio NIC), seen
through `doctor` of the built binary: a GID table names a pod's interface by the name
the pod gave it, and a pod that names it like a bridge of the host makes no RoCE NIC
of the bridge; a VLAN of the host on the RDMA device's netdev is one (found through
the kernel's `lower_*` link and Soft-RoCE's `parent`)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import vmkit
from support.netns import ip
from support.proc import wait_for
from vmkit import Rxe

pytestmark = [pytest.mark.vm, pytest.mark.root]


@pytest.fixture
def host_links() -> Iterator[list[str]]:
    """Links the test adds in the VM's root netns (deleted at teardown)."""
    made: list[str] = []
    yield made
    for name in reversed(made):
        if vmkit.link_exists(name):
            with contextlib.suppress(RuntimeError):
                ip(None, "link", "delete", name)


def _nics_check(binary: list[str], tmp_path: Path, **conf: object) -> str:
    path = tmp_path / "conf.json"
    path.write_text(json.dumps({"type": "rdma-cni", "mode": "shared-host", **conf}))
    res = subprocess.run([*binary, "doctor", "--json", "--config", str(path),
                          "--cni-conf-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in res.stderr, res
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    return str(checks["nics"]["detail"])


def _gid_named(rxe: Rxe, ip4: str, ndev: str) -> None:
    assert wait_for(lambda: vmkit.roce_v2_gid_for(rxe.name, ip4, ndev) is not None), \
        f"no RoCE v2 GID for {ip4} on {ndev}: {vmkit.read_gids(rxe.name)}"


def test_a_pods_interface_named_like_a_host_bridge_makes_no_roce_nic(
        vm_binary: list[str], rxe: Rxe, make_netns: Callable[[], str],
        host_links: list[str], tmp_path: Path) -> None:
    bridge, vlan = vmkit.unique_name("br"), vmkit.unique_name("vl")
    ip(None, "link", "add", bridge, "type", "bridge")
    host_links.append(bridge)
    ip(None, "link", "add", "link", rxe.netdev, "name", vlan, "type", "vlan", "id", "7")
    host_links.append(vlan)
    ip(None, "addr", "add", "203.0.113.7/24", "dev", vlan)
    ip(None, "link", "set", vlan, "up")
    ns = make_netns()  # the pod: a macvlan on the RDMA NIC, renamed like the bridge
    tmp = vmkit.unique_name("tmp")
    ip(None, "link", "add", "link", rxe.netdev, "name", tmp, "netns", ns, "type", "macvlan",
       "mode", "bridge")
    ip(ns, "link", "set", tmp, "name", bridge)
    ip(ns, "addr", "add", "198.51.100.31/24", "dev", bridge)
    ip(ns, "link", "set", bridge, "up")
    _gid_named(rxe, "198.51.100.31", bridge)  # the kernel names the pod's interface
    _gid_named(rxe, "203.0.113.7", vlan)
    assert Path(f"/sys/class/infiniband/{rxe.name}/parent").read_text().strip() == rxe.netdev
    assert Path(f"/sys/class/net/{vlan}/lower_{rxe.netdev}").exists()

    detail = _nics_check(vm_binary, tmp_path)  # discovery: no devices
    assert f"{vlan}={rxe.name}" in detail, detail
    assert bridge not in detail, detail
    pinned = _nics_check(vm_binary, tmp_path, devices=[bridge, vlan])
    assert pinned.endswith(f"{bridge}=-, {vlan}={rxe.name}"), pinned
