"""Running commands and waiting, as every tier does it."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rdma_cni.logsetup import TEST_LOG_FILE

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


#: where the kernel picks the ports of port-0 binds and outgoing connections
EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to right now, below the kernel's
    ephemeral range: no other process's port-0 listener or outgoing connection can be
    given it before the caller's server binds it (a node test once found its exporter's
    port answered by some other server: HTTP 404). A port of that range when nothing
    below it is free."""
    low = int(Path(EPHEMERAL).read_text().split()[0])
    candidates = list(range(max(1024, low - 8192), low))
    random.shuffle(candidates)
    for port in [*candidates[:200], 0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise AssertionError("no free TCP port on 127.0.0.1")


def plugin_env(**env: str) -> dict[str, str]:
    """A plugin's environment as a runtime gives it (PATH), with the session's log seam
    when it is set, then ``env``: the node's own log is never the tests'."""
    base = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    # the plugin's seam for the log of a config it cannot read (rdma_cni/testhooks.py),
    # which the session sets (tests/support/hostpaths.py)
    if os.environ.get(TEST_LOG_FILE):
        base[TEST_LOG_FILE] = os.environ[TEST_LOG_FILE]
    return {**base, **env}
