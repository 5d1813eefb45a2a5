"""``rdma-cni device-plugin --config FILE [--sysfs-root DIR] [--host-root DIR]``.

The RDMA device plugin.

The config is a JSON object shaped like the plugin's conflist entry (DESIGN §8):
``mode``, ``devices``, ``resourceName``, ``slotsPerNic``, ``hostSlots`` and
``kubelet.devicePluginDir`` are used. ``Allocate`` is refused while the first config
of ``--cni-conf-dir`` does not chain rdma-cni (see ``chain.py``). Runs until SIGTERM
or SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from rdma_cni import defaults
from rdma_cni.errors import CniError
from rdma_cni.store.run import pluginstatus as status

DEFAULT_NCCL_ENV = defaults.NCCL_ENV_HOST_PATH
DEFAULT_CONF_DIR = defaults.CNI_CONF_DIR


def _parser() -> argparse.ArgumentParser:
    from rdma_cni.cliargs import parser, seconds

    p = parser("rdma-cni device-plugin", "RDMA NIC device plugin for the kubelet: serves "
               "v1beta1.DevicePlugin in the kubelet's device-plugins dir and registers there.",
               log_format=True)
    p.add_argument("--sysfs-root", default="/", help="root of /sys and /dev (tests)")
    p.add_argument("--nccl-env", default=DEFAULT_NCCL_ENV,
                   help="host path of nccl_env.sh, mounted read-only into containers "
                        "(skipped when missing; '' disables)")
    p.add_argument("--host-root", default="/",
                   help="where the host's / is mounted in this container, to find the "
                        "host's nccl_env.sh (the DaemonSet mounts /opt/cni/bin under /host)")
    p.add_argument("--cni-conf-dir", default=DEFAULT_CONF_DIR,
                   help="the host's CNI conf dir (read-only): Allocate is refused while its "
                        f"first config does not chain rdma-cni (default {DEFAULT_CONF_DIR}; "
                        "'' disables the check)")
    p.add_argument("--status-file", default=status.DEFAULT_PATH,
                   help="where to record the kubelet registration for the exporter "
                        f"(default {status.DEFAULT_PATH}; '' disables)")
    p.add_argument("--poll", type=seconds(0.1, 3600), default=5.0,
                   help="seconds between NIC health and kubelet registration checks (default 5)")
    return p


def load_config(path: str | None) -> Any:
    from rdma_cni.models.subconfig import load_netconf_for

    return load_netconf_for(path)[0]


def build(args: argparse.Namespace, free_addresses: Callable[[Any], int] | None = None,
          primary: Any = None) -> Any:
    """The DevicePlugin for parsed ``args`` (tests inject ``free_addresses`` and the
    reader of the node's own NICs, ``primary``)."""
    from rdma_cni.adapters.sysfs import Sysfs
    from rdma_cni.kube.deviceplugin.inventory import Inventory, PluginSettings
    from rdma_cni.kube.deviceplugin.server import DevicePlugin
    from rdma_cni.node.discovery import discover
    from rdma_cni.node.pools import PoolSizes
    from rdma_cni.node.primary import host_primary, keep_off

    primary = primary or host_primary

    conf = load_config(args.config)
    conf_dir = args.cni_conf_dir

    def chain_problem() -> str | None:
        from rdma_cni.tools.chaincheck import chain_problem as check

        return check(conf_dir, args.host_root) if conf_dir else None

    settings = PluginSettings.from_netconf(conf)
    sysfs = Sysfs(args.sysfs_root)
    if settings.pinned is not None:  # a pinned list naming the node's own NIC: refused
        pinned = discover(sysfs, settings.pinned)
        keep_off(pinned, primary([n.netdev for n in pinned], settings.node_ips), pinned=True)
    inventory = Inventory(settings, sysfs, free_addresses or PoolSizes(settings.ranges),
                          primary, _claims_of(conf.dataDir))
    return DevicePlugin(inventory, conf.kubelet.devicePluginDir,
                        exists=lambda p: sysfs.exists(p.lstrip("/")),
                        nccl_env_path=args.nccl_env or None,
                        nccl_env_seen_at=_seen_at(args.host_root, args.nccl_env),
                        poll=args.poll, chain_problem=chain_problem,
                        status_file=args.status_file or None)


def _claims_of(data_dir: str) -> Callable[[], dict[str, str | None]]:
    """The netdevs the store (``dataDir``, mounted read-only; read without tidying, as
    the exporter reads it) says pods hold, each with the PCI address of the NIC its claim
    names; none when it cannot be read."""
    from rdma_cni.store.view import StoreView

    return StoreView(data_dir).nic_claim_pcis


def _seen_at(host_root: str, host_path: str) -> str | None:
    """Where this process sees the host's ``host_path`` (None: check through sysfs root)."""
    if not host_path or os.path.realpath(host_root) == "/":
        return None
    return os.path.join(host_root, host_path.lstrip("/"))


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from rdma_cni import logsetup

    logsetup.daemon("%(asctime)s %(levelname)s %(name)s: %(message)s",
                    log_format=args.log_format)
    try:
        plugin = build(args)
        os.makedirs(plugin.dir, exist_ok=True)
    except (CniError, OSError) as err:
        sys.stderr.write(f"rdma-cni device-plugin: {err}\n")
        return 1

    def _stop(signum: int, _frame: object) -> None:
        logging.getLogger("rdma_cni.kube.deviceplugin").info("signal %d: stopping", signum)
        plugin.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    plugin.run()
    return 0
