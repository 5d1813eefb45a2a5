"""``rdma-cni doctor``: node checks, one line each with a fix (DESIGN §2, §3, §8).

Every path and OS fact is injectable (``Facts``) so tests use fake trees and
temp files. ``config`` is the plugin's conflist entry as a plain dict. The checks
live by subject: the NICs in ``doctor_nics``, the node's files in ``doctor_files``
(and ``doctor_integrity``), the kubelet's topology policy here.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from ipaddress import IPv4Interface
from typing import Any

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import CniError
from rdma_cni.node.rdma_mode import SHARED_MODES, read_netns_mode
from rdma_cni.store.core import DEFAULT_DATA_DIR
from rdma_cni.tools.doctor_files import (
    check_binary,
    check_conflist,
    check_data_dirs,
    check_datadir,
    check_dev,
    check_netns_propagation,
)
from rdma_cni.tools.doctor_nics import check_netmasks, check_netns, check_nics, ip_addrs
from rdma_cni.tools.doctor_report import Check, render

TOPOLOGY_MODES = ("exclusive", "shared", "shared-multi")


@dataclass
class Facts:
    sysfs: Sysfs = field(default_factory=Sysfs)
    addrs: Callable[[str], list[IPv4Interface]] = ip_addrs
    netns_mode: Callable[[], str | None] = read_netns_mode
    kubelet_config: str = "/var/lib/kubelet/config.yaml"
    dev_infiniband: str = "/dev/infiniband"
    plugin_binary: str = "/opt/cni/bin/rdma-cni"
    cni_conf_dir: str = "/etc/cni/net.d"
    netns_dir: str = "/var/run/netns"
    mountinfo: str = "/proc/self/mountinfo"


def check_kubelet(mode: str, path: str) -> Check:
    if mode not in TOPOLOGY_MODES:
        return Check("topology", "ok", f"no topology policy needed in mode {mode or 'unset'}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        return Check(
            "topology",
            "warn",
            f"cannot read kubelet config {path}: {e.strerror or e}",
            "check topologyManagerPolicy: best-effort by hand",
        )
    m = re.search(r"""^\s*["']?topologyManagerPolicy["']?\s*:\s*["']?([\w-]+)""", text, re.M)
    policy = m.group(1) if m else "none"
    if policy != "best-effort":
        return Check(
            "topology",
            "fail",
            f"kubelet topologyManagerPolicy is {policy}",
            f"set topologyManagerPolicy: best-effort in {path} and restart kubelet",
        )
    return Check("topology", "ok", "kubelet topologyManagerPolicy is best-effort")


def run_checks(
    config: dict[str, Any], sysfs: Sysfs | None = None, facts: Facts | None = None
) -> list[Check]:
    """All checks, in order; ``sysfs`` (when given) overrides ``facts.sysfs``."""
    facts = facts or Facts()
    if sysfs is not None:
        facts = replace(facts, sysfs=sysfs)
    mode = str(config.get("mode") or "")
    checks = []
    if mode not in (*SHARED_MODES, "exclusive"):
        checks.append(
            Check(
                "config",
                "fail",
                f"mode {mode or 'unset'} is not a known mode",
                "set mode to shared, shared-multi, shared-host or exclusive",
            )
        )
    nic_check, nics = check_nics(config, facts.sysfs)
    checks += [
        nic_check,
        check_netmasks(mode, nics, facts.addrs),
        check_netns(mode, facts.netns_mode()),
        check_kubelet(mode, facts.kubelet_config),
        check_dev(facts.dev_infiniband),
        check_binary(facts.plugin_binary),
        check_conflist(facts.cni_conf_dir),
        check_datadir(str(config.get("dataDir") or DEFAULT_DATA_DIR)),
        check_netns_propagation(facts.netns_dir, facts.mountinfo),
        check_data_dirs(facts.cni_conf_dir),
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


def main(argv: Sequence[str] | None = None, facts: Facts | None = None) -> int:
    from rdma_cni.cliargs import fail, parser

    p = parser("rdma-cni doctor", "Check this node: one line per check with the fix; "
               "exit 1 when a check fails.")
    p.add_argument("--json", action="store_true",
                   help="print the checks as a JSON list (an {\"error\": ...} object on failure)")
    p.add_argument("--cni-conf-dir", metavar="DIR",
                   help="the CNI config dir to check (default /etc/cni/net.d)")
    args = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    facts = facts or Facts()
    if args.cni_conf_dir:
        facts = replace(facts, cni_conf_dir=args.cni_conf_dir)
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
