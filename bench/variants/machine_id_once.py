"""bench/ab.py variant: ``/etc/machine-id`` read once per process, not on every ADD (it
goes into the state's ``origin`` for diagnosis only)."""

import functools

from rdma_cni.node import origin

_real = origin.machine_id
_once = functools.lru_cache(maxsize=4)(_real)


def apply() -> None:
    origin.machine_id = _once


def revert() -> None:
    origin.machine_id = _real
