"""The host kernel ``install`` accepts.

The host plugin carries its own C library and loader (build.spec, scripts/host_tree.py),
so the host's userland does not matter; its kernel does. Refused, in one line: a kernel
older than :data:`FLOOR`, which lacks what the plugin cannot work without. Below
:data:`SUPPORTED` (RHEL 8's 4.18, the oldest in the field) it installs with a warning:
nothing there is known to fail, and nothing there is tested.
"""

from __future__ import annotations

import os
import re

from rdma_cni.errors import ConfigError

#: ipvlan (3.19); memfd_create and /proc/thread-self, which the front uses (3.17);
#: renameat2 RENAME_EXCHANGE (3.15)
FLOOR = (3, 19)
NEEDS = "ipvlan (3.19), memfd_create and /proc/thread-self (3.17)"
SUPPORTED = (4, 18)


def release() -> str:
    return os.uname().release


def version(text: str) -> tuple[int, int] | None:
    """``5.15.0-91-generic`` -> (5, 15); None when it does not start like a version."""
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check(text: str) -> str:
    """The line ``install`` prints; ConfigError for a kernel the plugin cannot run on."""
    have = version(text)
    show = ".".join(map(str, SUPPORTED))
    if have is None:
        return f"kernel {text!s}: version unknown, not checked"
    if have < FLOOR:
        raise ConfigError(f"refusing to install: kernel {text} is older than "
                          f"{'.'.join(map(str, FLOOR))}, which the plugin needs for {NEEDS}")
    if have < SUPPORTED:
        return (f"warning: kernel {text} is older than {show}, the oldest supported; "
                "installing anyway")
    return f"kernel {text} (>= {show}; the plugin brings its own C library)"
