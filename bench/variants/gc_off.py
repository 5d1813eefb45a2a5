"""bench/ab.py variant: the cyclic collector off during B's ADDs (an upper bound of what
the collector costs a one-interface ADD)."""

import gc


def apply() -> None:
    gc.disable()


def revert() -> None:
    gc.enable()
