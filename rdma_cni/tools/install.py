"""``rdma-cni install`` / ``rdma-cni uninstall``: put the plugin on a node.

install: copy the one-dir bundle to ``<bin>/rdma-cni.d/`` (swapped in atomically
with ``renameat2(RENAME_EXCHANGE)``), point ``<bin>/rdma-cni`` at its native front
``rdma-cni-front`` (or, in a bundle without one, at the bundle's own executable; a
relative symlink, temp + rename), put ``nccl_env.sh`` next to it, then insert
or update our entry right after the primary in the first CNI config file of the
conf dir (lexical order, as libcni and containerd pick it). The file is backed up
once as ``<file>.rdma-cni.bak`` and rewritten atomically. ``--watch`` keeps
re-applying the entry (the primary's agent may rewrite its file at restart): it
wakes on inotify events of the conf dir (within about 50 ms; a replaced dir is
followed) and every ``--interval`` seconds as a backstop, re-reads the first file
and inserts our entry into what the primary wrote, keeping every change of the
primary's (``confwatch.py``).

A single-plugin ``.conf`` file is refused, not converted: converting would leave
two files fighting over the first place once the primary rewrites its ``.conf``.

The mode is ``--mode``, else the node label ``vke.node.rdma.mode`` (node from
``NODE_NAME``, read with the ``kubernetes`` client), else ``mode`` of ``--config``.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import errno
import hashlib
import json
import os
import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from rdma_cni.cni.attachment import DEFAULT_INSTANCE
from rdma_cni.errors import CniError, ConfigError, shown
from rdma_cni.models.subconfig import (
    DEFAULT_CONF_DIR,
    PLUGIN_TYPE,
    first_conf_file,
    read_json_object,
)
from rdma_cni.tools import glibc

MODES = ("shared", "shared-multi", "shared-host", "exclusive")
MODE_LABEL = "vke.node.rdma.mode"
CAPABILITY = "io.kubernetes.cri.pod-annotations"
BACKUP_SUFFIX = ".rdma-cni.bak"
BUNDLE_DIR = "rdma-cni.d"
#: the native front in the bundle: forwards to `rdma-cni serve`, else execs the bundle
FRONT = "rdma-cni-front"
NCCL_ENV = "nccl_env.sh"
_NCCL_IN_BUNDLE = ("_internal/rdma_cni/data/nccl_env.sh", "rdma_cni/data/nccl_env.sh")


def _say(msg: str, cmd: str = "install") -> None:
    print(f"rdma-cni {cmd}: {msg}", file=sys.stderr, flush=True)


# -- pure conflist editing ---------------------------------------------------
def _is_ours(p: object) -> bool:
    return isinstance(p, dict) and p.get("type") == PLUGIN_TYPE


def _plugins(conflist: dict[str, Any], what: str) -> list[Any]:
    plugins = conflist.get("plugins")
    if not isinstance(plugins, list):
        raise ConfigError(f"failed to edit {what}: not a conflist (no \"plugins\" list); a "
                          "single-plugin .conf is not converted, make the primary write a "
                          ".conflist")
    return plugins


def _conf_name(p: dict[str, Any]) -> str:
    name = p.get("cniConfName", DEFAULT_INSTANCE)
    return name if isinstance(name, str) else DEFAULT_INSTANCE


def insert_entry(conflist: dict[str, Any], entry: dict[str, Any],
                 what: str = "the conflist") -> dict[str, Any]:
    """``conflist`` with ``entry`` as its only rdma-cni plugin of ``entry``'s cniConfName,
    where that one already was if after the primary, else after the primary and the
    other RDMA networks' entries (each network is one entry with its own cniConfName,
    and all of them stay). Idempotent; pure."""
    plugins = _plugins(conflist, what)
    name = _conf_name(entry)

    def same(p: object) -> bool:
        return _is_ours(p) and isinstance(p, dict) and _conf_name(p) == name

    others = [p for p in plugins if not same(p)]
    if not any(not _is_ours(p) for p in others):
        raise ConfigError(f"failed to edit {what}: no primary plugin to chain after")
    first = next((i for i, p in enumerate(plugins) if same(p)), None)
    if first is not None and first > 0:
        index = sum(1 for p in plugins[:first] if not same(p))
    else:
        index = 1
        while index < len(others) and _is_ours(others[index]):
            index += 1
    new = [*others[:index], copy.deepcopy(entry), *others[index:]]
    return {**conflist, "plugins": new}


def remove_entry(conflist: dict[str, Any], what: str = "the conflist") -> dict[str, Any]:
    """``conflist`` without any rdma-cni plugin; pure."""
    plugins = _plugins(conflist, what)
    return {**conflist, "plugins": [p for p in plugins if not _is_ours(p)]}


def make_entry(config: dict[str, Any] | None, mode: str) -> dict[str, Any]:
    """Our conflist entry: the config object with type, mode and the annotation
    capability set (``name``/``cniVersion`` belong to the list and are dropped)."""
    if mode not in MODES:
        raise ConfigError(f"invalid mode {shown(mode)}: expected one of {', '.join(MODES)}")
    entry = {k: v for k, v in (config or {}).items() if k not in ("name", "cniVersion")}
    caps = entry.get("capabilities")
    caps = dict(caps) if isinstance(caps, dict) else {}
    caps[CAPABILITY] = True
    return {"type": PLUGIN_TYPE, **entry, "mode": mode, "capabilities": caps}


# -- files ---------------------------------------------------------------------
def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``path`` through a hidden temp file (no CNI extension) and a rename."""
    from rdma_cni.store import files

    d, base = os.path.split(path)
    files.write_atomic(d or ".", base, data, mode=mode, suffix=".part", sync_dir=True)


def _dump(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode()


def _file_mode(path: str) -> int:
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o644


def ensure_entry(conf_dir: str, entry: dict[str, Any]) -> str:
    """Put ``entry`` into the first CNI config of ``conf_dir``; 'added', 'updated' or
    'unchanged'."""
    path = first_conf_file(conf_dir)
    if path is None:
        raise ConfigError(f"failed to chain into {conf_dir}: no CNI config yet (is the "
                          "primary CNI installed?)")
    doc = read_json_object(path)
    new = insert_entry(doc, entry, path)
    if new == doc:
        return "unchanged"
    had = any(_is_ours(p) for p in _plugins(doc, path))
    backup = path + BACKUP_SUFFIX
    if not os.path.exists(backup):
        shutil.copy2(path, backup)
    write_atomic(path, _dump(new), _file_mode(path))
    return f"updated {path}" if had else f"added to {path}"


def remove_entries(conf_dir: str) -> list[str]:
    """Remove our entry from every conflist of ``conf_dir``; the files changed."""
    changed = []
    names = sorted(os.listdir(conf_dir)) if os.path.isdir(conf_dir) else []
    for name in names:
        path = os.path.join(conf_dir, name)
        if name.startswith(".") or not name.endswith((".conf", ".conflist", ".json")):
            continue
        doc = read_json_object(path)
        if not isinstance(doc.get("plugins"), list) or not any(map(_is_ours, doc["plugins"])):
            continue
        new = remove_entry(doc, path)
        write_atomic(path, _dump(new), _file_mode(path))
        changed.append(path)
        backup = path + BACKUP_SUFFIX
        if os.path.exists(backup) and _same_json(backup, new):
            os.unlink(backup)
    return changed


def _same_json(path: str, doc: dict[str, Any]) -> bool:
    try:
        return read_json_object(path) == doc
    except ConfigError:
        return False


# -- binary --------------------------------------------------------------------
def default_bundle() -> str:
    if getattr(sys, "frozen", False):
        return os.path.dirname(os.path.realpath(sys.executable))
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "dist", "rdma-cni")


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
    _fsync_dir(bin_dir)
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
    _fsync_dir(bin_dir)
    return True


def nccl_env_source(bundle: str) -> str | None:
    candidates = [os.path.join(bundle, rel) for rel in _NCCL_IN_BUNDLE]
    candidates.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                   "scripts", NCCL_ENV))
    return next((c for c in candidates if os.path.isfile(c)), None)


def install_nccl_env(bundle: str, bin_dir: str) -> bool:
    src = nccl_env_source(bundle)
    if src is None:
        _say(f"no {NCCL_ENV} in {bundle}: not installed")
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


# -- command line ----------------------------------------------------------------
def resolve_mode(flag: str | None, config: dict[str, Any],
                 label: Callable[[], str | None]) -> str:
    """``--mode``, else the node label, else the config's ``mode``."""
    for source, value in (("--mode", flag), (MODE_LABEL, None if flag else label()),
                          ("config", config.get("mode"))):
        if value:
            if value not in MODES:
                raise ConfigError(f"invalid mode {shown(value)} from {source}: expected one of "
                                  f"{', '.join(MODES)}")
            return str(value)
    raise ConfigError(f"failed to decide the RDMA mode: no --mode, no node label {MODE_LABEL} "
                      "(NODE_NAME) and no mode in the config")


def _dirs(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--cni-bin-dir", default="/opt/cni/bin",
                   help="the CNI plugin dir (default /opt/cni/bin)")
    p.add_argument("--cni-conf-dir", default=DEFAULT_CONF_DIR,
                   help=f"the CNI config dir (default {DEFAULT_CONF_DIR})")
    return p


def _uninstall_parser() -> argparse.ArgumentParser:
    from rdma_cni.cliargs import parser

    return _dirs(parser("rdma-cni uninstall", "Remove the rdma-cni entries from every "
                        "conflist of the conf dir, and the plugin from the bin dir.",
                        config=False))


def _parser(prog: str) -> argparse.ArgumentParser:
    from rdma_cni.cliargs import parser

    p = _dirs(parser(prog, "Copy the bundle into the CNI bin dir and insert the rdma-cni "
                     "entry after the primary in the first CNI config of the conf dir.",
                     config_help="JSON object shaped like the plugin's conflist entry: the "
                     "entry to install (its mode is used when there is no --mode and no "
                     f"{MODE_LABEL} node label)"))
    p.add_argument("--bundle", help="the built one-dir bundle (default: this executable's)")
    p.add_argument("--mode", choices=MODES, help="the node's RDMA mode (default: the node "
                   f"label {MODE_LABEL}, else the config's mode)")
    p.add_argument("--watch", action="store_true",
                   help="keep re-applying the entry: on every change of the conf dir "
                        "(inotify) and every --interval seconds")
    p.add_argument("--interval", type=float, default=30.0,
                   help="watch backstop poll period in seconds (default 30)")
    p.add_argument("--host-root", help="the host's / as mounted here, to check its glibc "
                   "(default: --cni-bin-dir without its /opt/cni/bin suffix, else /)")
    p.add_argument("--write-config", metavar="FILE",
                   help="also write the effective entry (mode resolved) here, for the "
                        "agent, device plugin and exporter")
    return p


def host_root_of(args: argparse.Namespace) -> str:
    if args.host_root:
        return str(args.host_root)
    bin_dir = os.path.abspath(args.cni_bin_dir)
    suffix = "/opt/cni/bin"
    return bin_dir[: -len(suffix)] or "/" if bin_dir.endswith(suffix) else "/"


def install(args: argparse.Namespace, label: Callable[[], str | None]) -> dict[str, Any]:
    config = read_json_object(args.config) if args.config else {}
    entry = make_entry(config, resolve_mode(args.mode, config, label))
    bundle = args.bundle or default_bundle()
    _say(glibc.check(bundle, host_root_of(args)))
    os.makedirs(args.cni_bin_dir, exist_ok=True)
    if install_bundle(bundle, args.cni_bin_dir):
        _say(f"copied {bundle} to {os.path.join(args.cni_bin_dir, BUNDLE_DIR)}")
    install_link(args.cni_bin_dir)
    install_nccl_env(bundle, args.cni_bin_dir)
    _say(f"conflist entry (mode {entry['mode']}): {ensure_entry(args.cni_conf_dir, entry)}")
    if args.write_config:
        os.makedirs(os.path.dirname(os.path.abspath(args.write_config)), exist_ok=True)
        write_atomic(args.write_config, _dump(entry))
    return entry


def watch(conf_dir: str, entry: dict[str, Any], interval: float,
          rounds: int | None = None, stop: threading.Event | None = None) -> None:
    """``--watch``: re-apply ``entry`` on every change of ``conf_dir`` (see confwatch)."""
    from rdma_cni.tools.confwatch import watch_entry

    watch_entry(conf_dir, entry, interval, rounds, stop)


def uninstall(args: argparse.Namespace) -> None:
    changed = remove_entries(args.cni_conf_dir)
    for path in changed:
        _say(f"removed the entry from {path}", "uninstall")
    bin_dir = args.cni_bin_dir
    removed = []
    for name in (PLUGIN_TYPE, NCCL_ENV):
        path = os.path.join(bin_dir, name)
        if os.path.lexists(path):
            os.unlink(path)
            removed.append(name)
    if os.path.lexists(os.path.join(bin_dir, BUNDLE_DIR)):
        shutil.rmtree(os.path.join(bin_dir, BUNDLE_DIR), ignore_errors=True)
        removed.append(BUNDLE_DIR + "/")
    if removed:
        _say(f"removed {', '.join(removed)} from {bin_dir}", "uninstall")
    if not changed and not removed:
        _say(f"nothing to remove: no {PLUGIN_TYPE} entry in {args.cni_conf_dir} and no "
             f"{PLUGIN_TYPE} files in {bin_dir}", "uninstall")


def main(argv: Sequence[str] | None = None,
         label: Callable[[], str | None] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    removing = bool(argv) and argv[0] == "uninstall"
    parser = _uninstall_parser() if removing else _parser("rdma-cni install")
    args = parser.parse_args(argv[1:] if removing else argv)
    if label is None:
        from rdma_cni.models.subconfig import node_label

        def label() -> str | None:
            return node_label(MODE_LABEL)
    try:
        if removing:
            uninstall(args)
            return 0
        entry = install(args, label)
        if args.watch:
            watch(args.cni_conf_dir, entry, args.interval)
    except CniError as e:
        _say(f"error: {e.msg}", parser.prog.split()[-1])
        return 1
    except OSError as e:
        _say(f"error: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""),
             parser.prog.split()[-1])
        return 1
    return 0
