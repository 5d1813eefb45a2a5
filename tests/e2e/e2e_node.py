"""Helpers of the containerd end-to-end tier: a private containerd whose CRI runs
a conflist (bridge + host-local standing in for vpc-cni, then rdma-cni installed by
``rdma-cni install`` from the built bundle), and stand-in RDMA NICs.

containerd and the plugin run in the real host netns (containerd creates the pod
netns itself), so the stand-ins live on the host: veths named ``rdtest*`` with
198.51.100.x/28 addresses, peers in a netns made here, a bridge ``rdtbr0`` for
the primary (no gateway, no forwarding, no masquerade). Everything is removed at
the end; eth0 and 192.0.2.0/24 are never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pause_image import oci_archive
from runtime import PAUSE_IMAGE, Containerd
from support.proc import run

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

BINARY = REPO / "dist" / "rdma-cni" / "rdma-cni"
PEER_NS = "rdtest-peer"
BRIDGE = "rdtbr0"
# stand-in NIC -> (host address, peer name); HPC route 198.19.0.0/24 via .14 on rdtest0
NICS = {"rdtest0": ("198.51.100.1/28", "rdpeer0"), "rdtest1": ("198.51.100.17/28", "rdpeer1")}
HPC_ROUTE = ("198.19.0.0/24", "198.51.100.14", "rdtest0")


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (euid 0)"
    for tool in ("containerd", "runc", "ctr", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install containerd runc)"
    if not os.path.exists("/usr/lib/cni/bridge"):
        return "containernetworking-plugins is not installed"
    if not BINARY.exists():
        return f"{BINARY} is missing: run ./scripts/build.sh"
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        return "grpcio-tools is not installed"
    return None


def _cleanup_host(nics: dict[str, tuple[str, str]] = NICS, bridge: str = BRIDGE,
                  peer_ns: str = PEER_NS) -> None:
    for name in [*nics, bridge]:
        run("ip", "link", "del", name, check=False)
    run("ip", "netns", "del", peer_ns, check=False)


def _make_nics(nics: dict[str, tuple[str, str]] = NICS, bridge: str = BRIDGE,
               peer_ns: str = PEER_NS, hpc_route: tuple[str, str, str] = HPC_ROUTE) -> None:
    """Stand-in NICs on the host: veths with ``nics``' addresses, peers in ``peer_ns``."""
    _cleanup_host(nics, bridge, peer_ns)
    run("ip", "netns", "add", peer_ns)
    for nic, (addr, peer) in nics.items():
        run("ip", "link", "add", nic, "type", "veth", "peer", "name", peer, "netns", peer_ns)
        run("ip", "addr", "add", addr, "dev", nic)
        run("ip", "link", "set", nic, "up")
        run("ip", "-n", peer_ns, "link", "set", peer, "up")
    dst, via, dev = hpc_route
    run("ip", "route", "add", dst, "via", via, "dev", dev)


def install_plugin(cd: Containerd, data: Path, mode: str) -> None:
    """`rdma-cni install` with the built binary into containerd's CNI dirs."""
    entry = {"type": "rdma-cni", "devices": list(NICS), "allocation": "config",
             "dataDir": str(data), "logFile": str(data.parent / "rdma-cni.log"),
             "metricsFile": str(data.parent / "metrics"), "logLevel": "debug"}
    cfg = data.parent / "rdma-cni.json"
    cfg.write_text(json.dumps(entry))
    out = run(str(BINARY), "install", "--bundle", str(BINARY.parent), "--cni-bin-dir",
             str(cd.cni_bin), "--cni-conf-dir", str(cd.cni_conf), "--mode", mode,
             "--config", str(cfg), check=False)
    assert out.returncode == 0, out.stderr
    cd.wait_for_config(f'\\"mode\\":\\"{mode}\\"')


def write_primary(cd: Containerd, host_local: Path, bridge: str, subnet: str) -> None:
    """The stand-in for vpc-cni: a bridge + host-local conflist (0.4.0, disableCheck, as
    in the field) and its plugins in containerd's CNI bin dir."""
    for plugin in ("bridge", "host-local", "loopback"):
        os.symlink(f"/usr/lib/cni/{plugin}", cd.cni_bin / plugin)
    primary = {"type": "bridge", "bridge": bridge, "isGateway": False, "ipMasq": False,
               "ipam": {"type": "host-local", "dataDir": str(host_local),
                        "ranges": [[{"subnet": subnet}]]}}
    (cd.cni_conf / "10-vpc-cni.conflist").write_text(json.dumps(
        {"cniVersion": "0.4.0", "name": "vpc-cni", "disableCheck": True,
         "plugins": [primary]}, indent=2))


def make_node() -> Iterator[dict[str, Any]]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = Path(tempfile.mkdtemp(prefix="rdma-cni-e2e-"))
    cd = Containerd(tmp)
    try:
        _make_nics()
        cd.write_config()
        write_primary(cd, tmp / "host-local", BRIDGE, "198.18.0.0/24")
        cd.start()
        cd.import_image(oci_archive(PAUSE_IMAGE))
        data = tmp / "data"
        install_plugin(cd, data, "shared-multi")
        yield {"cd": cd, "data": data, "tmp": tmp}
    finally:
        try:
            cd.cleanup_pods()
        finally:
            cd.stop()
            _cleanup_host()
            if os.environ.get("RDMA_CNI_E2E_KEEP") != "1":
                shutil.rmtree(tmp, ignore_errors=True)
