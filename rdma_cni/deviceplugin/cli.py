"""``rdma-cni device-plugin --config FILE [--sysfs-root DIR]``: the RDMA device plugin.

The config is a JSON object shaped like the plugin's conflist entry (DESIGN §8):
``mode``, ``devices``, ``resourceName``, ``slotsPerNic``, ``hostSlots`` and
``kubelet.devicePluginDir`` are used. Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from rdma_cni.errors import CniError, ConfigError

DEFAULT_NCCL_ENV = "/opt/cni/bin/nccl_env.sh"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rdma-cni device-plugin",
                                description="RDMA NIC device plugin for the kubelet")
    p.add_argument("--config", required=True, help="JSON object like the conflist entry")
    p.add_argument("--sysfs-root", default="/", help="root of /sys and /dev (tests)")
    p.add_argument("--nccl-env", default=DEFAULT_NCCL_ENV,
                   help="host path of nccl_env.sh, mounted read-only into containers "
                        "(skipped when missing; '' disables)")
    p.add_argument("--poll", type=float, default=5.0, help="health/kubelet poll seconds")
    return p


def load_config(path: str) -> Any:
    from rdma_cni.models.netconf import load_netconf

    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except OSError as err:
        raise ConfigError(f"failed to read config {path}: {err.strerror}") from None
    except ValueError as err:
        raise ConfigError(f"failed to parse config {path}: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"failed to parse config {path}: not a JSON object")
    raw.setdefault("cniVersion", "1.0.0")
    raw.setdefault("name", "rdma")
    return load_netconf(raw)


def build(args: argparse.Namespace, free_addresses: Callable[[Any], int] | None = None) -> Any:
    """The DevicePlugin for parsed ``args`` (tests inject ``free_addresses``)."""
    from rdma_cni.adapters.sysfs import Sysfs
    from rdma_cni.deviceplugin.addresses import HostFreeAddresses
    from rdma_cni.deviceplugin.inventory import Inventory, PluginSettings
    from rdma_cni.deviceplugin.server import DevicePlugin

    conf = load_config(args.config)
    settings = PluginSettings(mode=conf.mode, resource=conf.resource, pinned=conf.devices,
                              slots_per_nic=conf.slotsPerNic, host_slots=conf.hostSlots)
    sysfs = Sysfs(args.sysfs_root)
    inventory = Inventory(settings, sysfs, free_addresses or HostFreeAddresses())
    return DevicePlugin(inventory, conf.kubelet.devicePluginDir,
                        exists=lambda p: sysfs.exists(p.lstrip("/")),
                        nccl_env_path=args.nccl_env or None, poll=args.poll)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        plugin = build(args)
        os.makedirs(plugin.dir, exist_ok=True)
    except (CniError, OSError) as err:
        print(f"rdma-cni device-plugin: {err}", file=sys.stderr)
        return 1

    def _stop(signum: int, _frame: object) -> None:
        logging.getLogger("rdma_cni.deviceplugin").info("signal %d: stopping", signum)
        plugin.stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    plugin.run()
    return 0
