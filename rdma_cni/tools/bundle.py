"""Laying out the host plugin in the CNI bin dir for ``install``: versioned trees.

::

    <bin>/rdma-cni              -> rdma-cni.versions/<version>-<digest>/rdma-cni-front  (the link)
    <bin>/nccl_env.sh           (copied from the tree)
    <bin>/rdma-cni.versions/<version>-<digest>/   rdma-cni-front, rdma-cni, _internal/, .in-use

An upgrade copies the new tree beside the old one under a temporary name, renames it into
place, then switches the one link (temp symlink + rename): a plugin the runtime execs
during the swap runs one tree or the other, never files of both, because the front
resolves its own tree once (``/proc/self/exe``) and runs everything from there.

A tree is pruned once nothing runs from it. The front holds a shared ``flock`` on its
tree's ``.in-use`` for as long as the fallback plugin runs (front/rdma-cni-front.c,
``hold_tree``); the pruner takes the lock exclusively without waiting, unlinks
``.in-use`` (a front that locks the old file after that sees it unlinked and runs the
current link instead), then removes the tree. A tree in use is kept for the next round
(``install --watch`` prunes every interval).

The trees live apart from ``rdma-cni.d/``, the directory of release 0.1.0's flat layout
(``rdma-cni.d/rdma-cni``, ``_internal/``, ...): its installer replaces that directory
whole (and deletes what it replaced) before it switches the link, so a rollback to it
never pulls a tree from under the link or a running plugin. ``rdma-cni.d/`` has no lock:
it is removed :data:`LEGACY_GRACE` seconds after the link stopped naming it, longer than
any plugin exec lasts (its own deadlines end it well within that).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import sys
import time

from rdma_cni import __version__
from rdma_cni.cliargs import say
from rdma_cni.errors import ConfigError
from rdma_cni.models.subconfig import PLUGIN_TYPE
from rdma_cni.tools import leftovers
from rdma_cni.tools.installfiles import fsync_dir, write_atomic

BUNDLE_DIR = "rdma-cni.versions"
#: release 0.1.0's directory (a flat bundle its installer swaps in whole)
LEGACY_DIR = "rdma-cni.d"
#: the native front in the tree: forwards to `rdma-cni serve`, else execs the plugin
FRONT = "rdma-cni-front"
IN_USE = ".in-use"
NCCL_ENV = "nccl_env.sh"
HOST_SUFFIX = "-host"  # dist/rdma-cni-host beside dist/rdma-cni; /opt/rdma-cni-host in the image
LEGACY_MARK = ".legacy-retired"
LEGACY_GRACE = 120.0
_INSTALL_LOCK = ".install.lock"
_NCCL_IN_BUNDLE = ("_internal/rdma_cni/data/nccl_env.sh", "rdma_cni/data/nccl_env.sh")
#: the source checkout this module runs from when not frozen (rdma_cni/tools/ is two below)
_SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_bundle() -> str:
    if getattr(sys, "frozen", False):
        return os.path.dirname(os.path.realpath(sys.executable))
    return os.path.join(_SOURCE_TREE, "dist", "rdma-cni")


def default_host_tree(bundle: str) -> str:
    """The host tree built beside the image's bundle (build.spec, scripts/host_tree.py)."""
    return os.path.normpath(bundle) + HOST_SUFFIX


def tree_digest(root: str) -> str:
    """A digest of a directory tree (names, link targets, file contents, exec bits),
    ``.in-use`` left out; '' if absent."""
    if not os.path.isdir(root):
        return ""
    h = hashlib.sha256()
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files + [x for x in dirs if os.path.islink(os.path.join(d, x))]):
            p = os.path.join(d, name)
            if d == root and name == IN_USE:
                continue
            h.update(os.path.relpath(p, root).encode() + b"\0")
            if os.path.islink(p):
                h.update(b"L" + os.readlink(p).encode())
            else:
                with open(p, "rb") as f:
                    h.update(b"F%o" % (os.stat(p).st_mode & 0o111))
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def install_lock(bin_dir: str):  # type: ignore[no-untyped-def]
    """One installer at a time per bin dir (the init container and --watch both install)."""
    root = os.path.join(bin_dir, BUNDLE_DIR)
    os.makedirs(root, exist_ok=True)
    fd = os.open(os.path.join(root, _INSTALL_LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def bin_lock(bin_dir: str):  # type: ignore[no-untyped-def]
    """The bin dir itself locked (flock on its directory; nothing is created in it, so a
    watch outliving an uninstall leaves nothing behind): a watch's re-apply of the
    entry and an uninstall's removal of the plugin and the entry, one after the other."""
    try:
        fd = os.open(bin_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # no bin dir: no plugin to re-apply the entry for
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def forget_empty(bin_dir: str) -> None:
    """Remove ``<bin_dir>/rdma-cni.versions`` when it holds nothing but the install lock (a first
    install that failed leaves nothing behind)."""
    root = os.path.join(bin_dir, BUNDLE_DIR)
    try:
        if set(os.listdir(root)) <= {_INSTALL_LOCK}:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(root, _INSTALL_LOCK))
            os.rmdir(root)
    except OSError:
        pass


def install_tree(tree: str, bin_dir: str) -> tuple[str, bool]:
    """Copy the host ``tree`` to ``<bin_dir>/rdma-cni.versions/<version>-<digest>``; returns that
    name and whether it was copied (False: already there, identical)."""
    if not os.access(os.path.join(tree, FRONT), os.X_OK) or \
            not os.access(os.path.join(tree, PLUGIN_TYPE), os.X_OK):
        raise ConfigError(f"failed to install from {tree}: no executable {FRONT} and "
                          f"{PLUGIN_TYPE} there (run ./scripts/build.sh, or pass --host-tree)")
    digest = tree_digest(tree)
    name = f"{__version__}-{digest[:12]}"
    root = os.path.join(bin_dir, BUNDLE_DIR)
    dest = os.path.join(root, name)
    # reused only whole: a tree without .in-use is one a prune began to remove (killed
    # between the unlink and the rmtree); the front takes it for going and never runs it
    if tree_digest(dest) == digest and os.path.isfile(os.path.join(dest, IN_USE)):
        return name, False
    tmp = os.path.join(root, f".new-{name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(tree, tmp, symlinks=True)
        with open(os.path.join(tmp, IN_USE), "wb"):
            pass
        os.sync()  # the whole tree on disk before any name points at it
    except BaseException:  # a full disk: nothing partial stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.lexists(dest):  # damaged: set aside, pruned like any old tree
        os.rename(dest, os.path.join(root, f".old-{name}-{os.getpid()}"))
    os.rename(tmp, dest)
    fsync_dir(root)
    return name, True


def link_target(name: str) -> str:
    return f"{BUNDLE_DIR}/{name}/{FRONT}"


def switch_link(bin_dir: str, name: str) -> bool:
    """Point ``<bin_dir>/rdma-cni`` at tree ``name``'s front; False when it already does."""
    link = os.path.join(bin_dir, PLUGIN_TYPE)
    target = link_target(name)
    if os.path.islink(link) and os.readlink(link) == target:
        return False
    tmp = os.path.join(bin_dir, f"{leftovers.TMP}{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    fsync_dir(bin_dir)
    return True


def current_tree(bin_dir: str) -> str | None:
    """The tree the link names now, or None."""
    try:
        target = os.readlink(os.path.join(bin_dir, PLUGIN_TYPE))
    except OSError:
        return None
    parts = target.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == BUNDLE_DIR and parts[2] == FRONT \
        else None


def prune(bin_dir: str, now: float | None = None) -> tuple[list[str], list[str]]:
    """Remove every tree but the current one that nothing runs from; (removed, in use)."""
    root = os.path.join(bin_dir, BUNDLE_DIR)
    keep = current_tree(bin_dir)
    removed: list[str] = []
    busy: list[str] = []
    if keep is None or not os.path.isdir(root):
        return removed, busy
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry in (keep, _INSTALL_LOCK):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            (removed if _remove_unused(path) else busy).append(entry)
    removed += _prune_legacy(bin_dir, time.time() if now is None else now)
    return removed, busy


def _remove_unused(tree: str) -> bool:
    """Remove ``tree`` unless a plugin holds its ``.in-use`` lock."""
    lock = os.path.join(tree, IN_USE)
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:  # a partial copy, or a removal cut short: nothing can run it
        shutil.rmtree(tree, ignore_errors=True)
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    try:
        os.unlink(lock)  # from here a front that opened the old file sees it stale
        shutil.rmtree(tree, ignore_errors=True)
    finally:
        os.close(fd)
    return True


def _prune_legacy(bin_dir: str, now: float) -> list[str]:
    """``rdma-cni.d/`` once the link has named one of our trees for the grace (the
    caller checked that it does); the time is marked inside it, so a rollback that
    swaps in a new one starts the grace again."""
    root = os.path.join(bin_dir, LEGACY_DIR)
    if not os.path.isdir(root) or os.path.islink(root):
        return []
    mark = os.path.join(root, LEGACY_MARK)
    try:
        since = os.stat(mark).st_mtime
    except FileNotFoundError:
        with open(mark, "wb"):
            pass
        return []
    if now - since < LEGACY_GRACE:
        return []
    shutil.rmtree(root, ignore_errors=True)
    return [f"{LEGACY_DIR}/ (release 0.1.0's layout)"]


def nccl_env_source(tree: str) -> str | None:
    candidates = [os.path.join(tree, rel) for rel in _NCCL_IN_BUNDLE]
    candidates.append(os.path.join(_SOURCE_TREE, "scripts", NCCL_ENV))
    return next((c for c in candidates if os.path.isfile(c)), None)


def install_nccl_env(tree: str, bin_dir: str) -> bool:
    src = nccl_env_source(tree)
    if src is None:
        say(f"no {NCCL_ENV} in {tree}: not installed")
        return False
    dest = os.path.join(bin_dir, NCCL_ENV)
    with open(src, "rb") as f:
        data = f.read()
    if os.path.isfile(dest) and not os.path.islink(dest):
        with open(dest, "rb") as f:
            if f.read() == data:
                return False
    write_atomic(dest, data, 0o755)
    return True
