"""The typed config (NetConf, DESIGN section 8) and our strict annotation blocks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.errors import Code, ConfigError
from rdma_cni.models.blocks import Block, validate_blocks
from rdma_cni.models.netconf import NetConf, load_netconf
from rdma_cni.vocab.names import check_ifname


def netconf(**extra: Any) -> NetConf:
    return load_netconf({"cniVersion": "0.4.0", "name": "vpc", "mode": "shared", **extra})


def config_error(**extra: Any) -> str:
    with pytest.raises(ConfigError) as info:
        netconf(**extra)
    assert info.value.code == Code.INVALID_CONFIG == 7
    assert info.value.msg.startswith("invalid network configuration: ")
    return info.value.msg


def test_defaults_follow_the_design_table() -> None:
    nc = netconf()
    assert nc.cniConfName == "rdma"
    assert nc.devices is None
    assert nc.resource == "vke.volcengine.com/rdma"
    assert nc.allocation == "auto"
    assert nc.maxInterfaces == 16
    assert nc.mtu == 0
    assert nc.ipam.ranges == {}
    assert (nc.routing.tableBase, nc.routing.rulePriority) == (100, 20000)
    assert nc.kubelet.podResourcesSocket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert nc.kubelet.checkpointFile == \
        "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    assert nc.kubelet.devicePluginDir == "/var/lib/kubelet/device-plugins"
    assert (nc.slotsPerNic, nc.hostSlots) == (16, 16)
    assert nc.dataDir == "/var/lib/cni/rdma-cni"
    assert nc.logFile == "/var/log/rdma-cni.log"
    assert nc.logLevel == "info"
    assert nc.shared and nc.device_id is None


def test_shared_host_defaults_to_the_host_resource() -> None:
    assert netconf(mode="shared-host").resource == "vke.volcengine.com/rdma-host"
    assert netconf(mode="shared-host", resourceName="x/y").resource == "x/y"
    assert not netconf(mode="exclusive").shared


def test_unknown_top_level_keys_are_tolerated() -> None:
    nc = netconf(capabilities={"io.kubernetes.cri.pod-annotations": True}, disableCheck=True,
                 prevResult={"interfaces": []}, someVendorKey=[1, 2], ipMasq=False)
    assert nc.mode == "shared"


def test_device_id_comes_from_runtime_config() -> None:
    assert netconf(runtimeConfig={"deviceID": "0000:3b:00.0"}).device_id == "0000:3b:00.0"
    assert netconf(runtimeConfig={"deviceID": 5}).device_id is None


def test_full_valid_config() -> None:
    nc = netconf(mode="shared-multi", devices=["ens1f0", "ens2f0"], allocation="config",
                 maxInterfaces=64, mtu=4200, slotsPerNic=8, hostSlots=4, logLevel="debug",
                 ipam={"type": "host-subnet",
                       "ranges": {"198.51.100.0/24": {"rangeStart": "198.51.100.10",
                                                      "rangeEnd": "198.51.100.50",
                                                      "exclude": ["198.51.100.20",
                                                                  "198.51.100.32/29"]}}},
                 routing={"tableBase": 200, "rulePriority": 1000},
                 kubelet={"podResourcesSocket": "/tmp/k.sock"})
    rng = nc.ipam.ranges["198.51.100.0/24"]
    assert (str(rng.rangeStart), str(rng.rangeEnd)) == ("198.51.100.10", "198.51.100.50")
    assert rng.exclude == ["198.51.100.20", "198.51.100.32/29"]
    assert nc.kubelet.checkpointFile.endswith("kubelet_internal_checkpoint")
    assert nc.devices == ["ens1f0", "ens2f0"]


@pytest.mark.parametrize(("extra", "needle"), [
    ({"ipam": {"ranges": {}, "unknown": 1}}, "ipam.unknown"),
    ({"ipam": {"ranges": {"198.51.100.0/24": {"rangeStart": "198.51.100.2", "gw": "x"}}}},
     "gw"),
    ({"routing": {"tableBase": 100, "table": 5}}, "routing.table"),
    ({"kubelet": {"socket": "/x"}}, "kubelet.socket"),
])
def test_our_sub_objects_are_strict(extra: dict[str, Any], needle: str) -> None:
    assert needle in config_error(**extra)


@pytest.mark.parametrize(("extra", "needle"), [
    ({"mode": "ipvlan"}, "mode"),
    ({"mode": None}, "mode"),
    ({"mode": "Shared"}, "mode"),
    ({"mtu": 67}, "mtu"),
    ({"mtu": -1}, "mtu"),
    ({"mtu": 70000}, "mtu"),
    ({"mtu": "1500x"}, "mtu"),
    ({"maxInterfaces": 0}, "maxInterfaces"),
    ({"maxInterfaces": 65}, "maxInterfaces"),
    ({"maxInterfaces": "many"}, "maxInterfaces"),
    ({"allocation": "manual"}, "allocation"),
    ({"logLevel": "trace"}, "logLevel"),
    ({"cniConfName": ""}, "cniConfName"),
    ({"name": ""}, "name"),
    ({"slotsPerNic": 0}, "slotsPerNic"),
    ({"routing": {"rulePriority": 40000}}, "rulePriority"),
    ({"routing": {"tableBase": 0}}, "tableBase"),
    ({"ipam": {"ranges": {"198.51.100.1/24": {}}}}, "not an IPv4 subnet"),
    ({"ipam": {"ranges": {"not-a-cidr": {}}}}, "not-a-cidr"),
    ({"ipam": {"ranges": {"2001:db8::/64": {}}}}, "2001:db8::/64"),
    ({"ipam": {"ranges": {"198.51.100.0/24": {"exclude": ["198.51.100.300"]}}}},
     "198.51.100.300"),
    ({"ipam": {"ranges": {"198.51.100.0/24": {"exclude": ["x/24"]}}}}, "exclude"),
    ({"ipam": {"ranges": {"198.51.100.0/24": {"rangeStart": "nope"}}}}, "rangeStart"),
    ({"devices": ["ens1f0", "ens1f0"]}, "more than once"),
    ({"devices": ["ens1f0", "a" * 16]}, "devices"),
    ({"devices": ["../etc"]}, "devices"),
    ({"devices": "ens1f0"}, "devices"),
])
def test_invalid_values_are_code_7(extra: dict[str, Any], needle: str) -> None:
    assert needle in config_error(**extra)


def test_missing_mode_and_version_are_code_7() -> None:
    with pytest.raises(ConfigError, match="mode"):
        load_netconf({"cniVersion": "1.1.0", "name": "n"})
    with pytest.raises(ConfigError, match="cniVersion"):
        load_netconf({"name": "n", "mode": "shared"})


def test_error_message_is_bounded() -> None:
    bad: dict[str, Any] = {f"k{i}": {} for i in range(50)}
    msg = config_error(routing=bad, kubelet=bad, ipam={"x": bad})
    assert len(msg) < 1000


# -- our annotation blocks ----------------------------------------------------

def block(**device: Any) -> dict[str, Any]:
    return {"cniConf": {"name": "rdma"}, "deviceConf": device}


@pytest.mark.parametrize("name", ["eth1", "net-1", "a", "x" * 15, "rdma_0.1"])
def test_valid_ifnames(name: str) -> None:
    (_, got), = validate_blocks([(0, block(ifName=name))])
    assert got.deviceConf is not None and got.deviceConf.ifName == name
    assert check_ifname(name) == name


@pytest.mark.parametrize("name", ["eth0", "lo", ".", "..", "all", "default", "../x", "x" * 16, "",
                                  "a b",
                                  "eth1\n", "a/b", "a:b", "é"])
def test_invalid_ifnames_are_code_7(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_blocks([(3, block(ifName=name))])
    assert info.value.code == 7
    assert "k8s.volcengine.com/pod-networks" in info.value.msg and "block 3" in info.value.msg
    assert "deviceConf.ifName" in info.value.msg


@pytest.mark.parametrize(("raw", "needle"), [
    ({"cniConf": {"name": "rdma"}, "extra": 1}, "extra"),
    ({"cniConf": {"name": "rdma", "type": "x"}}, "cniConf.type"),
    (block(ifName="eth1", vlan=5), "deviceConf.vlan"),
    (block(mac="02:00:00:00:00:01\n"), "deviceConf.mac"),
    (block(mac="02-00-00-00-00-01"), "deviceConf.mac"),
    (block(ips=["198.51.100.9", "2001:db8::1"]), "deviceConf.ips"),
    (block(ips="198.51.100.9"), "deviceConf.ips"),
    (block(ifName=5), "deviceConf.ifName"),
    ({"cniConf": {"name": 7}}, "cniConf.name"),
    ({"cniConf": {"name": "rdma"}, "namespace": ["x"]}, "namespace"),
])
def test_our_block_rejects_unknown_keys_and_bad_values(raw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match="block 0") as info:
        validate_blocks([(0, raw)])
    assert needle in info.value.msg


def test_block_values_are_normalised() -> None:
    (_, got), = validate_blocks([(1, {"name": "n", "namespace": "ns", "cniConf": {"name": "rdma"},
                                      "deviceConf": {"mac": "02:AB:00:00:00:01",
                                                     "ips": ["198.51.100.9/24"]}})])
    assert isinstance(got, Block) and got.deviceConf is not None
    assert got.deviceConf.mac == "02:ab:00:00:00:01"
    assert got.deviceConf.ips == ["198.51.100.9"]


BASE = {"cniVersion": "1.0.0", "name": "n", "mode": "shared"}


@pytest.mark.parametrize(("extra", "message"), [
    ({"mode": "bogus"},
     'mode: Input should be "shared", "shared-multi", "shared-host" or "exclusive"'),
    ({"maxInterfaces": 65}, "maxInterfaces: Input should be less than or equal to 64"),
    ({"ipam": {"ranges": {"198.51.100.0/24": {"rangeStart": "198.51.100.300"}}}},
     "ipam.ranges.198.51.100.0/24.rangeStart: Input is not a valid IPv4 address"),
    ({"routing": {"tableBase": 0, "x": 1}},
     "routing.tableBase: Input should be greater than or equal to 1; "
     "routing.x: Extra inputs are not permitted"),
    ({"logLevel": "trace"}, 'logLevel: Input should be "debug", "info", "warning" or "error"'),
    ({"cniVersion": None}, "cniVersion: Input should be a valid string"),
    ({"kubelet": []}, "kubelet: Input should be a valid dictionary"),
    ({"name": ""}, "name: String should have at least 1 character"),
    ({"devices": ["lo"], "mtu": 10},
     'devices.0: netdev name "lo" is invalid: 1-15 characters of [A-Za-z0-9_.-], not ".", '
     '".." or "lo" (never an RDMA NIC); mtu: mtu must be 0 (the parent\'s) or at least 68'),
])
def test_config_errors_read_as_before(extra: dict[str, Any], message: str) -> None:
    """The exact texts pydantic's BaseModel gave for the same config (validation moved to
    pydantic-core schemas; an operator's alert or runbook may match on these)."""
    with pytest.raises(ConfigError) as info:
        load_netconf({**BASE, **extra})
    assert info.value.msg == f"invalid network configuration: {message}"


def test_a_missing_required_key_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        load_netconf({"name": "n", "mode": "shared"})
    assert info.value.msg == "invalid network configuration: cniVersion: Field required"


@pytest.mark.parametrize(("raw", "message"), [
    ({"cniConf": {"name": 7}}, "cniConf.name: Input should be a valid string"),
    ({"cniConf": {"name": "rdma"}, "x": 1}, "x: Extra inputs are not permitted"),
    ("x", "Input should be a valid dictionary"),
    ({"cniConf": {"name": "rdma"}, "deviceConf": {"ips": "198.51.100.9"}},
     "deviceConf.ips: Input should be a valid list"),
])
def test_block_errors_read_as_before(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_blocks([(0, raw)])
    assert info.value.msg == \
        f"invalid pod annotation k8s.volcengine.com/pod-networks: block 0: {message}"


def test_models_are_immutable_values() -> None:
    nc = netconf(devices=["ens1f0"])
    with pytest.raises(AttributeError):
        nc.mode = "exclusive"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del nc.kubelet.checkpointFile
    assert nc == netconf(devices=["ens1f0"]) and nc != netconf(devices=["ens2f0"])
    (_, one), = validate_blocks([(0, {"cniConf": {"name": "rdma"}})])
    (_, two), = validate_blocks([(3, {"cniConf": {"name": "rdma"}})])
    assert one == two and hash(one) == hash(two) and "cniConf=CniConfRef(name='rdma')" in repr(one)
    assert netconf().ipam is not netconf().ipam  # a default sub-object per config, not shared


IMPORT_PROBE = r"""
import json, sys
from rdma_cni.models.netconf import load_netconf
from rdma_cni.models.blocks import validate_blocks
load_netconf({"cniVersion": "1.0.0", "name": "n", "mode": "shared"})
validate_blocks([(0, {"cniConf": {"name": "rdma"}})])
print(json.dumps(sorted(m for m in ("pydantic", "pydantic_core", "importlib.metadata",
                                    "pydantic_core.core_schema", "decimal", "fractions")
                        if m in sys.modules)))
"""


def test_validation_imports_pydantic_core_only() -> None:
    """The exec'd ADD pays every import: pydantic's model layer (and the importlib.metadata
    its plugin lookup pulls in) stays out, and so does pydantic-core's package ``__init__``
    (its ``core_schema``, with ``decimal`` and ``fractions``): bench/README.md, figure 6."""
    proc = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True,
                          timeout=60, check=False, cwd=str(Path(__file__).resolve().parents[2]))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["pydantic_core"]


def test_pydantic_imported_after_the_models_is_whole() -> None:
    """The stand-in package module of pydantic_core runs the real ``__init__`` at the
    first name asked of it: pydantic (the declarations, scripts/gen_models.py) still
    works in a process that validated first."""
    probe = IMPORT_PROBE + """
import pydantic
from pydantic_core import PydanticUndefined, core_schema
class M(pydantic.BaseModel):
    x: int
assert M(x="3").x == 3 and core_schema.int_schema()["type"] == "int"
print("whole")
"""
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=False, cwd=str(Path(__file__).resolve().parents[2]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "whole"
