"""The plugin's own health: ADD/DEL/CHECK/... counts by result and CNI code and
latency histograms, from the file the plugin updates (:mod:`rdma_cni.store.metrics_file`)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from rdma_cni.store import metrics_file


def _code_label(code: int) -> str:
    return "other" if code == metrics_file.OVERFLOW_CODE else str(code)


class OperationsCollector:
    name = "operations"

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        snap = metrics_file.read(self.path)
        ops = CounterMetricFamily("rdma_cni_operations", "CNI commands run by the plugin, by "
                                  "result and CNI error code (0: success)",
                                  labels=["command", "result", "code"])
        hist: dict[tuple[str, str], tuple[list[int], float]] = {}
        for op in snap.ops:
            ops.add_metric([op.command, op.result, _code_label(op.code)], op.count)
            buckets, total = hist.get((op.command, op.result), ([0] * (len(op.buckets) + 1), 0.0))
            for i, n in enumerate(op.buckets):
                buckets[i] += n
            buckets[-1] += op.count - sum(op.buckets)  # +Inf only
            hist[(op.command, op.result)] = (buckets, total + op.sum)
        dur = HistogramMetricFamily("rdma_cni_operation_duration_seconds",
                                    "Wall time of CNI commands", labels=["command", "result"])
        for (command, result), (buckets, total) in sorted(hist.items()):
            bounds = [*(floatToGoString(b) for b in metrics_file.BUCKETS), "+Inf"]
            cumulative, acc = [], 0
            for bound, n in zip(bounds, buckets, strict=True):
                acc += n
                cumulative.append((bound, float(acc)))
            dur.add_metric([command, result], cumulative, total)
        corrupt = GaugeMetricFamily("rdma_cni_metrics_file_corrupt_slots",
                                    "Slots of the metrics file that failed their checksum")
        corrupt.add_metric([], snap.corrupt_slots)
        yield from (ops, dur, corrupt)
