"""Running commands and waiting, as every tier does it."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def sh(*argv: str, check: bool = True, input: str | None = None,
       timeout: float = 60) -> str:
    """Run a command; its stdout. Raise with its stderr when it fails and ``check`` is set."""
    proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def run(*argv: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run a command; the completed process (``check``: CalledProcessError when it fails)."""
    return subprocess.run(list(argv), capture_output=True, text=True, check=check,
                          timeout=kw.pop("timeout", 60), **kw)


def wait_for(cond: Callable[[], T], what: str | None = None, timeout: float = 60.0,
             interval: float = 0.2) -> T:
    """Poll ``cond`` until it returns something truthy, and return that. At ``timeout``
    seconds: raise AssertionError naming ``what`` when given, else return the last
    (falsy) value, for the caller's own assertion."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            if what is None:
                return value
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
