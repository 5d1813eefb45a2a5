"""A process's view of one pool's reservations in ``addrs/``, kept from one ADD to the
next by the change journal (:mod:`rdma_cni.store.journal`): the directory is listed and
each of the pool's files checked once, then only the files whose names were noted since
are read again, and those held by the caller (it acts on its own, see
:meth:`rdma_cni.store.claims.Claims.ip_owners`). Callers hold the store's lock."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from ipaddress import IPv4Address, IPv4Network

from rdma_cni.records import record
from rdma_cni.store import journal
from rdma_cni.vocab.attachment import AttachmentKey

#: who holds a reservation: the attachment key and our interface name
Owner = tuple[AttachmentKey, str]
#: (name, address, owner) of each reservation of the pool, from a listing
Listing = Iterable[tuple[str, IPv4Address, Owner]]
#: the owner recorded in the file at a path (None: no file)
Reader = Callable[[str], "Owner | None"]


@record(frozen=False)
class View:
    head: journal.Head
    listed_at: float
    owners: dict[str, tuple[IPv4Address, Owner]]  # by file name


#: by (directory, pool network); a few pools per node
_views: dict[tuple[str, IPv4Network], View] = {}
_MAX_VIEWS = 64


def pool_owners(fd: int, directory: str, net: IPv4Network, mine: AttachmentKey | None,
                listing: Callable[[], Listing], read: Reader,
                fresh: bool = False) -> dict[IPv4Address, Owner]:
    """Owner of each reserved address of ``net`` in ``directory``: from this process's
    view brought up to date, or from ``listing()`` when the journal cannot tell what
    changed, the view is older than :data:`journal.REFRESH` or ``fresh`` is asked."""
    now = time.monotonic()
    view = None if fresh else _views.get((directory, net))
    if view is not None and now - view.listed_at >= journal.REFRESH:
        view = None
    head, changed = journal.since(fd, view.head if view is not None else None)
    if view is None or changed is None or head is None:
        if len(_views) >= _MAX_VIEWS:
            _views.clear()
        owners = {name: (ip, owner) for name, ip, owner in listing()}
        if head is None:  # the journal cannot be used: no view kept
            _views.pop((directory, net), None)
        else:
            _views[(directory, net)] = View(head, now, owners)
        return {ip: owner for ip, owner in owners.values()}
    again = changed if mine is None else \
        changed | {n for n, (_, o) in view.owners.items() if o[0] == mine}
    for name in again:
        _update(view, directory, net, name, read)
    view.head = head
    return {ip: owner for ip, owner in view.owners.values()}


def _update(view: View, directory: str, net: IPv4Network, name: str, read: Reader) -> None:
    try:
        ip = IPv4Address(name)
    except ValueError:
        return  # not a reservation (a listing logs it)
    owner = read(os.path.join(directory, name)) if ip in net else None
    if owner is None:
        view.owners.pop(name, None)
    else:
        view.owners[name] = (ip, owner)
