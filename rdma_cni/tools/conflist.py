"""Editing the runtime's CNI config for ``install`` / ``uninstall``: the pure edits of a
conflist (insert our entry right after the primary, remove it) and their application to
the files of a conf dir (backed up once as ``<file>.rdma-cni.bak``, rewritten
atomically). A single-plugin ``.conf`` is refused, not converted (see ``install``).
"""

from __future__ import annotations

import copy
import json
import os
import stat
import time
from collections.abc import Callable
from typing import Any

from rdma_cni.errors import CniError, ConfigError, IOFailure, TryAgain
from rdma_cni.models.subconfig import (
    CONF_EXTENSIONS,
    PLUGIN_TYPE,
    first_conf_file,
    parse_json_object,
    read_json_object,
)
from rdma_cni.store.atomic import fsync_dir, link_exclusive, unlink_quietly, write_temp
from rdma_cni.tools import conffile, leftovers
from rdma_cni.vocab.attachment import DEFAULT_INSTANCE

BACKUP_SUFFIX = leftovers.BACKUP_SUFFIX
#: how long a rewrite keeps trying while the file changes under it or is held open
EDIT_BUDGET = 5.0
BUSY_PAUSE = 0.01


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
                 what: str = "the conflist", replaces: str | None = None) -> dict[str, Any]:
    """``conflist`` with ``entry`` as its only rdma-cni plugin of ``entry``'s cniConfName,
    where that one already was if after the primary, else after the primary and the
    other RDMA networks' entries (each network is one entry with its own cniConfName,
    and all of them stay). ``replaces``: the cniConfName this network had before (a
    rename): that entry goes too, the new one in its place. Idempotent; pure."""
    plugins = _plugins(conflist, what)
    names = _names(entry, replaces)

    def same(p: object) -> bool:
        return _is_ours(p) and isinstance(p, dict) and _conf_name(p) in names

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


def _names(entry: dict[str, Any], replaces: str | None) -> set[str]:
    return {_conf_name(entry)} | ({replaces} if replaces else set())


def remove_entry(conflist: dict[str, Any], what: str = "the conflist",
                 names: set[str] | None = None) -> dict[str, Any]:
    """``conflist`` without any rdma-cni plugin (of those cniConfNames, when given); pure."""
    plugins = _plugins(conflist, what)
    return {**conflist, "plugins": [p for p in plugins if not _is_ours(p) or (
        names is not None and _conf_name(p) not in names)]}


def json_bytes(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode()


def ensure_entry(conf_dir: str, entry: dict[str, Any], root: str = "/",
                 replaces: str | None = None) -> str:
    """Put ``entry`` into the first CNI config of ``conf_dir`` (``replaces``: see
    :func:`insert_entry`) and take it out of the others (a file that sorts first has
    taken over: the runtime reads that one alone); what was done, or 'unchanged'. A
    symlink's target is edited in place, absolute targets read under ``root`` (see
    conffile)."""
    path = first_conf_file(conf_dir, any_link=True)
    if path is None:
        raise ConfigError(f"failed to chain into {conf_dir}: no CNI config yet (is the "
                          "primary CNI installed?)")
    done = rewrite(path, root, lambda doc: insert_entry(doc, entry, path, replaces),
                   backup=path + BACKUP_SUFFIX)
    said = []
    if done is not None:
        had = any(_is_ours(p) for p in _plugins(done[0], path))
        said.append(f"updated {path}" if had else f"added to {path}")
    names = _names(entry, replaces)
    left = [p for p in conf_files(conf_dir) if p != path and _drop(p, path, root, names)]
    if left:
        said.append(f"removed from {', '.join(left)}")
    return "; ".join(said) or "unchanged"


def conf_files(conf_dir: str) -> list[str]:
    """Every name of ``conf_dir`` the runtime lists as a CNI config (libcni's ConfFiles:
    the extension decides, a leading dot does not), sorted."""
    try:
        names = sorted(os.listdir(conf_dir))
    except OSError:
        return []
    return [os.path.join(conf_dir, n) for n in names if n.endswith(CONF_EXTENSIONS)]


def _drop(path: str, first: str, root: str, names: set[str]) -> bool:
    """Take the entries ``names`` out of ``path`` unless it is ``first`` through a link;
    whether it changed. A file that cannot be edited is left as it is."""
    try:
        if os.path.samefile(conffile.resolve(path, root), conffile.resolve(first, root)):
            return False
        return rewrite(path, root, lambda doc: _without_ours(doc, names)) is not None
    except (CniError, OSError):
        return False


def remove_entries(conf_dir: str, root: str = "/",
                   skipped: Callable[[str], None] | None = None) -> list[str]:
    """Remove our entry from every conflist of ``conf_dir``, then what else of ours is
    there: the backup of each file now without our entry, backups of files gone, and
    temp files a killed install left (conffile; leftovers.py); the files changed. A file
    that cannot be read as a CNI config (a dangling symlink, comments, not JSON) is no
    config the runtime uses either: ``skipped`` hears why, it keeps its backup, and the
    others are done (the first such file stopped the uninstall, every later file's entry
    left behind)."""
    changed = []
    for path in conf_files(conf_dir):
        try:
            done = rewrite(path, root, _without_ours)
        except ConfigError as exc:
            if skipped is not None:
                skipped(exc.msg)
            continue
        if done is not None:
            changed.append(path)
        unlink_quietly(path + BACKUP_SUFFIX)  # the file is as it would be without us
    leftovers.orphan_backups(conf_dir)
    leftovers.sweep(conf_dir)
    return changed


def _without_ours(doc: dict[str, Any], names: set[str] | None = None) -> dict[str, Any]:
    if not isinstance(doc.get("plugins"), list):
        return doc
    return remove_entry(doc, names=names)


def rewrite(path: str, root: str, change: Callable[[dict[str, Any]], dict[str, Any]],
            backup: str | None = None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Apply ``change`` to the JSON object of the conf dir entry ``path`` (a symlink: its
    target, in place), on condition that nobody wrote the file meanwhile (re-read and
    merged again until then, for at most EDIT_BUDGET s: conffile); ``backup``, when
    missing, is made of the bytes the change was applied to. (old, new), or None when
    ``change`` left the document as it was."""
    deadline = time.monotonic() + EDIT_BUDGET
    while True:
        try:
            outcome, done = _rewrite_once(path, root, change, backup)
        except conffile.Changed:
            outcome, done = conffile.Outcome.CHANGED, None
        if outcome is conffile.Outcome.DONE:
            return done
        if time.monotonic() > deadline:
            why = "another process kept it open for writing" if outcome is conffile.Outcome.BUSY \
                else "it kept changing"
            raise TryAgain(f"failed to update {path}: {why} for {EDIT_BUDGET:g} s")
        if outcome is conffile.Outcome.BUSY:
            time.sleep(BUSY_PAUSE)


def _rewrite_once(path: str, root: str, change: Callable[[dict[str, Any]], dict[str, Any]],
                  backup: str | None) -> tuple[conffile.Outcome, Any]:
    target = conffile.resolve(path, root)
    leftovers.recover(target)  # what a killed run left for it (leftovers.py)
    snap = conffile.read(target, path)
    try:
        try:
            doc = parse_json_object(snap.data, path)
        except ConfigError:
            if conffile.being_written(snap):
                return conffile.Outcome.BUSY, None  # read halfway through an in-place write
            raise
        new = change(doc)
        if new == doc:
            return conffile.Outcome.DONE, None
        made = _make_backup(backup, snap) if backup else None
        outcome = conffile.Outcome.CHANGED
        try:
            outcome = _replace(snap, new, path)
        finally:
            if made and outcome is not conffile.Outcome.DONE:
                unlink_quietly(made)  # made of a version that was not edited after all
        return outcome, (doc, new)
    finally:
        snap.close()


def _replace(snap: conffile.Snapshot, new: dict[str, Any], path: str) -> conffile.Outcome:
    try:
        return conffile.replace(snap, json_bytes(new))
    except CniError as e:
        if snap.path == path:
            raise
        raise IOFailure(f"{e.msg} (the target of the symlink {path}; not replacing the "
                        "link, the primary writes its target)") from None


def _make_backup(backup: str, snap: conffile.Snapshot) -> str | None:
    """``backup`` made of the bytes read (temp file, fsync, link: never partial, never
    replacing one that exists); its path when made here."""
    if os.path.lexists(backup):
        return None
    directory, name = os.path.split(backup)
    directory = directory or "."
    tmp = write_temp(directory, name, snap.data, mode=stat.S_IMODE(snap.st.st_mode),
                     prefix=leftovers.TMP)
    try:
        if not link_exclusive(directory, name, tmp):
            return None
    finally:
        unlink_quietly(tmp)
    fsync_dir(directory)
    return backup


def _same_json(path: str, doc: dict[str, Any]) -> bool:
    try:
        return read_json_object(path) == doc
    except ConfigError:
        return False
