"""``rdma-cni doctor``: node checks, one line each with a fix (DESIGN §2, §3, §8).

Every path and OS fact is injectable (``Facts``) so tests use fake trees and
temp files. ``config`` is the plugin's conflist entry as a plain dict. The checks
live by subject: the NICs in ``doctor_nics``, the node's files in ``doctor_files``
(and ``doctor_integrity``), the kubelet's topology policy and the allocation sources in
``doctor_kubelet``. In the DaemonSet's ``device-plugin`` container the node's paths come
from the environment (:data:`ENV`): ``kubectl exec ... -c device-plugin -- rdma-cni doctor``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from ipaddress import IPv4Interface
from typing import Any

from rdma_cni import defaults
from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.confdefaults import DEFAULTS
from rdma_cni.errors import CniError, shown
from rdma_cni.models.subconfig import PLUGIN_TYPE
from rdma_cni.node.rdma_mode import read_netns_mode
from rdma_cni.tools.doctor_files import (
    check_binary,
    check_conflist,
    check_data_dirs,
    check_datadir,
    check_dev,
    check_netns_propagation,
    check_restart,
)
from rdma_cni.tools.doctor_kubelet import ROOT_ENV, check_kubelet, check_sources
from rdma_cni.tools.doctor_nics import check_netmasks, check_netns, check_nics, ip_addrs
from rdma_cni.tools.doctor_report import Check, render
from rdma_cni.vocab.modes import names, parse


@dataclass
class Facts:
    sysfs: Sysfs = field(default_factory=Sysfs)
    addrs: Callable[[str], list[IPv4Interface]] = ip_addrs
    netns_mode: Callable[[], str | None] = read_netns_mode
    kubelet_root: str | None = None  # None: not given (the config's kubelet paths)
    kubelet_config: str = ""  # "": config.yaml under the kubelet root, else the default's
    dev_infiniband: str = "/dev/infiniband"
    plugin_binary: str = "/opt/cni/bin/rdma-cni"
    cni_conf_dir: str = "/etc/cni/net.d"
    netns_dir: str = "/var/run/netns"
    mountinfo: str = "/proc/self/mountinfo"
    config_record: str = defaults.CONFIG_RECORD
    clock: Callable[[], float] = time.time


def run_checks(
    config: dict[str, Any], sysfs: Sysfs | None = None, facts: Facts | None = None
) -> list[Check]:
    """All checks, in order; ``sysfs`` (when given) overrides ``facts.sysfs``."""
    facts = facts or Facts()
    if sysfs is not None:
        facts = replace(facts, sysfs=sysfs)
    mode = str(config.get("mode") or "")
    checks = []
    if parse(mode) is None:
        checks.append(
            Check(
                "config",
                "fail",
                f"mode {shown(config['mode']) if mode else 'unset'} is not a known mode",
                f"set mode to {names(last=' or ')}",
            )
        )
    nic_check, nics = check_nics(config, facts.sysfs)
    checks += [
        nic_check,
        check_netmasks(mode, nics, facts.addrs),
        check_netns(mode, facts.netns_mode()),
        check_kubelet(mode, facts.kubelet_config
                      or f"{facts.kubelet_root or defaults.KUBELET_DIR}/config.yaml"),
        check_sources(config, facts.kubelet_root),
        check_dev(facts.dev_infiniband),
        check_binary(facts.plugin_binary),
        check_conflist(facts.cni_conf_dir),
        check_datadir(str(config.get("dataDir") or DEFAULTS["dataDir"])),
        check_netns_propagation(facts.netns_dir, facts.mountinfo),
        check_data_dirs(facts.cni_conf_dir),
        check_restart(facts.config_record, facts.clock()),
    ]
    return checks


def load_config(path: str | None, conf_dir: str) -> dict[str, Any]:
    """The --config file, else our entry of the runtime's conflist; {} when there is none
    (the checks then report what is missing)."""
    from rdma_cni.errors import ConfigError
    from rdma_cni.models.subconfig import load_config as find

    try:
        return find(path, conf_dir)
    except ConfigError:
        if path:
            raise
        return {}


#: environment variables the DaemonSet's container sets for the paths of its node, so
#: ``kubectl exec ... -- rdma-cni doctor`` needs no option (the flags win over them)
ENV = {"kubelet_root": ROOT_ENV, "cni_bin_dir": "RDMA_CNI_CNI_BIN_DIR",
       "cni_conf_dir": "RDMA_CNI_CNI_CONF_DIR"}


def _parser() -> argparse.ArgumentParser:
    from rdma_cni.cliargs import parser

    p = parser("rdma-cni doctor", "Check this node: one line per check with the fix; "
               "exit 1 when a check fails.")
    p.add_argument("--json", action="store_true",
                   help="print the checks as a JSON list (an {\"error\": ...} object on failure)")
    p.add_argument("--cni-conf-dir", metavar="DIR",
                   help=f"the CNI config dir to check (default ${ENV['cni_conf_dir']}, else "
                        "/etc/cni/net.d)")
    p.add_argument("--cni-bin-dir", metavar="DIR",
                   help=f"the CNI bin dir holding rdma-cni (default ${ENV['cni_bin_dir']}, else "
                        "/opt/cni/bin)")
    p.add_argument("--kubelet-root", metavar="DIR",
                   help="the kubelet's root dir (its --root-dir): its config.yaml, the "
                        "PodResources socket and the checkpoint are checked under it, and the "
                        "plugin's config must read them there (default "
                        f"${ENV['kubelet_root']}; else the config's kubelet paths and "
                        f"{defaults.KUBELET_DIR}/config.yaml)")
    p.add_argument("--config-record", metavar="FILE",
                   help="the record of what the DaemonSet's pod started with, which the "
                        f"`restart` check reads (default {defaults.CONFIG_RECORD})")
    return p


def with_paths(facts: Facts, args: argparse.Namespace, env: dict[str, str]) -> Facts:
    """``facts`` with the paths the flags, else the environment, name."""
    given = {k: getattr(args, k) or env.get(var) for k, var in ENV.items()}
    changes: dict[str, Any] = {}
    if given["kubelet_root"]:
        changes["kubelet_root"] = given["kubelet_root"].rstrip("/") or "/"
    if given["cni_bin_dir"]:
        changes["plugin_binary"] = os.path.join(given["cni_bin_dir"], PLUGIN_TYPE)
    if given["cni_conf_dir"]:
        changes["cni_conf_dir"] = given["cni_conf_dir"]
    if getattr(args, "config_record", None):
        changes["config_record"] = args.config_record
    return replace(facts, **changes)


def main(argv: Sequence[str] | None = None, facts: Facts | None = None) -> int:
    from rdma_cni.cliargs import fail

    args = _parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    facts = with_paths(facts or Facts(), args, dict(os.environ))
    try:
        config = load_config(args.config, facts.cni_conf_dir)
    except CniError as e:
        return fail("rdma-cni doctor", e.msg, args.json)
    checks = run_checks(config, facts=facts)
    if args.json:
        sys.stdout.write(json.dumps([asdict(c) for c in checks], indent=2) + "\n")
    else:
        sys.stdout.write(render(checks))
    return 1 if any(c.status == "fail" for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
