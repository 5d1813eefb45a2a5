"""The NIC facts that several layers share, as plain records: a RoCE NIC as discovery
finds it in sysfs (:class:`Nic`), one entry of a RoCE GID table (:class:`Gid`) and a
NIC's IPv4 configuration on the host (:class:`HostNic`). Stdlib only:
:mod:`rdma_cni.node.discovery`, :mod:`rdma_cni.node.gids` and
:mod:`rdma_cni.node.pools` read them."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface, IPv6Address

from rdma_cni.records import record


@record
class Nic:
    netdev: str
    ibdev: str | None = None
    port: int | None = None
    pci: str | None = None
    numa: int | None = None
    link_layer: str | None = None
    state: str | None = None
    uverbs: str | None = None
    #: another NIC found is on the same PCI function (a dual-port ConnectX-3's two
    #: netdevs, representors on their PF): the PCI address names neither alone
    shares_function: bool = False

    @property
    def device_id(self) -> str:
        """The device-plugin ID: PCI address, else (no PCI function, or one that other
        NICs share) netdev name (DESIGN §8)."""
        return self.netdev if self.shares_function or not self.pci else self.pci


@record
class Gid:
    ibdev: str
    port: int
    index: int
    gid: str
    type: str
    ndev: str | None

    @property
    def ipv4(self) -> IPv4Address | None:
        return ipv4_of(self.gid)

    @property
    def link_local(self) -> bool:
        addr = parse_gid(self.gid)
        return addr is not None and addr.is_link_local


def parse_gid(gid: str) -> IPv6Address | None:
    try:
        return IPv6Address(gid)
    except ValueError:
        return None


def ipv4_of(gid: str | Gid) -> IPv4Address | None:
    """The IPv4 address of a ``::ffff:a.b.c.d`` GID, else None."""
    text = gid.gid if isinstance(gid, Gid) else gid
    addr = parse_gid(text)
    return addr.ipv4_mapped if addr is not None else None


@record
class HostNic:
    addresses: tuple[IPv4Interface, ...]
    gateway: IPv4Address | None = None
    gateways: tuple[IPv4Address, ...] = ()  # every gateway through it (NicFacts.gateways)
