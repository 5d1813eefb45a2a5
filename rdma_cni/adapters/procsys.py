"""An interface's IPv6 settings, written where the kernel takes them:
``/proc/sys/net/ipv6/conf/<name>/<key>`` (RTM_SETLINK sets none of them). The files
are those of the calling thread's netns at the time it opens them: a port bound to
another netns (``netns_fd``) has its thread enter that netns for the writes."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Sequence

from rdma_cni.adapters import netns

CONF6 = "/proc/sys/net/ipv6/conf"


def write_ipv6_conf(name: str, values: Sequence[tuple[str, int]],
                    netns_fd: int | None = None) -> None:
    """Write ``values`` (key, value) for interface ``name`` in order; OSError on the first
    refusal (EROFS: a read-only /proc/sys, ENOENT: no such link, or no IPv6)."""
    if not name or "/" in name or name in (".", ".."):
        raise OSError(errno.EINVAL, f"not an interface name: {name!r}")
    with _in(netns_fd):
        for key, value in values:
            if "/" in key or key.startswith("."):
                raise OSError(errno.EINVAL, f"not a setting: {key!r}")
            fd = os.open(f"{CONF6}/{name}/{key}", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, f"{int(value)}\n".encode())
            finally:
                os.close(fd)


@contextlib.contextmanager
def _in(netns_fd: int | None) -> Iterator[None]:
    if netns_fd is None:
        yield
        return
    home = netns.host_fd()
    try:
        with netns.entered(netns_fd, home):
            yield
    finally:
        os.close(home)
