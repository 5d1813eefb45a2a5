"""bench/ab.py variant, an upper bound (not safe): the host's NIC list and each NIC's facts
(its link, the host's addresses, its routes) read once per process and kept, as a cache
of them kept up to date by the kernel's notifications could at best; what reading them
costs an ADD."""

from collections.abc import Iterable
from ipaddress import IPv4Address
from typing import Any

from rdma_cni.cni.commands import add
from rdma_cni.models.netconf import NetConf
from rdma_cni.node.nics import NodeNics
from rdma_cni.vocab.nic import Nic
from rdma_cni.vocab.plan import NicFacts
from rdma_cni.vocab.ports import NetlinkPort

_facts, _nics = add.nic_facts, add.nic_select.rdma_nics
_kept: dict[Any, Any] = {}


def nic_facts(nl: NetlinkPort, names: Iterable[str], rdma: dict[str, Nic], *,
              whole: bool = False) -> tuple[dict[str, NicFacts], set[IPv4Address]]:
    key = ("facts", tuple(names), whole)
    if key not in _kept:
        _kept[key] = _facts(nl, names, rdma, whole=whole)
    return _kept[key]


def rdma_nics(nc: NetConf, host: NetlinkPort) -> NodeNics:
    if "nics" not in _kept:
        _kept["nics"] = _nics(nc, host)
    return _kept["nics"]


def apply() -> None:
    add.nic_facts = nic_facts
    add.nic_select.rdma_nics = rdma_nics


def revert() -> None:
    add.nic_facts, add.nic_select.rdma_nics = _facts, _nics
    _kept.clear()
