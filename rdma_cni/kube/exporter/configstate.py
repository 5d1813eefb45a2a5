"""Whether the DaemonSet's pod runs the configuration the ConfigMap and the node label
say now, from the record ``install`` writes and ``cni-watch`` keeps up to date
(:mod:`rdma_cni.store.run.configrecord`); nothing without a record."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from rdma_cni.kube.exporter.common import number
from rdma_cni.store.run import configrecord


class ConfigCollector:
    name = "config"

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        record = configrecord.read(self.path)
        if record is None:
            return
        stale = GaugeMetricFamily(
            "rdma_cni_config_stale", "1 while the ConfigMap's file or the node's mode label "
            "differ from what this node's rdma-cni pod started with (they apply at a restart "
            "of the pod: kubectl rollout restart)")
        stale.add_metric([], 1.0 if record.get("stale") else 0.0)
        checked = GaugeMetricFamily(
            "rdma_cni_config_checked_timestamp_seconds", "When the cni-watch container last "
            "compared the ConfigMap's file and the node label with what the pod started with")
        checked.add_metric([], number(record.get("checked")))
        yield from (stale, checked)
