"""``rdma-cni exporter --config FILE [--listen HOST:PORT]``: Prometheus metrics of
the node's RDMA NICs, the pods' RDMA interfaces, the plugin's capacity and IPAM,
and the plugin's own operations (docs/metrics.md lists every metric).

It listens on the node's address (``$HOST_IP``, the DaemonSet's ``status.hostIP``) and
refuses every address or an RDMA NIC's: pod names, addresses and container IDs are not
published on the fabric the pods share.

Off the CNI hot path: prometheus_client and pyroute2 are fine here. Custom
collectors read everything at scrape time; no global mutable gauges.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from rdma_cni import defaults
from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import CniError, ConfigError, shown
from rdma_cni.kube.exporter.agent import AgentCollector
from rdma_cni.kube.exporter.attachments import AttachmentCollector, StatsReader
from rdma_cni.kube.exporter.capacity import CapacityCollector, HostReader, Settings
from rdma_cni.kube.exporter.common import NodeCollector
from rdma_cni.kube.exporter.configstate import ConfigCollector
from rdma_cni.kube.exporter.deviceplugin import DevicePluginCollector
from rdma_cni.kube.exporter.operations import OperationsCollector
from rdma_cni.kube.exporter.ports import RdmaPortCollector
from rdma_cni.node.primary import PrimaryReader
from rdma_cni.store import metrics_file
from rdma_cni.store.run import agentstatus
from rdma_cni.store.run.pluginstatus import DEFAULT_PATH as DEVICE_PLUGIN_STATUS
from rdma_cni.store.view import StoreView

DEFAULT_PORT = defaults.EXPORTER_PORT
DEFAULT_HOST = "0.0.0.0"
#: the env var the DaemonSet sets to the node's address (downward API status.hostIP)
HOST_IP_ENV = "HOST_IP"
from rdma_cni.models.subconfig import DEFAULT_CONF_DIR  # noqa: E402

log = logging.getLogger("rdma_cni.kube.exporter")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT``, ``[v6]:PORT`` or ``HOST`` -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port:
        host, port = text, str(DEFAULT_PORT)
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"invalid --listen {shown(text)}: expected HOST:PORT")
    return host, int(port)


def default_listen() -> str:
    """The node's address (``$HOST_IP``) if known, else the loopback, port 9469."""
    return f"{os.environ.get(HOST_IP_ENV) or '127.0.0.1'}:{DEFAULT_PORT}"


def check_listen(host: str, fabric: dict[str, str]) -> None:
    """Never the RDMA fabric: not every address (it includes the RDMA NICs'), not an
    address of an RDMA NIC (``fabric``: address -> NIC)."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return  # a host name: whatever it resolves to is the operator's choice
    if addr.is_unspecified:
        raise ConfigError(f"refusing to listen on every address ({host}), the RDMA NICs' "
                          "too: give the node's address (the DaemonSet passes $(HOST_IP))")
    if str(addr) in fabric:
        raise ConfigError(f"refusing to listen on {addr}: an address of RDMA NIC "
                          f"{fabric[str(addr)]}, the fabric pods share; give the node's "
                          "address")


def node_addresses() -> list[str]:
    """The node's address the DaemonSet passes (``$HOST_IP``), when it is one."""
    host = os.environ.get(HOST_IP_ENV, "")
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        return []


def fabric_addresses(conf: Any, sysfs: Sysfs, host: HostReader,
                     primary: PrimaryReader | None = None,
                     node_ips: Sequence[str] = ()) -> dict[str, str]:
    """Address -> RDMA NIC, of the NICs the plugin uses on this node. The node's own
    NICs (``primary``: the default route, ``nodeIPs`` and ``node_ips``) are not the
    fabric: a RoCE-capable primary NIC holding the node's address stays listenable."""
    from rdma_cni.node.discovery import discover

    names = [n.netdev for n in discover(sysfs, conf.devices)]
    if primary is not None:
        own = primary(names, [*conf.nodeIPs, *node_ips])
        names = [n for n in names if n not in own]
    facts, _ = host(names)
    return {str(a.ip): nic for nic, f in facts.items() for a in f.addresses}


def load_config(path: str | None, conf_dir: str = DEFAULT_CONF_DIR) -> tuple[Any, dict[str, Any]]:
    """(validated NetConf, raw dict) of --config, else the conflist entry in ``conf_dir``."""
    from rdma_cni.models.subconfig import load_netconf_for

    return load_netconf_for(path, conf_dir)


def metrics_path(raw: dict[str, Any]) -> str:
    """Where the plugin records its operations (``metricsFile``; "" means the default)."""
    return metrics_file.path_from_conf(raw) or metrics_file.DEFAULT_PATH


def build_registry(conf: Any, raw: dict[str, Any], sysfs: Sysfs,
                   stats: StatsReader | None, host: HostReader,
                   device_plugin_status: str = DEVICE_PLUGIN_STATUS,
                   agent_status: str = agentstatus.DEFAULT_PATH,
                   primary: PrimaryReader | None = None,
                   config_record: str = defaults.CONFIG_RECORD) -> CollectorRegistry:
    """A registry with the exporter's one collector; the readers are injectable."""
    view = StoreView(conf.dataDir)
    settings = Settings.from_netconf(conf)
    registry = CollectorRegistry()
    registry.register(NodeCollector([
        RdmaPortCollector(sysfs),
        AttachmentCollector(view, stats),
        CapacityCollector(settings, sysfs, view, host, primary),
        OperationsCollector(metrics_path(raw)),
        DevicePluginCollector(conf.resource, conf.kubelet.devicePluginDir,
                              device_plugin_status),
        AgentCollector(agent_status),
        ConfigCollector(config_record),
    ]))
    return registry


def serve(registry: CollectorRegistry, host: str, port: int) -> Any:
    """Start the HTTP server in a thread (:mod:`.httpserve`: bounded connections); returns
    the server (``.server_port``)."""
    from prometheus_client import make_wsgi_app

    from rdma_cni.kube.exporter import httpserve
    from rdma_cni.kube.exporter.appguard import guarded

    return httpserve.start(guarded(make_wsgi_app(registry)), host, port)


def _parser() -> argparse.ArgumentParser:
    from rdma_cni.cliargs import parser

    p = parser("rdma-cni exporter", "Prometheus exporter for RDMA NICs and rdma-cni "
               "(docs/metrics.md lists every metric).", log_format=True)
    p.add_argument("--cni-conf-dir", "--conf-dir", dest="conf_dir", default=DEFAULT_CONF_DIR,
                   help=f"CNI config dir searched without --config (default {DEFAULT_CONF_DIR})")
    p.add_argument("--listen", default=None,
                   help=f"HOST:PORT to serve /metrics on: the node's address, never every "
                        f"address nor an RDMA NIC's (default ${HOST_IP_ENV}:{DEFAULT_PORT}, "
                        f"else 127.0.0.1:{DEFAULT_PORT})")
    p.add_argument("--metrics-file", help="the plugin's metrics file as seen by the exporter "
                                          "(default: config metricsFile, else "
                                          f"{metrics_file.DEFAULT_PATH})")
    p.add_argument("--device-plugin-status", metavar="FILE", default=DEVICE_PLUGIN_STATUS,
                   help="the device plugin's status file as seen by the exporter "
                        f"(default {DEVICE_PLUGIN_STATUS})")
    p.add_argument("--agent-status", metavar="FILE",
                   help="the agent's status file as seen by the exporter "
                                          f"(default {agentstatus.DEFAULT_PATH})")
    p.add_argument("--config-record", metavar="FILE", default=defaults.CONFIG_RECORD,
                   help="the record of what the node's pod started with, as `install "
                        f"--write-config` writes it (default {defaults.CONFIG_RECORD})")
    p.add_argument("--sysfs-root", default="/", help="root of /sys (tests)")
    return p


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    from rdma_cni import logsetup

    logsetup.daemon("%(asctime)s %(levelname)s %(name)s: %(message)s",
                    log_format=args.log_format)
    from rdma_cni.kube.exporter.netstats import host_nics, pod_stats
    from rdma_cni.node.primary import host_primary

    try:
        host, port = parse_listen(args.listen or default_listen())
        conf, raw = load_config(args.config, args.conf_dir)
        sysfs = Sysfs(args.sysfs_root)
        check_listen(host, fabric_addresses(conf, sysfs, host_nics, host_primary,
                                            node_addresses()))
        if args.metrics_file:
            raw["metricsFile"] = args.metrics_file
        registry = build_registry(conf, raw, sysfs, pod_stats, host_nics,
                                  args.device_plugin_status,
                                  args.agent_status or agentstatus.DEFAULT_PATH, host_primary,
                                  args.config_record)
        server = serve(registry, host, port)
    except (CniError, OSError) as err:
        sys.stderr.write(f"rdma-cni exporter: {err}\n")
        return 1
    log.info("serving metrics on %s:%d/metrics", host, server.server_port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    return 0
