"""The conflist entry ``install`` writes: the config object made ours (type, mode, the
annotation capability), the node's settings added (the kubelet's paths, the node's own
addresses), checked as ADD checks it, and the mode it is for."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rdma_cni import defaults
from rdma_cni.errors import ConfigError
from rdma_cni.models.subconfig import PLUGIN_TYPE, parse_json_object
from rdma_cni.store.run import runfile
from rdma_cni.vocab.modes import Mode

MODE_LABEL = defaults.MODE_LABEL
CAPABILITY = "io.kubernetes.cri.pod-annotations"


def make_entry(config: dict[str, Any] | None, mode: str) -> dict[str, Any]:
    """Our conflist entry: the config object with type, mode and the annotation
    capability set (``name``/``cniVersion`` belong to the list and are dropped). A
    config naming another ``type`` does not keep it: an entry of
    another type would not be ours to replace or remove, and the runtime would look for
    a plugin of that name."""
    checked = Mode.of(mode).value
    entry = {k: v for k, v in (config or {}).items() if k not in ("name", "cniVersion")}
    caps = entry.get("capabilities")
    caps = dict(caps) if isinstance(caps, dict) else {}
    caps[CAPABILITY] = True
    return {**entry, "type": PLUGIN_TYPE, "mode": checked, "capabilities": caps}


def valid_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` if ADD takes it (else :class:`ConfigError`): an entry ADD refuses would
    fail every pod's ADD on the node, those without RDMA interfaces included."""
    from rdma_cni.models.netconf import load_netconf

    load_netconf({**entry, "name": "rdma-cni-install", "cniVersion": "1.1.0"})
    return entry


def node_settings(entry: dict[str, Any], kubelet_dir: str | None,
                  node_ips: Sequence[str]) -> dict[str, Any]:
    """The entry with the kubelet's paths under ``kubelet_dir`` (those the config does not
    name itself) and ``nodeIPs`` (the node's own addresses: the NIC holding one stays
    with the node); the flags of the DaemonSet, which knows both."""
    out = dict(entry)
    if kubelet_dir:
        root = kubelet_dir.rstrip("/") or "/"
        given = out.get("kubelet")
        named = given if isinstance(given, dict) else {}
        out["kubelet"] = {**defaults.kubelet_paths(root), **named}
    ips = [ip for ip in node_ips if ip]
    if ips:
        out["nodeIPs"] = list(dict.fromkeys(ips))
    return out


def resolve_mode(flag: str | None, config: dict[str, Any],
                 label: Callable[[], str | None]) -> str:
    """``--mode``, else the node label, else the config's ``mode``."""
    for source, value in (("--mode", flag), (MODE_LABEL, None if flag else label()),
                          ("config", config.get("mode"))):
        if value:
            return Mode.of(value, source).value
    raise ConfigError(f"failed to decide the RDMA mode: no --mode, no node label {MODE_LABEL} "
                      "(NODE_NAME) and no mode in the config")


def previous_name(written: str | None) -> str | None:
    """The cniConfName of the entry an earlier install wrote to ``written`` (its
    ``--write-config``: the DaemonSet's install keeps one), None without one. Entries of
    our type are told apart by cniConfName (one per RDMA network, each installed with
    its own record), so a network renamed by its install replaces its old entry, and
    another network's stays."""
    raw = runfile.read(written, 1 << 20) if written else None
    try:
        old = parse_json_object(raw, str(written)) if raw is not None else {}
    except ConfigError:
        return None
    name = old.get("cniConfName", defaults.CNI_CONF_NAME)
    return name if old.get("type") == PLUGIN_TYPE and isinstance(name, str) else None
