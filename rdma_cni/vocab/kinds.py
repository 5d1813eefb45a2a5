"""The kinds of a pod interface and the statuses of an attachment record, as string
enums: a member *is* its ``str`` value, so state records, the agent's pod report and
metric labels keep their bytes. Stdlib only."""

from __future__ import annotations

from enum import StrEnum


class LinkKind(StrEnum):
    """What the pod gets on the host's RDMA NIC (the ``kind`` of a saved plan)."""

    IPVLAN = "ipvlan"  # an IPVLAN L2 sub-interface; the NIC stays on the host
    MACVLAN = "macvlan"  # a macvlan (bridge) sub-interface; the NIC stays on the host
    PHYSICAL = "physical"  # the NIC's own netdev moves into the pod


class Status(StrEnum):
    """Where an attachment's state record stands."""

    PENDING = "pending"  # ADD reserved and is applying (or died doing so)
    READY = "ready"  # ADD finished
    SALVAGED = "salvaged"  # the agent undid what a dead ADD left


#: the members by name, for ``from rdma_cni.vocab.kinds import READY``
PENDING, READY, SALVAGED = Status.PENDING, Status.READY, Status.SALVAGED
