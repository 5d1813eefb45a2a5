"""``rdma-cni install`` / ``rdma-cni uninstall``: put the plugin on a node.

install: check the host's kernel (the plugin brings its own C library: kernel.py), copy
the host tree (the CNI-only plugin, ``--host-tree``, default ``<bundle>-host``) to
``<bin>/rdma-cni.versions/<version>-<digest>/`` beside any older one, switch the one link
``<bin>/rdma-cni`` to its front, put ``nccl_env.sh`` next to it, prune the trees nothing
runs from any more (bundle.py), then insert or update our entry right after the primary
in the first CNI config file of the conf dir (lexical order, dot-files too, as libcni
lists it for containerd and CRI-O), and out of the others. The file is backed up once
as ``<file>.rdma-cni.bak`` and rewritten atomically, only if unchanged since it was
read, and a symlink's target in place (``conflist.py``, ``conffile.py``); what a kill
leaves is put right by the next run (``leftovers.py``). ``--watch`` keeps
re-applying the entry (the primary's agent may rewrite its file at restart): it
wakes on inotify events of the conf dir (within about 50 ms; a replaced dir is
followed) and every ``--interval`` seconds as a backstop, re-reads the first file
and inserts our entry into what the primary wrote, keeping every change of the
primary's (``confwatch.py``).

A single-plugin ``.conf`` file is refused, not converted: converting would leave
two files fighting over the first place once the primary rewrites its ``.conf``.

The mode is ``--mode``, else the node label ``vke.node.rdma.mode`` (node from
``NODE_NAME``, read with the ``kubernetes`` client), else ``mode`` of ``--config``.
``--write-config`` also records what the entry was rendered from, and ``--watch`` compares
the config file and the label with that record (``configrecord.py``): a change needs the
DaemonSet's pods restarted, and the record says when one is due.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rdma_cni.cliargs import say, seconds
from rdma_cni.errors import CniError
from rdma_cni.models.subconfig import DEFAULT_CONF_DIR, PLUGIN_TYPE, read_json_object
from rdma_cni.store.run import configrecord
from rdma_cni.tools import bundle as layout
from rdma_cni.tools import kernel, leftovers
from rdma_cni.tools.bundle import BUNDLE_DIR, LEGACY_DIR, NCCL_ENV
from rdma_cni.tools.conflist import ensure_entry, json_bytes, remove_entries
from rdma_cni.tools.installentry import (
    MODE_LABEL,
    make_entry,
    node_settings,
    previous_name,
    resolve_mode,
    valid_entry,
)
from rdma_cni.tools.installfiles import staged, write_atomic
from rdma_cni.vocab.modes import MODES


def _dirs(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--cni-bin-dir", default="/opt/cni/bin",
                   help="the CNI plugin dir (default /opt/cni/bin)")
    p.add_argument("--cni-conf-dir", default=DEFAULT_CONF_DIR,
                   help=f"the CNI config dir (default {DEFAULT_CONF_DIR})")
    return p


def _host_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host-root", help="the host's / as mounted here: where an absolute "
                   "symlink of the conflist leads (default: --cni-bin-dir without its "
                   "/opt/cni/bin suffix, else /)")


def _uninstall_parser() -> argparse.ArgumentParser:
    from rdma_cni.cliargs import parser

    p = _dirs(parser("rdma-cni uninstall", "Remove the rdma-cni entries from every "
                     "conflist of the conf dir, and the plugin from the bin dir.",
                     config=False))
    _host_root(p)
    return p


def _parser(prog: str) -> argparse.ArgumentParser:
    from rdma_cni.cliargs import parser

    p = _dirs(parser(prog, "Copy the bundle into the CNI bin dir and insert the rdma-cni "
                     "entry after the primary in the first CNI config of the conf dir.",
                     config_help="JSON object shaped like the plugin's conflist entry: the "
                     "entry to install (its mode is used when there is no --mode and no "
                     f"{MODE_LABEL} node label)"))
    p.add_argument("--bundle", help="the built one-dir bundle (default: this executable's)")
    p.add_argument("--host-tree", help="the host plugin's tree to install (default: the "
                   "bundle's path with -host appended, e.g. /opt/rdma-cni-host)")
    p.add_argument("--mode", choices=MODES, help="the node's RDMA mode (default: the node "
                   f"label {MODE_LABEL}, else the config's mode)")
    p.add_argument("--watch", action="store_true",
                   help="keep re-applying the entry: on every change of the conf dir "
                        "(inotify) and every --interval seconds")
    p.add_argument("--interval", type=seconds(0.1, 86400), default=30.0,
                   help="watch backstop poll period in seconds (default 30)")
    p.add_argument("--label-interval", type=seconds(1, 86400),
                   default=configrecord.LABEL_EVERY,
                   metavar="SECONDS", help="with --watch and --write-config: seconds between "
                   f"two reads of the node label {MODE_LABEL} to compare (one API request "
                   f"each; default {configrecord.LABEL_EVERY:g})")
    _host_root(p)
    p.add_argument("--kubelet-dir", metavar="DIR",
                   help="the kubelet's root dir (--root-dir): the entry's kubelet paths "
                        "(podResourcesSocket, checkpointFile, devicePluginDir) under it, where "
                        "the config names none (default: the config's, else /var/lib/kubelet)")
    p.add_argument("--node-ip", metavar="IP", action="append", default=[],
                   help="the node's address (the kubelet's InternalIP, status.hostIP): written "
                        "to the entry as nodeIPs; the NIC that holds it is never given to pods "
                        "(repeatable; an empty value is ignored)")
    p.add_argument("--write-config", metavar="FILE",
                   help="also write the effective entry (mode resolved) here, for the "
                        "agent, device plugin and exporter, and beside it what it was "
                        "rendered from (config-source.json: --watch then says when the "
                        "config file or the node label changed)")
    return p


def host_root_of(args: argparse.Namespace) -> str:
    if getattr(args, "host_root", None):
        return str(args.host_root)
    bin_dir = os.path.abspath(args.cni_bin_dir)
    suffix = "/opt/cni/bin"
    return bin_dir[: -len(suffix)] or "/" if bin_dir.endswith(suffix) else "/"


def install(args: argparse.Namespace, label: Callable[[], str | None]) -> dict[str, Any]:
    config = read_json_object(args.config) if args.config else {}
    node_label = None if args.mode else label()
    entry = make_entry(config, resolve_mode(args.mode, config, lambda: node_label))
    entry = valid_entry(node_settings(entry, args.kubelet_dir, args.node_ip))
    tree = args.host_tree or layout.default_host_tree(args.bundle or layout.default_bundle())
    say(kernel.check(kernel.release()))
    os.makedirs(args.cni_bin_dir, exist_ok=True)
    try:
        with staged(args.cni_bin_dir, f".{PLUGIN_TYPE}",
                    f"install {tree} in {args.cni_bin_dir}"), \
                layout.install_lock(args.cni_bin_dir):
            _lay_out(tree, args.cni_bin_dir)
    except BaseException:
        layout.forget_empty(args.cni_bin_dir)  # a first install that failed leaves nothing
        raise
    with layout.bin_lock(args.cni_bin_dir):  # every writer of the conf dir (leftovers.py)
        outcome = ensure_entry(args.cni_conf_dir, entry, host_root_of(args),
                               previous_name(args.write_config))
    say(f"conflist entry (mode {entry['mode']}): {outcome}")
    if args.write_config:
        os.makedirs(os.path.dirname(os.path.abspath(args.write_config)), exist_ok=True)
        write_atomic(args.write_config, json_bytes(entry))
        configrecord.write(configrecord.path_for(args.write_config), configrecord.started(
            args.config, node_label, not args.mode, entry["mode"],
            args.interval if args.watch else None, time.time()))
    return entry


def _lay_out(tree: str, bin_dir: str) -> None:
    name, copied = layout.install_tree(tree, bin_dir)
    if copied:
        say(f"copied {tree} to {os.path.join(bin_dir, BUNDLE_DIR, name)}")
    if layout.switch_link(bin_dir, name):
        say(f"{os.path.join(bin_dir, layout.PLUGIN_TYPE)} -> {layout.link_target(name)}")
    layout.install_nccl_env(tree, bin_dir)
    _prune(bin_dir)


def _prune(bin_dir: str) -> None:
    removed, busy = layout.prune(bin_dir)
    if removed:
        say(f"removed old trees: {', '.join(removed)}")
    if busy:
        say(f"kept old trees still in use: {', '.join(busy)} (pruned later)")


def prune_loop(bin_dir: str, interval: float, stop: threading.Event) -> None:
    """``--watch``'s pruning of old trees once the plugins running them have ended."""
    while not stop.wait(max(interval, 1.0)):
        try:
            with layout.install_lock(bin_dir):
                _prune(bin_dir)
        except OSError as e:
            say(f"failed to prune old trees in {bin_dir}: {e.strerror or e}")


def watch(conf_dir: str, entry: dict[str, Any], interval: float,
          rounds: int | None = None, stop: threading.Event | None = None,
          root: str = "/", bin_dir: str | None = None,
          checker: configrecord.Checker | None = None, tree: str | None = None) -> None:
    """``--watch``: re-apply ``entry`` on every change of ``conf_dir`` (see confwatch),
    prune old trees of ``bin_dir`` and compare the configuration record (``checker``)
    every ``interval``. ``tree``: the tree this install laid out; once the link names
    another (a newer install: a rollout's pods overlap), this watch re-applies nothing
    (two watches rewrote each other's entry, the other version's plugin running it)."""
    from rdma_cni.tools.confwatch import watch_entry

    ended = threading.Event()
    if bin_dir is not None and rounds is None:
        threading.Thread(target=prune_loop, args=(bin_dir, interval, ended),
                         name="prune", daemon=True).start()
    if checker is not None and rounds is None:
        threading.Thread(target=checker.loop, args=(interval, ended),
                         name="config-check", daemon=True).start()
    installed = None if bin_dir is None else \
        (lambda: layout.current_tree(bin_dir) == tree) if tree else \
        (lambda: os.path.lexists(os.path.join(bin_dir, PLUGIN_TYPE)))
    guard = None if bin_dir is None else (lambda: layout.bin_lock(bin_dir))
    try:
        watch_entry(conf_dir, entry, interval, rounds, stop, root, installed, guard)
    finally:
        ended.set()


def uninstall(args: argparse.Namespace) -> None:
    """The plugin's link goes first: a ``--watch`` still running (its DaemonSet being
    deleted) re-applies the entry only while the plugin is installed, so it cannot put
    the entry back once this took it out; the bin dir's lock (:func:`bundle.bin_lock`),
    which a re-apply holds from its check to its write, orders the two."""
    bin_dir = args.cni_bin_dir
    removed = []
    with layout.bin_lock(bin_dir):  # a watch's re-apply is done, or finds the plugin gone
        path = os.path.join(bin_dir, PLUGIN_TYPE)
        if os.path.lexists(path):
            os.unlink(path)
            removed.append(PLUGIN_TYPE)
        changed = remove_entries(args.cni_conf_dir, host_root_of(args),
                                 lambda why: say(f"left alone: {why}", "uninstall"))
    for path in changed:
        say(f"removed the entry from {path}", "uninstall")
    removed += leftovers.sweep(bin_dir)  # a killed install's temp link and files
    for name in (NCCL_ENV,):
        path = os.path.join(bin_dir, name)
        if os.path.lexists(path):
            os.unlink(path)
            removed.append(name)
    for tree_dir in (BUNDLE_DIR, LEGACY_DIR):
        if os.path.lexists(os.path.join(bin_dir, tree_dir)):
            shutil.rmtree(os.path.join(bin_dir, tree_dir), ignore_errors=True)
            removed.append(tree_dir + "/")
    if removed:
        say(f"removed {', '.join(removed)} from {bin_dir}", "uninstall")
    if not changed and not removed:
        say(f"nothing to remove: no {PLUGIN_TYPE} entry in {args.cni_conf_dir} and no "
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
            checker = configrecord.Checker(configrecord.path_for(args.write_config), label,
                                           label_every=args.label_interval) \
                if args.write_config else None
            watch(args.cni_conf_dir, entry, args.interval, root=host_root_of(args),
                  bin_dir=args.cni_bin_dir, checker=checker,
                  tree=layout.current_tree(args.cni_bin_dir))
    except CniError as e:
        say(f"error: {e.msg}", parser.prog.split()[-1])
        return 1
    except OSError as e:
        say(f"error: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""),
             parser.prog.split()[-1])
        return 1
    return 0

