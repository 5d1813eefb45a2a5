"""The plugin's network configuration (its conflist entry), DESIGN.md section 8.

Unknown top-level keys are tolerated (the runtime and other tools add their own);
our own sub-objects are strict.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from rdma_cni import defaults
from rdma_cni.errors import ConfigError, shown
from rdma_cni.models.blocks import explain
from rdma_cni.node.names import valid_netdev

Mode = Literal["shared", "shared-multi", "shared-host", "exclusive"]
SHARED_MODES = ("shared", "shared-multi", "shared-host")
RESOURCE_RDMA = "vke.volcengine.com/rdma"
RESOURCE_RDMA_HOST = "vke.volcengine.com/rdma-host"


def _check_netdev(value: str) -> str:
    """A host netdev name (unlike a pod interface name, eth0 is a legitimate RDMA NIC)."""
    if not valid_netdev(value) or value == "lo":
        raise ValueError(f"netdev name {shown(value)} is invalid: 1-15 characters of "
                         "[A-Za-z0-9_.-], not '.', '..' or 'lo' (never an RDMA NIC)")
    return value


HostIfName = Annotated[str, AfterValidator(_check_netdev)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IpamRangeConf(_Strict):
    rangeStart: ipaddress.IPv4Address | None = None
    rangeEnd: ipaddress.IPv4Address | None = None
    exclude: list[str] = Field(default_factory=list)

    @field_validator("exclude")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.IPv4Network(item, strict=False)
            except ValueError:
                raise ValueError(f"exclude entry {shown(item)} is not an IPv4 address or "
                                 "CIDR") from None
        return value


class IpamConf(_Strict):
    type: str | None = None
    ranges: dict[str, IpamRangeConf] = Field(default_factory=dict)

    @field_validator("ranges")
    @classmethod
    def _subnets(cls, value: dict[str, IpamRangeConf]) -> dict[str, IpamRangeConf]:
        for subnet in value:
            try:
                ipaddress.IPv4Network(subnet, strict=True)
            except ValueError:
                raise ValueError(f"ranges key {shown(subnet)} is not an IPv4 subnet CIDR") from None
        return value


class RoutingConf(_Strict):
    tableBase: int = Field(default=100, ge=1, le=0x7FFFFF00)
    rulePriority: int = Field(default=defaults.RULE_PRIORITY, ge=1, le=32765)


class KubeletConf(_Strict):
    podResourcesSocket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    checkpointFile: str = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    devicePluginDir: str = "/var/lib/kubelet/device-plugins"


class NetConf(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    cniVersion: str
    name: str = Field(min_length=1, max_length=253)
    type: str = "rdma-cni"
    cniConfName: str = Field("rdma", min_length=1, max_length=253)
    mode: Mode
    devices: list[HostIfName] | None = None
    resourceName: str | None = None
    allocation: Literal["auto", "config"] = "auto"
    maxInterfaces: int = Field(16, ge=1, le=64)
    mtu: int = Field(0, ge=0, le=65535)
    ipam: IpamConf = Field(default_factory=IpamConf)
    routing: RoutingConf = Field(default_factory=RoutingConf)
    kubelet: KubeletConf = Field(default_factory=KubeletConf)
    slotsPerNic: int = Field(16, ge=1, le=1024)
    hostSlots: int = Field(16, ge=1, le=1024)
    dataDir: str = defaults.DATA_DIR
    logFile: str = "/var/log/rdma-cni.log"
    logLevel: Literal["debug", "info", "warning", "error"] = "info"
    residentSocket: str = defaults.RESIDENT_SOCKET
    metricsFile: str = defaults.METRICS_FILE
    runtimeConfig: dict[str, Any] = Field(default_factory=dict)

    @field_validator("mtu")
    @classmethod
    def _mtu(cls, value: int) -> int:
        if value and value < 68:
            raise ValueError("mtu must be 0 (the parent's) or at least 68")
        return value

    @field_validator("dataDir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("dataDir must be an absolute path")
        return value

    @field_validator("devices")
    @classmethod
    def _unique(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("devices lists a netdev more than once")
        return value

    @property
    def resource(self) -> str:
        if self.resourceName:
            return self.resourceName
        return RESOURCE_RDMA_HOST if self.mode == "shared-host" else RESOURCE_RDMA

    @property
    def shared(self) -> bool:
        return self.mode in SHARED_MODES

    @property
    def device_id(self) -> str | None:
        value = self.runtimeConfig.get("deviceID")
        return value if isinstance(value, str) and value else None


def load_netconf(conf: dict[str, Any]) -> NetConf:
    try:
        return NetConf.model_validate(conf)
    except ValidationError as exc:
        raise ConfigError(f"invalid network configuration: {explain(exc)}") from None

