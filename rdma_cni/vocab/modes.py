"""The node's RDMA modes and every rule that differs between them, as one table
(DESIGN.md §2, §3, §4, §8).

A :class:`Mode` value is the string of the config key ``mode`` and of the node
label ``vke.node.rdma.mode`` (it *is* a ``str``, so config files, state records
and metric labels keep their form). Code asks the mode's :class:`Traits`
(``mode.traits``) instead of comparing names; this module is the only place that
spells a mode name.

:class:`RdmaNetnsMode` is a different vocabulary: the RDMA subsystem's netns mode
(``rdma system``: shared or exclusive), fixed at boot.

Stdlib only and cheap to import: the pass-through ADD and DEL may read it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from rdma_cni.errors import ConfigError, shown
from rdma_cni.records import record
from rdma_cni.vocab.kinds import LinkKind

RESOURCE_RDMA = "vke.volcengine.com/rdma"
RESOURCE_RDMA_HOST = "vke.volcengine.com/rdma-host"
#: In the modes whose pods take addresses from the NIC's subnet, a NIC prefix this
#: long or longer is refused (error 100): the mask must be shorter than /30.
SHARED_MAX_PREFIX = 30


class RdmaNetnsMode(StrEnum):
    """The RDMA subsystem netns mode (``rdma system``), not a node mode."""

    SHARED = "shared"
    EXCLUSIVE = "exclusive"


class NicRule(StrEnum):
    """Which NICs a pod's annotation blocks get (DESIGN §3, §8 "Allocation")."""

    OWN = "own"  # a distinct NIC per block, serving this pod alone; too few is an error
    SPREAD = "spread"  # the pod's NICs round-robin over its blocks, shared with other pods
    EVERY = "every"  # the one block expands to one interface on every NIC of the node


class Capacity(StrEnum):
    """The device plugin's devices and the exporter's slot counts (DESIGN §8)."""

    PER_NIC = "per-nic"  # one device per NIC; in use: claimed NICs
    SLOTS_PER_NIC = "slots-per-nic"  # min(slotsPerNic, free addresses) `<id>@<n>` per NIC;
    #                                  in use: pod interfaces
    HOST_SLOTS = "host-slots"  # min(hostSlots, smallest pool) `host-<n>` devices, each
    #                            standing for every NIC; in use: attachments


@record
class Traits:
    link: LinkKind
    nics: NicRule
    #: the pod's address comes from the NIC's subnet (IPAM, `deviceConf.ips`, the /30
    #: netmask rule); otherwise the pod gets the NIC's own addresses
    pod_ipam: bool
    #: the pod's annotation must have exactly one block for this network
    one_block: bool
    #: the extended resource the pod's allocation comes from (default `resourceName`)
    resource: str
    capacity: Capacity
    #: `deviceConf.mac` is honoured
    custom_mac: bool
    #: the RDMA netns modes the mode works under
    rdma_netns: tuple[RdmaNetnsMode, ...]
    #: needs the kubelet's `topologyManagerPolicy: best-effort` (GPU and NIC on one NUMA node)
    topology_policy: bool

    @property
    def claims_nic(self) -> bool:
        """One pod interface per NIC on the node at a time (the store's NIC claims)."""
        return self.nics is NicRule.OWN

    @property
    def shares_nic(self) -> bool:
        """Pods share a NIC (and its address pool)."""
        return not self.claims_nic

    @property
    def max_prefix(self) -> int | None:
        """A NIC prefix this long or longer is refused; None: any prefix will do."""
        return SHARED_MAX_PREFIX if self.pod_ipam else None

    @property
    def moves_nic(self) -> bool:
        """The NIC itself moves into the pod (gone from the host while a pod holds it)."""
        return self.link is LinkKind.PHYSICAL

    def moves_rdma_device(self, netns_mode: str | None) -> bool:
        """The NIC's RDMA device moves with its netdev (exclusive RDMA netns mode)."""
        return self.moves_nic and netns_mode == RdmaNetnsMode.EXCLUSIVE


_SHARED_ONLY = (RdmaNetnsMode.SHARED,)


class Mode(StrEnum):
    SHARED = "shared"
    SHARED_MULTI = "shared-multi"
    SHARED_HOST = "shared-host"
    EXCLUSIVE = "exclusive"

    @property
    def traits(self) -> Traits:
        return TRAITS[self]

    @classmethod
    def of(cls, value: object, source: str = "") -> Mode:
        """``value`` as a Mode, else a ConfigError naming it, ``source`` and the modes."""
        if isinstance(value, str):
            try:
                return cls(value)
            except ValueError:
                pass
        where = f" from {source}" if source else ""
        raise ConfigError(f"invalid mode {shown(value)}{where}: expected one of {names()}")


TRAITS: dict[Mode, Traits] = {
    Mode.SHARED: Traits(
        link=LinkKind.IPVLAN, nics=NicRule.OWN, pod_ipam=True, one_block=False,
        resource=RESOURCE_RDMA, capacity=Capacity.PER_NIC, custom_mac=False,
        rdma_netns=_SHARED_ONLY, topology_policy=True),
    Mode.SHARED_MULTI: Traits(
        link=LinkKind.MACVLAN, nics=NicRule.SPREAD, pod_ipam=True, one_block=False,
        resource=RESOURCE_RDMA, capacity=Capacity.SLOTS_PER_NIC, custom_mac=True,
        rdma_netns=_SHARED_ONLY, topology_policy=True),
    Mode.SHARED_HOST: Traits(
        link=LinkKind.IPVLAN, nics=NicRule.EVERY, pod_ipam=True, one_block=True,
        resource=RESOURCE_RDMA_HOST, capacity=Capacity.HOST_SLOTS, custom_mac=False,
        rdma_netns=_SHARED_ONLY, topology_policy=False),
    Mode.EXCLUSIVE: Traits(
        link=LinkKind.PHYSICAL, nics=NicRule.OWN, pod_ipam=False, one_block=False,
        resource=RESOURCE_RDMA, capacity=Capacity.PER_NIC, custom_mac=False,
        rdma_netns=(RdmaNetnsMode.SHARED, RdmaNetnsMode.EXCLUSIVE), topology_policy=True),
}

#: the config/label strings, in the documented order
MODES: tuple[str, ...] = tuple(m.value for m in Mode)


def names(last: str = ", ") -> str:
    """The modes for a message: ``shared, shared-multi, shared-host, exclusive``
    (``last`` joins the last two, e.g. ``" or "``)."""
    return ", ".join(MODES[:-1]) + last + MODES[-1]


def where(has: Callable[[Traits], bool]) -> tuple[Mode, ...]:
    """The modes whose traits satisfy ``has``, in the documented order."""
    return tuple(m for m in Mode if has(m.traits))


def names_where(has: Callable[[Traits], bool]) -> str:
    """Those modes for a message: ``shared-multi``, ``shared, shared-host or exclusive``."""
    found = [m.value for m in where(has)]
    return ", ".join(found[:-1]) + " or " + found[-1] if len(found) > 1 else "".join(found)


def parse(value: object) -> Mode | None:
    """``value`` as a Mode, or None when it names none (unset, a typo, not a string)."""
    return Mode(value) if isinstance(value, str) and value in MODES else None
