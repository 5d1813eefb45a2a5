"""The boundary models, each field declared once: pydantic ``BaseModel`` classes.

This module is the source, not the runtime: ``scripts/gen_models.py`` generates from it
rdma_cni/models/generated.py (the classes and pydantic's own validation schemas, which
the plugin feeds to ``pydantic_core.SchemaValidator``: the exec'd plugin never imports
``pydantic``, bench/README.md figure 6) and rdma_cni/confdefaults.py (the defaults,
bounds and choices as literals, for the fast-path readers of the raw config).
tests/unit/test_models_generated.py regenerates both and compares them byte for byte.
No module of the package imports this one (tests/unit/test_models_generated.py), and
neither bundle carries it (build.spec).

Rules the generator holds the declaration to: validators are functions of the package
(rdma_cni/models/checks.py), never pydantic's own; an optional sub-object is validated
from ``{}`` (``default={}, validate_default=True``), a new object each time; the models
the plugin validates are listed in ``VALIDATED``.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator

from rdma_cni import defaults
from rdma_cni.models import checks
from rdma_cni.vocab import names
from rdma_cni.vocab.modes import Mode

Name = Annotated[str, Field(min_length=1, max_length=253)]
PathText = Annotated[str, AfterValidator(checks.path)]
IPv4 = Annotated[ipaddress.IPv4Address, PlainValidator(checks.ipv4)]
Netdevs = Annotated[list[Annotated[str, AfterValidator(names.check_host_netdev)]] | None,
                    AfterValidator(checks.unique)]
Slots = Annotated[int, Field(ge=1, le=1024)]


# --- the network config (its conflist entry), DESIGN.md section 8 -----------------------
class _Own(BaseModel):
    """Our own sub-objects forbid keys they do not know."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class IpamRangeConf(_Own):
    rangeStart: IPv4 | None = None
    rangeEnd: IPv4 | None = None
    exclude: Annotated[list[str], AfterValidator(checks.networks)] = Field(
        default_factory=list)


class IpamConf(_Own):
    type: str | None = None
    ranges: Annotated[dict[str, IpamRangeConf], AfterValidator(checks.subnets)] = Field(
        default_factory=dict)


class RoutingConf(_Own):
    tableBase: int = Field(default=100, ge=1, le=0x7FFFFF00)
    rulePriority: int = Field(default=defaults.RULE_PRIORITY, ge=1, le=32765)


_KUBELET = defaults.kubelet_paths()


class KubeletConf(_Own):
    podResourcesSocket: PathText = _KUBELET["podResourcesSocket"]
    checkpointFile: PathText = _KUBELET["checkpointFile"]
    devicePluginDir: PathText = _KUBELET["devicePluginDir"]


class NetConf(BaseModel):
    """Unknown top-level keys are tolerated (the runtime and other tools add their own)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cniVersion: str
    name: Name
    type: str = "rdma-cni"
    cniConfName: Name = defaults.CNI_CONF_NAME
    mode: Mode
    devices: Netdevs = None
    nodeIPs: Annotated[list[str], AfterValidator(checks.addresses)] = Field(
        default_factory=list)
    resourceName: str | None = None
    allocation: Literal["auto", "config"] = "auto"
    maxInterfaces: int = Field(default=16, ge=1, le=64)
    mtu: Annotated[int, Field(ge=0, le=65535), AfterValidator(checks.mtu)] = 0
    ipam: IpamConf = Field(default={}, validate_default=True)
    routing: RoutingConf = Field(default={}, validate_default=True)
    kubelet: KubeletConf = Field(default={}, validate_default=True)
    slotsPerNic: Slots = 16
    hostSlots: Slots = 16
    dataDir: Annotated[str, AfterValidator(checks.absolute)] = defaults.DATA_DIR
    logFile: PathText = defaults.LOG_FILE
    logLevel: Literal["debug", "info", "warning", "error"] = "info"
    logFormat: Literal["text", "json"] = "text"
    residentSocket: PathText = defaults.RESIDENT_SOCKET
    metricsFile: PathText = defaults.METRICS_FILE
    runtimeConfig: dict[str, Any] = Field(default_factory=dict)

    @property
    def resource(self) -> str:
        return self.resourceName or self.mode.traits.resource

    @property
    def shared(self) -> bool:
        """One of the shared modes: pod addresses come from the NIC's subnet."""
        return self.mode.traits.pod_ipam

    @property
    def device_id(self) -> str | None:
        value = self.runtimeConfig.get("deviceID")
        return value if isinstance(value, str) and value else None


# --- our blocks of the pod annotation k8s.volcengine.com/pod-networks ----------------
class _Block(BaseModel):
    """Every block model is strict (no coercion) and forbids keys it does not know."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CniConfRef(_Block):
    name: str


class DeviceConf(_Block):
    ifName: Annotated[str, AfterValidator(names.check_ifname)] | None = None
    mac: Annotated[str, AfterValidator(checks.mac)] | None = None
    ips: list[Annotated[str, AfterValidator(checks.ipv4_text)]] | None = None


class Block(_Block):
    name: str | None = None
    namespace: str | None = None
    cniConf: CniConfRef
    deviceConf: DeviceConf | None = None


#: the models the plugin validates (each gets a schema in the generated module)
VALIDATED = (NetConf, Block)
#: the root of the config keys in rdma_cni/confdefaults.py
CONFIG = NetConf
