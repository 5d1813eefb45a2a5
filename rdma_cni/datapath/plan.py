"""The pure planner: (config, our annotation blocks, host NIC facts) -> one
:class:`IfacePlan` per pod interface. No I/O; every rule here is unit-tested.

Names follow DESIGN.md section 8: the block at position p is ``eth{p+1}``; in
shared-host the single block expands to one name per NIC; ``deviceConf.ifName``
overrides (validated by the block model).
"""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Address, IPv4Interface
from typing import TYPE_CHECKING, Any

from rdma_cni.errors import ConfigError, IfNameInUse, UnsupportedField, shown
from rdma_cni.records import replace
from rdma_cni.vocab.modes import NicRule, names_where
from rdma_cni.vocab.names import check_ifname
from rdma_cni.vocab.plan import IfacePlan, NicFacts

if TYPE_CHECKING:  # the executor and teardown (DEL) import this module: no pydantic here
    from rdma_cni.models.blocks import Block
    from rdma_cni.models.netconf import NetConf
#: the IPv4 settings of every pod interface (its ``/proc/sys/net/ipv4/conf`` keys), which
#: multi-NIC RoCE needs: ARP answered and announced only for the interface's own address,
#: loose reverse-path filtering, a gratuitous ARP when it comes up
SYSCTLS = (("arp_ignore", 1), ("arp_announce", 2), ("rp_filter", 2), ("arp_notify", 1))


def interface_names(nc: NetConf, blocks: Sequence[tuple[int, Block]], n_nics: int) -> list[str]:
    """One name per pod interface, in creation order."""
    names: list[str] = []
    for pos, block in blocks:
        dc = block.deviceConf
        if nc.mode.traits.nics is NicRule.EVERY:
            if dc is not None and dc.ifName:
                names += [check_name(f"{dc.ifName}{i}") for i in range(n_nics)]
            else:
                names += [f"eth{pos + 1 + i}" for i in range(n_nics)]
        else:
            names.append(dc.ifName if dc is not None and dc.ifName else f"eth{pos + 1}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise IfNameInUse(f"pod annotation asks for interface name {dupes[0]} more than once")
    return names


def check_name(name: str) -> str:
    try:
        return check_ifname(name)
    except ValueError as exc:
        raise ConfigError(f"invalid pod annotation: {exc}") from None


def _block_mac(nc: NetConf, pos: int, block: Block) -> str | None:
    mac = block.deviceConf.mac if block.deviceConf else None
    if mac is None:
        return None
    if not nc.mode.traits.custom_mac:
        raise UnsupportedField(  # the spec: code 2 names the field's key and value
            f"pod annotation block {pos}: deviceConf.mac {shown(mac)} is only supported in "
            f"{names_where(lambda t: t.custom_mac)} mode (this node runs {nc.mode})"
        )
    first = int(mac[:2], 16)
    if first & 1 or mac == "00:00:00:00:00:00":
        raise ConfigError(f"pod annotation block {pos}: deviceConf.mac {mac} is not a unicast MAC")
    return mac


def _block_ips(nc: NetConf, pos: int, block: Block, count: int) -> list[IPv4Address | None]:
    ips = block.deviceConf.ips if block.deviceConf and block.deviceConf.ips else []
    if ips and not nc.mode.traits.pod_ipam:
        raise UnsupportedField(
            f"pod annotation block {pos}: deviceConf.ips {_listed(ips)} is not supported in "
            f"{nc.mode} mode (the pod gets the NIC's own address)"
        )
    if len(ips) > count:
        raise UnsupportedField(
            f"pod annotation block {pos}: deviceConf.ips {_listed(ips)} lists {len(ips)} "
            f"addresses for {count} interface(s)"
        )
    out: list[IPv4Address | None] = [IPv4Address(ip) for ip in ips]
    return out + [None] * (count - len(out))


def _listed(ips: Sequence[object]) -> str:
    """An annotation's address list as a message quotes it (escaped, and cut)."""
    return shown(", ".join(str(ip) for ip in ips), 200)


def plan_interfaces(
    nc: NetConf, blocks: Sequence[tuple[int, Block]], nics: Sequence[NicFacts], digest: str
) -> list[IfacePlan]:
    """nics[k] is the NIC of our k-th interface (allocation already decided)."""
    per_block = len(nics) if nc.mode.traits.nics is NicRule.EVERY else 1
    names = interface_names(nc, blocks, per_block)
    if len(names) != len(nics):
        raise ConfigError(f"internal: {len(names)} interface names for {len(nics)} NICs")
    macs: list[str | None] = []
    ips: list[IPv4Address | None] = []
    for pos, block in blocks:
        macs += [_block_mac(nc, pos, block)] * per_block
        ips += _block_ips(nc, pos, block, per_block)
    return [
        _plan_one(nc, k, names[k], nic, macs[k], ips[k], digest) for k, nic in enumerate(nics)
    ]


def _plan_one(nc: NetConf, k: int, name: str, nic: NicFacts, mac: str | None,
              ip: IPv4Address | None, digest: str) -> IfacePlan:
    mtu = nic.mtu
    if nc.mtu:
        if nc.mtu > nic.mtu:
            raise ConfigError(
                f"invalid network configuration: mtu {nc.mtu} is larger than the MTU "
                f"{nic.mtu} of RDMA NIC {nic.name}"
            )
        mtu = nc.mtu
    traits = nc.mode.traits
    return IfacePlan(
        k=k, name=name, tmp=f"rdt{digest[:9]}{k:x}", nic=nic.name, kind=traits.link.value,
        mtu=mtu, table=nc.routing.tableBase + k, mac=mac, requested_ip=ip,
        addresses=() if traits.pod_ipam else nic.addresses, gateway=nic.gateway,
        routes=nic.routes, ibdev=nic.ibdev,
        identity=identity_of(nic),
        host_mtu=nic.mtu, host_up=nic.up, host_routes=nic.host_routes,
        host_addrs=nic.host_addrs, inet6_mode=nic.inet6_mode, host_link=nic.host_link,
    )


def identity_of(nic: NicFacts) -> dict[str, Any]:
    """What identifies the NIC's netdev (see :func:`rdma_cni.datapath.physical.same_device`):
    its bus device, permanent MAC, kind and (for a link with no bus device) its index,
    which ADD updates to the index the NIC gets in the pod; for a veth, its peer (index,
    and the id the host gives the peer's netns: None, the host's own). Also its
    alternative names, the only ones it may take back to the host
    (:mod:`rdma_cni.datapath.altnames`; a record of an earlier release has none)."""
    ident = {"pci": nic.pci, "parentDev": nic.parent_dev, "parentBus": nic.parent_bus,
             "permMac": nic.perm_mac, "mac": nic.mac, "kind": nic.kind, "ifindex": nic.index,
             "ifindexNetns": "host", "altnames": list(nic.altnames)}
    if nic.kind == "veth" and nic.iflink:
        ident |= {"peerIndex": nic.iflink, "peerNetnsid": nic.link_netnsid}
    return ident


def with_address(plan: IfacePlan, ip: IPv4Address, prefixlen: int) -> IfacePlan:
    return replace(plan, addresses=(IPv4Interface(f"{ip}/{prefixlen}"),))


def pod_routes(plan: IfacePlan) -> list[tuple[str, str | None, bool]]:
    """(dst, gateway, onlink) for the interface's own table: connected + mirrored fabric routes."""
    addr = plan.address
    out: list[tuple[str, str | None, bool]] = []
    if addr is not None:
        out.append((str(addr.network), None, False))
    for dst, gw in plan.routes:
        if dst != "0.0.0.0/0":
            out.append((dst, gw, gw is not None))
    return out
