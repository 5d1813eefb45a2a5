"""The plugin's network configuration (its conflist entry), DESIGN.md section 8.

Unknown top-level keys are tolerated (the runtime and other tools add their own);
our own sub-objects are strict.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Literal

from pydantic_core import core_schema as cs

from rdma_cni import defaults
from rdma_cni.errors import ConfigError, shown
from rdma_cni.models.core import (
    Model,
    ValidationError,
    after,
    explain,
    field,
    ipv4_address,
    model,
    sub_model,
    validator,
)
from rdma_cni.vocab.modes import Mode
from rdma_cni.vocab.names import check_host_netdev as _check_netdev


def _networks(value: list[str]) -> list[str]:
    for item in value:
        try:
            ipaddress.IPv4Network(item, strict=False)
        except ValueError:
            raise ValueError(f"exclude entry {shown(item)} is not an IPv4 address or "
                             "CIDR") from None
    return value


def _subnets(value: dict[str, IpamRangeConf]) -> dict[str, IpamRangeConf]:
    for subnet in value:
        try:
            ipaddress.IPv4Network(subnet, strict=True)
        except ValueError:
            raise ValueError(f"ranges key {shown(subnet)} is not an IPv4 subnet CIDR") from None
    return value


def _mtu(value: int) -> int:
    if value and value < 68:
        raise ValueError("mtu must be 0 (the parent's) or at least 68")
    return value


def _absolute(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("dataDir must be an absolute path")
    return _path(value)


def _path(value: str) -> str:
    """A file path of the config: no NUL (JSON can carry one, no system call can)."""
    if "\x00" in value:
        raise ValueError(f"path {shown(value)} contains a NUL character")
    return value


def _addresses(value: list[str]) -> list[str]:
    for item in value:
        try:
            ipaddress.ip_address(item)
        except ValueError:
            raise ValueError(f"nodeIPs entry {shown(item)} is not an IP address") from None
    return value


def _unique(value: list[str] | None) -> list[str] | None:
    if value is not None and len(set(value)) != len(value):
        raise ValueError("devices lists a netdev more than once")
    return value


class IpamRangeConf(Model):
    rangeStart: ipaddress.IPv4Address | None
    rangeEnd: ipaddress.IPv4Address | None
    exclude: list[str]


class IpamConf(Model):
    type: str | None
    ranges: dict[str, IpamRangeConf]


class RoutingConf(Model):
    tableBase: int
    rulePriority: int


class KubeletConf(Model):
    podResourcesSocket: str
    checkpointFile: str
    devicePluginDir: str


class NetConf(Model):
    cniVersion: str
    name: str
    type: str
    cniConfName: str
    mode: Mode
    devices: list[str] | None
    nodeIPs: list[str]
    resourceName: str | None
    allocation: Literal["auto", "config"]
    maxInterfaces: int
    mtu: int
    ipam: IpamConf
    routing: RoutingConf
    kubelet: KubeletConf
    slotsPerNic: int
    hostSlots: int
    dataDir: str
    logFile: str
    logLevel: Literal["debug", "info", "warning", "error"]
    logFormat: Literal["text", "json"]
    residentSocket: str
    metricsFile: str
    runtimeConfig: dict[str, Any]

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


_STR = cs.str_schema()


def _int(ge: int, le: int) -> cs.CoreSchema:
    return cs.int_schema(ge=ge, le=le)


# Our own sub-objects forbid keys they do not know; the top level ignores them (the
# runtime and other tools add their own).
_RANGE = model(IpamRangeConf, {
    "rangeStart": field(cs.nullable_schema(ipv4_address()), default=None),
    "rangeEnd": field(cs.nullable_schema(ipv4_address()), default=None),
    "exclude": field(after(cs.list_schema(_STR), _networks), factory=list),
}, extra="forbid")
_IPAM = model(IpamConf, {
    "type": field(cs.nullable_schema(_STR), default=None),
    "ranges": field(after(cs.dict_schema(_STR, _RANGE), _subnets), factory=dict),
}, extra="forbid")
_ROUTING = model(RoutingConf, {
    "tableBase": field(_int(1, 0x7FFFFF00), default=100),
    "rulePriority": field(_int(1, 32765), default=defaults.RULE_PRIORITY),
}, extra="forbid")
_PATH = after(_STR, _path)
_KUBELET = model(KubeletConf, {
    key: field(_PATH, default=path) for key, path in defaults.kubelet_paths().items()
}, extra="forbid")
_NAME = cs.str_schema(min_length=1, max_length=253)
_NETCONF = model(NetConf, {
    "cniVersion": field(_STR),
    "name": field(_NAME),
    "type": field(_STR, default="rdma-cni"),
    "cniConfName": field(_NAME, default="rdma"),
    "mode": field(cs.enum_schema(Mode, list(Mode), sub_type="str")),
    "devices": field(after(cs.nullable_schema(cs.list_schema(after(_STR, _check_netdev))),
                           _unique), default=None),
    "nodeIPs": field(after(cs.list_schema(_STR), _addresses), factory=list),
    "resourceName": field(cs.nullable_schema(_STR), default=None),
    "allocation": field(cs.literal_schema(["auto", "config"]), default="auto"),
    "maxInterfaces": field(_int(1, 64), default=16),
    "mtu": field(after(_int(0, 65535), _mtu), default=0),
    "ipam": sub_model(_IPAM),
    "routing": sub_model(_ROUTING),
    "kubelet": sub_model(_KUBELET),
    "slotsPerNic": field(_int(1, 1024), default=16),
    "hostSlots": field(_int(1, 1024), default=16),
    "dataDir": field(after(_STR, _absolute), default=defaults.DATA_DIR),
    "logFile": field(_PATH, default=defaults.LOG_FILE),
    "logLevel": field(cs.literal_schema(["debug", "info", "warning", "error"]),
                      default="info"),
    "logFormat": field(cs.literal_schema(["text", "json"]), default="text"),
    "residentSocket": field(_PATH, default=defaults.RESIDENT_SOCKET),
    "metricsFile": field(_PATH, default=defaults.METRICS_FILE),
    "runtimeConfig": field(cs.dict_schema(), factory=dict),
}, extra="ignore")
_parse_netconf = validator(_NETCONF, NetConf)


def load_netconf(conf: dict[str, Any]) -> NetConf:
    try:
        return _parse_netconf(conf)
    except ValidationError as exc:
        raise ConfigError(f"invalid network configuration: {explain(exc)}") from None

