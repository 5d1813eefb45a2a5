"""``doctor`` checks of the node's files: ``/dev/infiniband``, the installed plugin,
the runtime's CNI config, the data dir, the netns mount propagation, one network
per data dir, and whether the DaemonSet's pod needs a restart to apply its config."""

from __future__ import annotations

import errno
import os
import tempfile

from rdma_cni.errors import ConfigError, escaped
from rdma_cni.models.subconfig import PLUGIN_TYPE, first_conf_file, read_json_object
from rdma_cni.store.core import DEFAULT_DATA_DIR
from rdma_cni.store.run import configrecord
from rdma_cni.tools.doctor_integrity import data_dirs, netns_propagation
from rdma_cni.tools.doctor_report import Check


def check_dev(path: str) -> Check:
    """A ``uverbs`` device in ``path``: the directory alone proves nothing (the
    DaemonSet's hostPath ``DirectoryOrCreate`` makes an empty one where ib_uverbs is not
    loaded)."""
    fix = "load ib_uverbs / rdma_ucm (modprobe ib_uverbs rdma_ucm)"
    try:
        verbs = sorted(n for n in os.listdir(path) if n.startswith("uverbs"))
    except OSError:
        return Check("dev-infiniband", "fail", f"{path} missing", fix)
    if not verbs:
        return Check("dev-infiniband", "fail", f"{path} has no uverbs device", fix)
    return Check("dev-infiniband", "ok", f"{path} present ({', '.join(verbs[:4])}"
                 f"{', ...' if len(verbs) > 4 else ''})")


def check_binary(path: str) -> Check:
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return Check("binary", "ok", f"{path} present")
    return Check("binary", "fail", f"{path} missing or not executable", "run `rdma-cni install`")


def check_conflist(conf_dir: str) -> Check:
    """The file the runtime uses (:func:`first_conf_file`: the same choice as the plugin's
    subcommands, no dotfile or directory), read as they read it."""
    try:
        first = first_conf_file(conf_dir)
    except ConfigError as e:
        return Check("conflist", "fail", e.msg, f"make {conf_dir} readable by root")
    if first is None:
        return Check(
            "conflist",
            "fail",
            f"no CNI config in {conf_dir}",
            "install the primary CNI, then `rdma-cni install`",
        )
    try:
        plugins = read_json_object(first).get("plugins", [])
        types = [p.get("type") for p in plugins]
    except ConfigError as e:
        return Check("conflist", "fail", e.msg, "fix the JSON")
    except (TypeError, AttributeError):
        return Check("conflist", "fail", f"cannot read {first}: its plugins are not a list "
                     "of objects", "fix the JSON")
    if PLUGIN_TYPE not in types:
        return Check(
            "conflist", "fail", f"no {PLUGIN_TYPE} entry in {first}", "run `rdma-cni install`"
        )
    if types.index(PLUGIN_TYPE) == 0:
        return Check(
            "conflist",
            "fail",
            f"{PLUGIN_TYPE} is the first plugin of {first}",
            "put it after the primary CNI (`rdma-cni install`)",
        )
    return Check("conflist", "ok", f"{PLUGIN_TYPE} chained after {types[0]} in {first}")


def check_datadir(path: str) -> Check:
    probe = path
    while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        if e.errno == errno.EROFS:
            return Check("data-dir", "warn", f"{probe} is read-only here (a read-only mount: "
                         "doctor in the DaemonSet's container): its writability is not checked",
                         "the serve container writes it through its own mount; a write "
                         "it cannot make fails the ADD and shows in its log")
        return Check(
            "data-dir",
            "fail",
            f"{probe} not writable: {e.strerror or e}",
            f"make {path} writable by root",
        )
    note = "" if probe == path else f" (will be created under {probe})"
    return Check("data-dir", "ok", f"{path} writable{note}")


def check_netns_propagation(netns_dir: str, mountinfo: str) -> Check:
    return Check("netns-propagation", *netns_propagation(netns_dir, mountinfo))


def check_data_dirs(conf_dir: str) -> Check:
    used = data_dirs(conf_dir, DEFAULT_DATA_DIR)
    if len(used) > 1:
        return Check("data-dirs", "fail", "; ".join(used),
                     "give every rdma-cni network of the node one dataDir (the default): a "
                     "reservation is exclusive only within its data dir, so networks with "
                     "one each can give one address or NIC to two pods")
    return Check("data-dirs", "ok", "one data dir for every rdma-cni network"
                 + (f": {used[0]}" if used else ""))



def _stale(value: object) -> list[str] | None:
    """A record's ``stale``: what changed, each escaped for the terminal; None when it is
    not a list of strings (the record is a file on the host, not this process's)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        return None
    return [escaped(s) for s in value]


UNREADABLE = ("remove it, then kubectl rollout restart -n <namespace> daemonset/rdma-cni "
              "(the pods' start writes it: install --write-config)")
RESTART = ("kubectl rollout restart -n <namespace> daemonset/rdma-cni (the pods read the "
           "ConfigMap and the node label only at their start)")


def check_restart(path: str, now: float) -> Check:
    """Whether the ConfigMap's file or the node label changed since the DaemonSet's pod
    started, by the record ``install --write-config`` wrote and ``cni-watch`` keeps."""
    record, why = configrecord.examine(path)
    if why is not None:
        return Check("restart", "warn", f"unknown: the record of the DaemonSet's start {path} "
                     f"is unreadable: {escaped(why)}", UNREADABLE)
    if record is None:
        return Check("restart", "ok", f"no record of a DaemonSet start ({path} absent): "
                     "nothing to compare")
    stale = _stale(record.get("stale"))
    if stale is None:
        return Check("restart", "warn", f"unknown: the record's stale field ({path}) is not "
                     "a list of strings", "check the cni-watch container (kubectl logs -c "
                     "cni-watch), which rewrites it")
    if stale:
        return Check("restart", "warn", "needed: the running configuration is stale: "
                     + "; ".join(stale), RESTART)
    interval, checked = record.get("interval"), record.get("checked")
    if isinstance(interval, int | float) and isinstance(checked, int | float):
        age = now - checked
        if age > 3 * interval + 60:
            return Check("restart", "warn", f"unknown: the record was last checked {age:.0f} s "
                         f"ago (cni-watch checks every {interval:g} s)",
                         "check the cni-watch container (kubectl logs -c cni-watch)")
        return Check("restart", "ok", "not needed: the ConfigMap's file and the node label "
                     f"are what the pod started with (checked {max(age, 0):.0f} s ago)")
    return Check("restart", "ok", "not needed as of the pod's start (no watch compares since)")
