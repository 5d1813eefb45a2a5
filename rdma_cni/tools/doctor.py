"""``rdma-cni doctor``: node checks, one line each with a fix (DESIGN §2, §3, §8).

Every path and OS fact is injectable (``Facts``) so tests use fake trees and
temp files. ``config`` is the plugin's conflist entry as a plain dict.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from ipaddress import IPv4Interface
from typing import Any

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import CniError
from rdma_cni.modes import RdmaNetnsMode, names, names_where, parse
from rdma_cni.node.discovery import Nic, discover, missing
from rdma_cni.node.rdma_mode import check_mode, read_netns_mode
from rdma_cni.store.core import DEFAULT_DATA_DIR
from rdma_cni.tools.doctor_integrity import netns_propagation, shared_data_dirs

PLUGIN_TYPE = "rdma-cni"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""


def ip_addrs(netdev: str) -> list[IPv4Interface]:
    """IPv4 addresses of a host netdev, read over rtnetlink (the netlink adapter)."""
    from rdma_cni.adapters.netlink import Netlink

    try:
        nl = Netlink.here()
    except (CniError, OSError):
        return []
    try:
        link = nl.link(netdev)
        return [] if link is None else [a for _, a in nl.addresses(link.index)]
    except CniError:
        return []
    finally:
        nl.close()


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


def check_nics(config: dict[str, Any], sysfs: Sysfs) -> tuple[Check, list[Nic]]:
    pinned = config.get("devices") or None
    nics = discover(sysfs, pinned)
    gone = missing(sysfs, nics)
    if gone:
        return Check(
            "nics",
            "fail",
            f"configured devices missing: {', '.join(gone)}",
            "fix `devices` in the plugin config or bring the NICs back",
        ), nics
    if not nics:
        return Check(
            "nics",
            "fail",
            "no RoCE NIC found (no netdev with an Ethernet RDMA port)",
            "load the NIC driver (mlx5_ib) or pin `devices`",
        ), nics
    down = [
        f"{n.netdev} ({n.ibdev}:{n.port} {n.state})"
        for n in nics
        if n.ibdev and n.state != "ACTIVE"
    ]
    if down:
        return Check(
            "nics",
            "fail",
            "RDMA ports not ACTIVE: " + ", ".join(down),
            "check cabling, switch port and `ip link` state",
        ), nics
    desc = ", ".join(f"{n.netdev}={n.ibdev or '-'}" for n in nics)
    return Check("nics", "ok", f"{len(nics)} NIC(s): {desc}"), nics


def check_netmasks(
    mode: str, nics: Sequence[Nic], addrs: Callable[[str], list[IPv4Interface]]
) -> Check:
    known = parse(mode)
    limit = known.traits.max_prefix if known else None
    if limit is None:
        return Check("netmask", "ok", f"not needed in mode {mode or 'unset'}")
    bad = []
    for nic in nics:
        ifs = addrs(nic.netdev)
        if not ifs:
            bad.append(f"{nic.netdev} has no IPv4 address")
        bad += [f"{nic.netdev} {i.with_prefixlen}" for i in ifs if i.network.prefixlen >= limit]
    if bad:
        return Check(
            "netmask", "fail", "; ".join(bad),
            f"give each RDMA NIC an IPv4 subnet shorter than /{limit}"
        )
    return Check("netmask", "ok", f"every NIC subnet is shorter than /{limit}")


def check_netns(mode: str, netns_mode: str | None) -> Check:
    if netns_mode is None:
        return Check(
            "rdma-netns",
            "warn",
            "RDMA netns mode unknown (no RDMA netlink: the RDMA subsystem is not loaded)",
            "load ib_core (modprobe ib_core) and the NIC's RDMA driver",
        )
    try:
        check_mode(mode, netns_mode)
    except CniError as e:
        return Check(
            "rdma-netns",
            "fail",
            str(e),
            "set `options ib_core netns_mode=1` and reboot, or use mode "
            + names_where(lambda t: RdmaNetnsMode.EXCLUSIVE in t.rdma_netns),
        )
    return Check("rdma-netns", "ok", f"RDMA netns mode {netns_mode} fits mode {mode}")


def check_kubelet(mode: str, path: str) -> Check:
    known = parse(mode)
    if known is None or not known.traits.topology_policy:
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


def check_dev(path: str) -> Check:
    if os.path.isdir(path):
        return Check("dev-infiniband", "ok", f"{path} present")
    return Check(
        "dev-infiniband",
        "fail",
        f"{path} missing",
        "load ib_uverbs / rdma_ucm (modprobe ib_uverbs rdma_ucm)",
    )


def check_binary(path: str) -> Check:
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return Check("binary", "ok", f"{path} present")
    return Check("binary", "fail", f"{path} missing or not executable", "run `rdma-cni install`")


def _first_conflist(conf_dir: str) -> str | None:
    try:
        names = sorted(os.listdir(conf_dir))
    except OSError:
        return None
    found = [n for n in names if n.endswith((".conf", ".conflist", ".json"))]
    return os.path.join(conf_dir, found[0]) if found else None


def check_conflist(conf_dir: str) -> Check:
    first = _first_conflist(conf_dir)
    if first is None:
        return Check(
            "conflist",
            "fail",
            f"no CNI config in {conf_dir}",
            "install the primary CNI, then `rdma-cni install`",
        )
    try:
        with open(first, encoding="utf-8") as f:
            plugins = json.load(f).get("plugins", [])
        types = [p.get("type") for p in plugins]
    except (OSError, ValueError, AttributeError) as e:
        return Check("conflist", "fail", f"cannot read {first}: {e}", "fix the JSON")
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
        return Check(
            "data-dir",
            "fail",
            f"{probe} not writable: {e.strerror or e}",
            f"make {path} writable by root",
        )
    note = "" if probe == path else f" (will be created under {probe})"
    return Check("data-dir", "ok", f"{path} writable{note}")


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
                f"mode {mode or 'unset'} is not a known mode",
                f"set mode to {names(last=' or ')}",
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


def check_netns_propagation(netns_dir: str, mountinfo: str) -> Check:
    return Check("netns-propagation", *netns_propagation(netns_dir, mountinfo))


def check_data_dirs(conf_dir: str) -> Check:
    shared = shared_data_dirs(conf_dir, DEFAULT_DATA_DIR)
    if shared:
        return Check("data-dirs", "fail", "; ".join(shared),
                     "give each rdma-cni network its own dataDir: networks sharing one "
                     "free each other's addresses and NICs")
    return Check("data-dirs", "ok", "one rdma-cni network per data dir")


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


def render(checks: Sequence[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"[{c.status.upper():4}] {c.name}: {c.detail}")
        if c.fix and c.status != "ok":
            lines.append(f"       fix: {c.fix}")
    return "\n".join(lines) + "\n"


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
