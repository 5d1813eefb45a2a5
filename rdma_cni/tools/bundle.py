"""Laying out the bundle in the CNI bin dir for ``install``: the one-dir bundle copied to
``<bin>/rdma-cni.d/`` (swapped in atomically with ``renameat2(RENAME_EXCHANGE)``),
``<bin>/rdma-cni`` a relative symlink to its native front ``rdma-cni-front`` (or, in a
bundle without one, to the bundle's own executable; temp + rename), and ``nccl_env.sh``
next to it."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import shutil
import sys

from rdma_cni.errors import ConfigError
from rdma_cni.models.subconfig import PLUGIN_TYPE
from rdma_cni.tools.installfiles import fsync_dir, say, write_atomic

BUNDLE_DIR = "rdma-cni.d"
#: the native front in the bundle: forwards to `rdma-cni serve`, else execs the bundle
FRONT = "rdma-cni-front"
NCCL_ENV = "nccl_env.sh"
_NCCL_IN_BUNDLE = ("_internal/rdma_cni/data/nccl_env.sh", "rdma_cni/data/nccl_env.sh")
#: the source checkout this module runs from when not frozen (rdma_cni/tools/ is two below)
_SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_bundle() -> str:
    if getattr(sys, "frozen", False):
        return os.path.dirname(os.path.realpath(sys.executable))
    return os.path.join(_SOURCE_TREE, "dist", "rdma-cni")


def tree_digest(root: str) -> str:
    """A digest of a directory tree (names, link targets, file contents); '' if absent."""
    if not os.path.isdir(root):
        return ""
    h = hashlib.sha256()
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files + [x for x in dirs if os.path.islink(os.path.join(d, x))]):
            p = os.path.join(d, name)
            h.update(os.path.relpath(p, root).encode() + b"\0")
            if os.path.islink(p):
                h.update(b"L" + os.readlink(p).encode())
            else:
                with open(p, "rb") as f:
                    h.update(b"F%o" % (os.stat(p).st_mode & 0o111))
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
    return h.hexdigest()


def _exchange(a: str, b: str) -> None:
    """Atomically swap two paths (renameat2 RENAME_EXCHANGE)."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 unavailable")
    if fn(-100, os.fsencode(a), -100, os.fsencode(b), 2) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a)


def install_bundle(bundle: str, bin_dir: str) -> bool:
    """Copy ``bundle`` to ``<bin_dir>/rdma-cni.d``; False when already identical."""
    if not os.access(os.path.join(bundle, PLUGIN_TYPE), os.X_OK):
        raise ConfigError(f"failed to install from {bundle}: no executable {PLUGIN_TYPE} "
                          "there (run ./scripts/build.sh or pass --bundle)")
    dest = os.path.join(bin_dir, BUNDLE_DIR)
    if os.path.realpath(bundle) == os.path.realpath(dest) or \
            tree_digest(bundle) == tree_digest(dest):
        return False
    tmp = os.path.join(bin_dir, f".{BUNDLE_DIR}.new-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(bundle, tmp, symlinks=True)
    if os.path.isdir(dest) and not os.path.islink(dest):
        try:
            _exchange(tmp, dest)
        except OSError:
            old = tmp + ".old"
            os.rename(dest, old)
            os.rename(tmp, dest)
            tmp = old
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        if os.path.lexists(dest):
            os.unlink(dest)
        os.rename(tmp, dest)
    fsync_dir(bin_dir)
    return True


def install_link(bin_dir: str) -> bool:
    link = os.path.join(bin_dir, PLUGIN_TYPE)
    front = os.path.join(bin_dir, BUNDLE_DIR, FRONT)
    target = f"{BUNDLE_DIR}/{FRONT if os.access(front, os.X_OK) else PLUGIN_TYPE}"
    if os.path.islink(link) and os.readlink(link) == target:
        return False
    tmp = os.path.join(bin_dir, f".{PLUGIN_TYPE}.tmp-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    fsync_dir(bin_dir)
    return True


def nccl_env_source(bundle: str) -> str | None:
    candidates = [os.path.join(bundle, rel) for rel in _NCCL_IN_BUNDLE]
    candidates.append(os.path.join(_SOURCE_TREE, "scripts", NCCL_ENV))
    return next((c for c in candidates if os.path.isfile(c)), None)


def install_nccl_env(bundle: str, bin_dir: str) -> bool:
    src = nccl_env_source(bundle)
    if src is None:
        say(f"no {NCCL_ENV} in {bundle}: not installed")
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

