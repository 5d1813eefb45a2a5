"""Does the resident server see the caller's files? (the store and the kubelet's)

The server answers a request only when every path of the request's config that decides
its result (``dataDir``, the kubelet's PodResources socket and checkpoint) is the same
file in the server's view as in the caller's. A server whose mounts differ (a container
that mounts only ``/var/lib/cni`` while the config names another data dir, or that lacks
the kubelet's directories) would otherwise keep a second store, handing out addresses
the in-process path also hands out, or find no kubelet and give NICs to a pod without
an allocation.

The caller sends its root directory (``O_PATH``, :data:`protocol.FD_ROOT`). Each path
is resolved twice the same way, once from that root and once from the server's own: in
one ``openat2(RESOLVE_IN_ROOT)`` when every component exists, else component by
component with ``openat(O_PATH | O_NOFOLLOW)``, symbolic links followed inside the root
they were found in (as the caller would see them, even on kernels without
``openat2``). A path's identity is the device and inode of its
deepest existing directory or file plus the names still missing below it, so a data
dir the first ADD has yet to create compares too. A difference seen while the path is
being created (the caller's identity changed between two walks) is taken again. Any
other difference, or a path that cannot be walked, and the server declines: the caller
runs the request in-process.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any

from rdma_cni.adapters import fsops
from rdma_cni.confdefaults import DEFAULTS

MAX_LINKS = 40
#: comparisons made while the path changes under them (see :func:`same`)
RETRIES = 3
#: (device, inode) of the deepest existing entry, then the names missing below it
Identity = tuple[int, int, tuple[str, ...]]


def decoded(stdin: bytes) -> dict[str, Any] | None:
    """A raw request config as the server's checks read it (once per request): None when
    it is no JSON object (the dispatcher refuses it before any use)."""
    try:
        conf = json.loads(stdin)
    except (ValueError, RecursionError):
        return None
    return conf if isinstance(conf, dict) else None


def config_paths(conf: dict[str, Any] | None) -> list[tuple[str, object]]:
    """The (key, path) pairs of a request config (:func:`decoded`) the check covers,
    defaults included; none for a config that did not decode."""
    if conf is None:
        return []
    kubelet = conf.get("kubelet")
    kubelet = kubelet if isinstance(kubelet, dict) else {}
    return [("dataDir", conf.get("dataDir", DEFAULTS["dataDir"])),
            ("kubelet.podResourcesSocket",
             kubelet.get("podResourcesSocket", DEFAULTS["kubelet.podResourcesSocket"])),
            ("kubelet.checkpointFile",
             kubelet.get("checkpointFile", DEFAULTS["kubelet.checkpointFile"]))]


def mismatch(conf: dict[str, Any] | None, caller_root: int) -> str:
    """Why the server's view differs from the caller's for this config (:func:`decoded`;
    "" when it does not)."""
    own = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for key, path in config_paths(conf):
            if not isinstance(path, str) or not path or "\x00" in path:
                continue  # the config's validation refuses it; nothing is touched
            if not path.startswith("/"):
                return f"{key} {json.dumps(path)} is not an absolute path"
            try:
                agree = same(caller_root, own, path)
            except OSError as exc:
                return f"{key} {json.dumps(path)} cannot be resolved: {exc.strerror or exc}"
            if not agree:
                return (f"{key} {json.dumps(path)} is another file in the server's mounts "
                        "than in the caller's")
        return ""
    finally:
        os.close(own)


def same(caller_root: int, own: int, path: str) -> bool:
    """The caller's and the server's identities of ``path`` agree. A request may create
    the path between the two walks (the first pods on a node race to make the data
    dir): a difference counts only when the caller's identity, walked once more, has
    not changed; otherwise the pair is taken again (a few times at most)."""
    theirs = identity(caller_root, path)
    for _ in range(RETRIES):
        if theirs == identity(own, path):
            return True
        again = identity(caller_root, path)
        if again == theirs:
            return False
        theirs = again  # the caller's latest walk is the next pair's
    return False


def identity(root: int, path: str) -> Identity:
    """``path`` resolved inside ``root`` (a directory descriptor taken as ``/``): in one
    ``openat2`` when every component exists, else by the walk (which also finds the
    deepest existing entry, and says what a magic link or an older kernel stops)."""
    try:
        fd = fsops.open_in_root(root, path)
    except (OSError, ValueError):  # ValueError: a NUL in it, which the walk reports
        return _walk(root, path)
    try:
        return _of(fd, ())
    finally:
        os.close(fd)


def _walk(root: int, path: str) -> Identity:
    """:func:`identity` component by component with ``openat(O_PATH | O_NOFOLLOW)``."""
    stack = [os.dup(root)]
    parts = [p for p in path.split("/") if p not in ("", ".")]
    parts.reverse()  # a stack: the next component last
    links = 0
    try:
        while parts:
            name = parts.pop()
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=stack[-1])
            except FileNotFoundError:
                return _of(stack[-1], (name, *reversed(parts)))
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                links += 1
                target = _link(name, stack[-1], fd, links)
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                parts += reversed([p for p in target.split("/") if p not in ("", ".")])
                continue
            stack.append(fd)
        return _of(stack[-1], ())
    finally:
        for fd in stack:
            os.close(fd)


def _link(name: str, parent: int, fd: int, links: int) -> str:
    try:
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        return os.readlink(name, dir_fd=parent)
    finally:
        os.close(fd)


def _of(fd: int, missing: tuple[str, ...]) -> Identity:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, missing
