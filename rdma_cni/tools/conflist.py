"""Editing the runtime's CNI config for ``install`` / ``uninstall``: the pure edits of a
conflist (insert our entry right after the primary, remove it) and their application to
the files of a conf dir (backed up once as ``<file>.rdma-cni.bak``, rewritten
atomically). A single-plugin ``.conf`` is refused, not converted (see ``install``).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from typing import Any

from rdma_cni.cni.attachment import DEFAULT_INSTANCE
from rdma_cni.errors import ConfigError
from rdma_cni.models.subconfig import PLUGIN_TYPE, first_conf_file, read_json_object
from rdma_cni.tools.installfiles import write_atomic

BACKUP_SUFFIX = ".rdma-cni.bak"


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


def json_bytes(doc: dict[str, Any]) -> bytes:
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
    write_atomic(path, json_bytes(new), _file_mode(path))
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
        write_atomic(path, json_bytes(new), _file_mode(path))
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

