"""Is the device plugin up and registered with the kubelet, as far as the exporter
can see: its socket in the kubelet's device-plugins dir accepts a connection (up), and
the status file the device plugin writes (``rdma_cni/store/run/pluginstatus.py``)
records a registration on the kubelet socket that exists now (registered)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from rdma_cni.kube.deviceplugin.server import KUBELET_SOCKET, socket_name
from rdma_cni.store.run import pluginstatus as status


def accepts(path: str, timeout: float = 0.5) -> bool:
    """True when a unix stream socket at ``path`` accepts a connection."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
    except OSError:
        return False
    finally:
        s.close()
    return True


class DevicePluginCollector:
    name = "device_plugin"

    def __init__(self, resource: str, plugin_dir: str, status_file: str) -> None:
        self.resource = resource
        self.plugin_dir = plugin_dir
        self.status_file = status_file

    def collect(self) -> Iterator[Metric]:
        up = accepts(os.path.join(self.plugin_dir, socket_name(self.resource)))
        kubelet = os.path.join(self.plugin_dir, KUBELET_SOCKET)
        registered = up and status.registered(status.read(self.status_file), self.resource,
                                              kubelet)
        g_up = GaugeMetricFamily("rdma_cni_device_plugin_up", "1 when the device plugin's "
                                 "socket in the kubelet device-plugins dir accepts connections",
                                 labels=["resource"])
        g_up.add_metric([self.resource], 1.0 if up else 0.0)
        g_reg = GaugeMetricFamily("rdma_cni_device_plugin_registered", "1 when the device "
                                  "plugin is up and registered with the running kubelet",
                                  labels=["resource"])
        g_reg.add_metric([self.resource], 1.0 if registered else 0.0)
        yield g_up
        yield g_reg
