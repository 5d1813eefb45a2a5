"""What every collector of the exporter shares: the source protocol and the
wrapper that runs each source in isolation, so one failing source (a vanished
netns, an unreadable store) costs only its own metrics, never the scrape."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

log = logging.getLogger("rdma_cni.kube.exporter")


def number(value: object) -> float:
    """A JSON number of a status file as a sample value (anything else: 0)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


class Source(Protocol):
    """One group of metrics; ``name`` labels its health series."""

    name: str

    def collect(self) -> Iterable[Metric]: ...


class NodeCollector:
    """The one collector registered: runs every source, then reports per source
    ``rdma_cni_exporter_collector_success`` and ``..._duration_seconds``."""

    def __init__(self, sources: Sequence[Source]) -> None:
        self.sources = list(sources)

    def collect(self) -> Iterator[Metric]:
        ok = GaugeMetricFamily("rdma_cni_exporter_collector_success",
                               "1 if the collector's last scrape succeeded, else 0",
                               labels=["collector"])
        took = GaugeMetricFamily("rdma_cni_exporter_collector_duration_seconds",
                                 "Time the collector's last scrape took", labels=["collector"])
        for src in self.sources:
            start = time.monotonic()
            try:
                metrics = [_encodable(m) for m in src.collect()]
                success = 1.0
            except Exception:
                log.exception("collector %s failed", src.name)
                metrics, success = [], 0.0
            ok.add_metric([src.name], success)
            took.add_metric([src.name], time.monotonic() - start)
            yield from metrics
        yield ok
        yield took


def _encodable(metric: Metric) -> Metric:
    """``metric`` with every label value UTF-8 can encode: a value read from a record (a
    pod name of undecodable CNI_ARGS bytes, kept as lone surrogates) shows escaped, never
    a page the exposition cannot encode (HTTP 500 for every metric)."""
    for i, sample in enumerate(metric.samples):
        if not all(_utf8(v) for v in sample.labels.values()):
            labels = {k: v.encode("utf-8", "backslashreplace").decode("utf-8")
                      for k, v in sample.labels.items()}
            metric.samples[i] = sample._replace(labels=labels)
    return metric


def _utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
