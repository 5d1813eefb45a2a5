"""The plugin's network configuration (its conflist entry), DESIGN.md section 8.

Unknown top-level keys are tolerated (the runtime and other tools add their own);
our own sub-objects are strict. The fields are declared once, in
rdma_cni/models/declared.py; the classes and the schema come from
rdma_cni/models/generated.py.
"""

from __future__ import annotations

from typing import Any

from rdma_cni.errors import ConfigError
from rdma_cni.models import generated
from rdma_cni.models.core import ValidationError, explain, validator
from rdma_cni.models.generated import IpamConf, IpamRangeConf, KubeletConf, NetConf, RoutingConf

__all__ = ["IpamConf", "IpamRangeConf", "KubeletConf", "NetConf", "RoutingConf",
           "load_netconf"]

_parse_netconf = validator(generated.NETCONF_SCHEMA, NetConf)


def load_netconf(conf: dict[str, Any]) -> NetConf:
    try:
        return _parse_netconf(conf)
    except ValidationError as exc:
        raise ConfigError(f"invalid network configuration: {explain(exc)}") from None
