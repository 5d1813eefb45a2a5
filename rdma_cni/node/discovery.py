"""Which netdevs are RoCE NICs, and how device IDs map to them (DESIGN §3, §8).

RoCE netdevs are those with ``sys/class/net/<if>/device/infiniband/<ibdev>``
whose port ``link_layer`` is Ethernet, plus the netdevs named in a port's
``gid_attrs/ndevs`` that exist on the host and have no ``device`` link of
their own (a RoCE bond has no ``device/infiniband``; requiring a virtual
netdev keeps a pod's same-named upper device from marking an unrelated
physical host NIC as RoCE); the slaves of such a bond are dropped. Port
state is health, not a filter.

A GID table names the netdev of every address on the port, a pod's too, by
the name it has in its own netns, which the pod chooses (or changes, with
``CAP_NET_ADMIN``). A netdev is taken for an RDMA device's through its GID
table only when it sits on that device (:func:`_sits_on`): itself or a device
below it (``lower_*``: the slaves of a bond, the NIC under a VLAN) has the
RDMA device in its ``device/infiniband``, or is its ``parent`` (Soft-RoCE).
So a pod naming its interface like a bridge or bond of the host makes neither
a RoCE NIC, nor another RDMA device's.

With ``pinned`` (the config ``devices``) exactly those netdevs come back, in
config order, with whatever RDMA information exists and no RoCE check. A
pinned netdev missing from sysfs comes back with every other field None:
``missing()`` names them so the caller can report it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from contextlib import closing

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import AllocationError, shown
from rdma_cni.records import replace
from rdma_cni.vocab.nic import Nic

NET = "sys/class/net"
IB = "sys/class/infiniband"
#: how many levels of stacked devices :func:`_stacked` follows (a VLAN on a bond of two
#: NICs is two above them)
MAX_DEPTH = 8
PCI_RE = re.compile(r"^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def _ports(sysfs: Sysfs, ibdev: str) -> list[int]:
    return sorted(int(p) for p in sysfs.listdir(f"{IB}/{ibdev}/ports") if p.isdigit())


def _named(sysfs: Sysfs, ibdev: str, port: int, names: Iterable[str]) -> set[str]:
    """Which of ``names`` the port's GID table names, its slots read in order only until
    all are found (a netdev's own GIDs come first: its default ones in slots 0 and 1)."""
    left, found = set(names), set()
    slots = sysfs.each(f"{IB}/{ibdev}/ports/{port}/gid_attrs/ndevs")
    with closing(slots):
        for _, ndev in slots:
            if ndev in left:
                left.discard(ndev)
                found.add(ndev)
                if not left:
                    break
    return found


def _pci_of(sysfs: Sysfs, rel_device: str) -> tuple[str | None, int | None]:
    """The PCI function nearest above the netdev's device (virtio-net sits one level
    below its PCI function, e.g. .../0000:00:0c.0/virtio10), and its NUMA node."""
    real = sysfs.realpath(rel_device)
    if real is None:
        return None, None
    parts = real.split("/")
    for end in range(len(parts), 0, -1):
        if PCI_RE.match(parts[end - 1]):
            break
    else:
        return None, None
    numa = sysfs.read("/".join(parts[:end]) + "/numa_node")
    node = int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None
    return parts[end - 1].lower(), node


def uverbs_map(sysfs: Sysfs) -> dict[str, str]:
    base = "sys/class/infiniband_verbs"
    out: dict[str, str] = {}
    for uv in sysfs.listdir(base):
        ib = sysfs.read(f"{base}/{uv}/ibdev")
        if ib:
            out.setdefault(ib, uv)
    return out


def _port_for(sysfs: Sysfs, netdev: str, ibdev: str) -> int | None:
    """The port of ``ibdev`` whose netdev ``netdev`` is: the one whose GID table names it;
    of several (a pod on another port may name its interface so), the one ``dev_port``
    gives; with none, the one ``dev_port`` gives, else the first."""
    if len(ports := _ports(sysfs, ibdev)) == 1:  # what any check below gives (no GID read)
        return ports[0]
    named = [p for p in ports if _named(sysfs, ibdev, p, [netdev])]
    if len(named) == 1:
        return named[0]
    dev_port = sysfs.read(f"{NET}/{netdev}/dev_port")
    if dev_port and dev_port.isdigit() and int(dev_port) + 1 in (named or ports):
        return int(dev_port) + 1
    first = named or ports
    return first[0] if first else None


def _rdma_of(sysfs: Sysfs, netdev: str) -> tuple[str, int | None] | None:
    """(ibdev, port) of a netdev: its own device/infiniband, else a GID owner it sits on."""
    own = sysfs.listdir(f"{NET}/{netdev}/device/infiniband")
    if own:
        return own[0], _port_for(sysfs, netdev, own[0])
    for ib in sysfs.listdir(IB):
        if _sits_on(sysfs, netdev, ib):
            for p in _ports(sysfs, ib):
                if _named(sysfs, ib, p, [netdev]):
                    return ib, p
    return None


def _sits_on(sysfs: Sysfs, netdev: str, ibdev: str) -> bool:
    """Whether ``netdev``, or a device below it (:func:`_stacked`), has ``ibdev`` in its
    device/infiniband or is its ``parent`` (see the module doc)."""
    parent = sysfs.read(f"{IB}/{ibdev}/parent")
    return any(name == parent or ibdev in sysfs.listdir(f"{NET}/{name}/device/infiniband")
               for name in {netdev} | _stacked(sysfs, [netdev], "lower"))


def _stacked(sysfs: Sysfs, netdevs: Iterable[str], side: str,
             depth: int = MAX_DEPTH) -> set[str]:
    """The netdevs stacked on ``side`` (``"upper"`` or ``"lower"``) of ``netdevs``, through
    the kernel's ``upper_*``/``lower_*`` links, ``depth`` levels at most."""
    prefix = f"{side}_"
    seen, level = set(netdevs), set(netdevs)
    for _ in range(depth):
        level = {e[len(prefix):] for name in level for e in sysfs.listdir(f"{NET}/{name}")
                 if e.startswith(prefix)} - seen
        if not level:
            break
        seen |= level
    return seen - set(netdevs)


def build(sysfs: Sysfs, netdev: str, uverbs: dict[str, str]) -> Nic:
    if not sysfs.exists(f"{NET}/{netdev}"):
        return Nic(netdev)
    pci, numa = _pci_of(sysfs, f"{NET}/{netdev}/device")
    rdma = _rdma_of(sysfs, netdev)
    if rdma is None:
        return Nic(netdev, pci=pci, numa=numa)
    ib, port = rdma
    if pci is None:  # a bond: the RDMA device's own PCI function
        pci, numa = _pci_of(sysfs, f"{IB}/{ib}/device")
    link = state = None
    if port is not None:
        link = sysfs.read(f"{IB}/{ib}/ports/{port}/link_layer")
        raw = sysfs.read(f"{IB}/{ib}/ports/{port}/state")
        state = raw.split(":", 1)[-1].strip() if raw else None
    return Nic(netdev, ib, port, pci, numa, link, state, uverbs.get(ib))


def rdma_now(sysfs: Sysfs, nic: Nic) -> Nic | None:
    """``nic`` with the uverbs device its RDMA device has now (a character device's name
    is given again to the next device that comes); None when that RDMA device is gone or
    its name is now another PCI function's. A NIC without one comes back as it is."""
    if nic.ibdev is None:
        return nic
    if not sysfs.exists(f"{IB}/{nic.ibdev}"):
        return None
    pci = _pci_of(sysfs, f"{IB}/{nic.ibdev}/device")[0]
    if pci is not None and nic.pci is not None and pci != nic.pci:
        return None
    return replace(nic, uverbs=uverbs_map(sysfs).get(nic.ibdev))


def own_pci(sysfs: Sysfs, netdev: str) -> str | None:
    """The PCI function of the netdev's own device (None for a bond: :func:`build` gives it
    its RDMA device's)."""
    return _pci_of(sysfs, f"{NET}/{netdev}/device")[0]


def _roce_candidates(sysfs: Sysfs) -> set[str]:
    """The netdevs with an RDMA device of their own, and those without a device that sit
    on an RDMA device (:func:`_sits_on`, found from below: the devices stacked above its
    own netdevs and its parent) and its GID table names; the slaves of a bond among them
    dropped. The GID tables are read only for such netdevs, and only until they are
    found."""
    host = set(sysfs.listdir(NET))
    own = {n: sysfs.listdir(f"{NET}/{n}/device/infiniband") for n in host}
    found = {n for n, ibs in own.items() if ibs}
    for ib in sysfs.listdir(IB):
        parent = sysfs.read(f"{IB}/{ib}/parent")
        bases = {n for n in found if ib in own[n]} | ({parent} if parent in host else set())
        virtual = {v for v in (bases | _stacked(sysfs, bases, "upper")) & host
                   if not sysfs.exists(f"{NET}/{v}/device")}
        for p in _ports(sysfs, ib):
            if left := virtual - found:
                found |= _named(sysfs, ib, p, left)
    return {n for n in found if _master(sysfs, n) not in found}


def _master(sysfs: Sysfs, netdev: str) -> str | None:
    """The bond a netdev is enslaved to (its slaves are not NICs of their own)."""
    real = sysfs.realpath(f"{NET}/{netdev}/master")
    return real.rsplit("/", 1)[-1] if real else None


def discover(sysfs: Sysfs, pinned: Sequence[str] | None = None) -> list[Nic]:
    """RoCE NICs sorted by netdev name, or exactly the ``pinned`` netdevs."""
    uverbs = uverbs_map(sysfs)
    if pinned is not None:
        return _one_id_each([build(sysfs, n, uverbs) for n in pinned])
    nics = [build(sysfs, n, uverbs) for n in sorted(_roce_candidates(sysfs))]
    return _one_id_each([n for n in nics if n.link_layer == "Ethernet"])


def _one_id_each(nics: list[Nic]) -> list[Nic]:
    """NICs on one PCI function are told apart by their netdev names
    (:attr:`Nic.shares_function`): a device ID names one NIC."""
    seen = Counter(n.pci for n in nics if n.pci)
    return [replace(n, shares_function=True) if n.pci and seen[n.pci] > 1 else n for n in nics]


def missing(sysfs: Sysfs, nics: Iterable[Nic]) -> list[str]:
    """Netdev names of NICs that do not exist in sysfs."""
    return [n.netdev for n in nics if not sysfs.exists(f"{NET}/{n.netdev}")]


def strip_slot(dev_id: str) -> str:
    """``0000:3b:00.0@3`` -> ``0000:3b:00.0`` (shared slots of one NIC)."""
    return dev_id.split("@", 1)[0].strip()


def normalize_ids(ids: Iterable[str]) -> list[str]:
    """Strip ``@n`` slot suffixes, de-duplicate, sort."""
    return sorted({s for s in (strip_slot(i) for i in ids) if s})


def resolve_device_id(sysfs: Sysfs, nics: Sequence[Nic], dev_id: str) -> Nic:
    """Map a PCI address (with optional ``@n``), RDMA device or netdev to its NIC."""
    key = strip_slot(dev_id)
    for match in (
        lambda n: n.pci is not None and n.pci == key.lower(),
        lambda n: n.ibdev == key,
        lambda n: n.netdev == key,
    ):
        for nic in nics:
            if match(nic):
                return nic
    known = ", ".join(n.device_id for n in nics) or "none"
    raise AllocationError(
        f"failed to map device ID {shown(dev_id)} to an RDMA NIC: no NIC has that PCI address, "
        f"RDMA device or netdev name (known: {known})"
    )
