"""Undo an attachment from its saved state: shared by DEL, GC and a repeated ADD.

Best effort: anything already gone is success. The one real failure is an
exclusive NIC that is still in the pod and cannot move right now; the caller
then keeps the state so a retry can finish.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial

from rdma_cni import testhooks
from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.datapath import sublinks
from rdma_cni.datapath.altnames import clean_altnames
from rdma_cni.datapath.physical import (
    HOST,
    NicNotBack,
    find_moved,
    home_name,
    lookalikes,
    move_out,
    restore_host,
)
from rdma_cni.datapath.rdmadev import rdma_out
from rdma_cni.datapath.session import Session
from rdma_cni.errors import CniError, IOFailure
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.kinds import SALVAGED, LinkKind
from rdma_cni.vocab.plan import IfacePlan
from rdma_cni.vocab.ports import NetlinkPort

log = logging.getLogger("rdma_cni")

#: how long DEL waits for the kernel to return an exclusive NIC whose pod netns is
#: going away (the kernel moves physical devices back asynchronously, in its netns
#: cleanup work); past it DEL fails with code 11 and keeps the state for a retry
RETURN_WAIT = 10.0
_POLL = 0.1


__all__ = ["NicNotBack", "hardware_of", "marker_of", "teardown"]


def marker_of(digest: str) -> str:
    return f"rdma-cni:{digest}"


def teardown(session: Session, state: AttachmentState, digest: str) -> None:
    marker = marker_of(digest)
    priority = state.rule_priority
    failures: list[tuple[str, CniError]] = []
    tick = testhooks.del_ticker()  # inert unless the test seam is set
    doomed: list[str] = []  # our sub-links in the pod, deleted together at the end
    back: list[tuple[IfacePlan, str]] = []  # exclusive NICs found on the host, and as what
    # a record rebuilt from the pod (salvage) does not know which address bears the rule
    every = state.status == SALVAGED
    for p in reversed(state.interfaces):
        try:
            current = _undo(session, p, marker, priority, tick, doomed, every)
            if current is not None:
                back.append((p, current))
        except CniError as exc:
            if p.kind == LinkKind.PHYSICAL:
                failures.append((p.nic, exc))
            else:
                log.warning("DEL of %s: %s (ignored)", p.name, exc.msg)
    if back:
        assert session.host is not None
        failures += _home_all(session.host, back)
    tick()
    if doomed:
        _delete_sublinks(session, marker, priority, doomed)
    if failures and all(isinstance(f, NicNotBack) for _, f in failures):
        raise NicNotBack("; ".join(f.msg for _, f in failures))
    if failures:
        raise IOFailure("failed to return exclusive NIC(s) to the host: " +
                        "; ".join(f"{nic}: {f.msg}" for nic, f in failures))


def _undo(session: Session, p: IfacePlan, marker: str, priority: int,
          tick: Callable[[], None], doomed: list[str], every: bool) -> str | None:
    """Undo ``p`` in the pod (a sub-link's name added to ``doomed``; ``every``: the rule
    of each of its addresses); an exclusive NIC not moved home from there: its name on
    the host (None: gone with its hardware)."""
    home, fakes = False, list[str]()
    if session.has_pod:
        names, home, fakes = _in_pod(session, p, marker, priority, tick, every)
        doomed += names
    if p.kind != LinkKind.PHYSICAL:
        return None
    assert session.host is not None
    tick()  # before the host's side, moved home or not (the crash matrix's DEL points)
    return None if home else _find_on_host(session.host, p, marker, fakes=fakes)


def _in_pod(session: Session, p: IfacePlan, marker: str, priority: int,
            tick: Callable[[], None], every: bool) -> tuple[list[str], bool, list[str]]:
    """Undo ``p`` in the pod: the rule ADD made (from its first address: an exclusive NIC
    with more has no rule of ours for the others); for a sub-link, the names to delete (at
    the end, together); for an exclusive NIC, whether it was moved home from the pod, and
    if not, the links there that only look like it."""
    ctx = session.ctx(marker, priority)
    tick()
    for addr in p.addresses if every else p.addresses[:1]:
        ctx.pod.del_rule(str(addr.ip), p.table, priority)
    tick()
    if p.kind == LinkKind.PHYSICAL:
        if p.rdma_move:
            rdma_out(ctx, p)  # reverse order of ADD: RDMA device first, then the netdev
        if move_out(ctx, p):
            return [], True, []
        return [], False, lookalikes(ctx.pod, p, marker)
    return sublinks.ours(ctx, p), False, []


def _delete_sublinks(session: Session, marker: str, priority: int, names: list[str]) -> None:
    try:
        session.ctx(marker, priority).pod.delete_links(names)
    except CniError as exc:
        log.warning("DEL of %s: %s (ignored)", ", ".join(names), exc.msg)


def _recover_on_host(host: NetlinkPort, p: IfacePlan, marker: str, sysfs: Sysfs | None = None,
                     wait: float | None = None, fakes: Sequence[str] = ()) -> None:
    """:func:`_find_on_host`, then the NIC named and restored (one NIC alone)."""
    current = _find_on_host(host, p, marker, sysfs, wait, fakes)
    if current is not None:
        for _, exc in _home_all(host, [(p, current)]):
            raise exc


def _find_on_host(host: NetlinkPort, p: IfacePlan, marker: str, sysfs: Sysfs | None = None,
                  wait: float | None = None, fakes: Sequence[str] = ()) -> str | None:
    """The NIC came back by itself (pod netns died) or a move half-finished: its name on
    the host (None: gone with its hardware). Not on the host either while ``fakes`` in the
    pod look like it: the pod hides it (in a netns of its own, until that dies and the
    kernel returns a physical NIC), and nothing is taken in its place: :class:`NicNotBack`
    at once."""
    sysfs = sysfs or Sysfs()

    def device_path(name: str) -> str | None:
        return sysfs.realpath(f"sys/class/net/{name}/device") if "/" not in name else None

    current = find_moved(host, p, marker, HOST, device_path)
    if current is None and fakes:
        log.warning("DEL: exclusive NIC %s is not in the pod under the identity recorded "
                    "at ADD, nor on the host; %s in the pod only looks like it and is not "
                    "taken", p.nic, ", ".join(fakes))
        raise NicNotBack(f"exclusive NIC {p.nic} is not in the pod under the identity "
                         f"recorded at ADD ({', '.join(fakes)} only looks like it) nor "
                         "back on the host: the state is kept for a retry")
    if current is None:
        device = hardware_of(p, sysfs)
        if device is None:
            return None  # gone with its hardware (or a virtual stand-in gone with its netns)
        wait = RETURN_WAIT if wait is None else wait
        log.info("DEL: exclusive NIC %s (%s) is in no netns in sight: waiting up to %.0f s "
                 "for the kernel to return it", p.nic, device, wait)
        current = _wait_back(host, p, marker, wait, device_path)
        if current is None:
            raise NicNotBack(
                f"exclusive NIC {p.nic} ({device}) is neither in the pod nor back on the "
                "host: the kernel has not returned it yet; the state is kept for a retry")
        log.info("DEL: exclusive NIC %s is back on the host as %s", p.nic, current)
    return current


def _home_all(host: NetlinkPort, back: list[tuple[IfacePlan, str]]
              ) -> list[tuple[str, CniError]]:
    """Name and restore the NICs found on the host (``back``: each with its name there);
    the failures, by NIC. The kernel returns a NIC under the name it had in the pod, which
    may be the host name of another NIC of the same pod (pods and VKE's nodes both name
    them eth1, eth2, ...), each sitting on the other's: the one named first goes to its
    fallback name, and once every NIC has moved, to its own name if that is free now.
    All of it before any NIC is up again: a kernel before 6.2 renames no link that is."""
    named: list[tuple[IfacePlan, str]] = []
    failures: list[tuple[str, CniError]] = []
    for p, current in back:
        try:
            clean_altnames(host, current, p, partial(_other, host, nic=current))
            named.append((p, current if current == p.nic else _named_home(host, current, p)))
        except CniError as exc:
            failures.append((p.nic, exc))
    for p, name in named:
        try:
            if name != p.nic and host.link(p.nic) is None:
                host.rename(name, p.nic, "", f"rename {name} to {p.nic}")
                log.info("DEL: exclusive NIC %s is back under its own name", p.nic)
                name = p.nic
            restore_host(host, name, p)
        except CniError as exc:
            failures.append((p.nic, exc))
    return failures


def _other(host: NetlinkPort, name: str, *, nic: str) -> bool:
    """Whether ``name`` is a link of the host other than ``nic`` (a name or an alternative
    name of ``nic`` finds it)."""
    found = host.link(name)
    return found is not None and found.name != nic


def _named_home(host: NetlinkPort, current: str, p: IfacePlan) -> str:
    """The NIC, back on the host as ``current``, under its host name (or a fallback)."""
    found = host.link(current)
    name = current if current == p.nic else \
        home_name(p, lambda n: host.link(n) is not None, found.index if found else 0)
    if current != name:
        host.rename(current, name, "", f"rename {current} to {name}")
    return name


def hardware_of(p: IfacePlan, sysfs: Sysfs) -> str | None:
    """The bus device (``/sys/bus/<bus>/devices/<name>``) of an exclusive NIC, if it still
    exists: its PCI address or its parent device (``IFLA_PARENT_DEV_NAME``)."""
    names = [p.identity.get("pci"), p.identity.get("parentDev")]
    for name in (n for n in names if n and "/" not in n and not n.startswith(".")):
        for bus in sysfs.listdir("sys/bus"):
            if sysfs.exists(f"sys/bus/{bus}/devices/{name}"):
                return f"{bus} device {name}"
    return None


def _wait_back(host: NetlinkPort, p: IfacePlan, marker: str, wait: float,
               device_path: Callable[[str], str | None]) -> str | None:
    deadline = time.monotonic() + wait
    while True:
        current = find_moved(host, p, marker, HOST, device_path)
        if current is not None or time.monotonic() >= deadline:
            return current
        time.sleep(_POLL)
