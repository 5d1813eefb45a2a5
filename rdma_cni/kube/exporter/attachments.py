"""Per attachment on the node (from the plugin's state store): an info series
per pod interface, and the interface's traffic counters read inside the pod's
netns (through an injectable :class:`StatsReader`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from rdma_cni.store.state import AttachmentState
from rdma_cni.store.view import StoreView

log = logging.getLogger("rdma_cni.kube.exporter")


@dataclass(frozen=True)
class IfStats:
    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int


#: (netns path, ifnames) -> counters of those present; raises when the netns is gone.
StatsReader = Callable[[str, Sequence[str]], dict[str, IfStats]]


@dataclass(frozen=True)
class Attachment:
    namespace: str
    pod: str
    container_id: str
    netns: str
    mode: str
    status: str
    interfaces: tuple[tuple[str, str, str], ...]  # (name, nic, "ip/prefix,...")


def _split_pod(pod: Any) -> tuple[str, str]:
    text = pod if isinstance(pod, str) else ""
    ns, _, name = text.partition("/")
    return (ns, name) if name else ("", ns)


def parse_state(st: AttachmentState) -> Attachment:
    """The exporter's view of one state record."""
    ns, pod = _split_pod(st.pod)
    ifaces = tuple((p.name, p.nic, ",".join(str(a) for a in p.addresses))
                   for p in st.interfaces)
    return Attachment(ns, pod, st.key.container_id if st.key else "", st.netns, st.mode,
                      st.status, ifaces)


class _Families:
    def __init__(self) -> None:
        lab = ["namespace", "pod", "interface"]
        self.info = GaugeMetricFamily(
            "rdma_cni_attachment_info", "An RDMA interface the plugin attached to a pod",
            labels=["namespace", "pod", "container_id", "interface", "nic", "address", "mode"])
        self.count = GaugeMetricFamily("rdma_cni_attachments", "Attachments in the state "
                                       "store by status", labels=["status"])
        self.rx = CounterMetricFamily("rdma_cni_pod_interface_receive_bytes",
                                      "Bytes received by the pod's RDMA interface", labels=lab)
        self.tx = CounterMetricFamily("rdma_cni_pod_interface_transmit_bytes",
                                      "Bytes transmitted by the pod's RDMA interface", labels=lab)
        self.rxp = CounterMetricFamily("rdma_cni_pod_interface_receive_packets",
                                       "Packets received by the pod's RDMA interface", labels=lab)
        self.txp = CounterMetricFamily("rdma_cni_pod_interface_transmit_packets",
                                       "Packets transmitted by the pod's RDMA interface",
                                       labels=lab)


class AttachmentCollector:
    name = "attachments"

    def __init__(self, store: StoreView, stats: StatsReader | None) -> None:
        self.store = store
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        fam = _Families()
        by_status: dict[str, int] = {}
        for rec in self.store.states():
            att = parse_state(rec)
            by_status[att.status] = by_status.get(att.status, 0) + 1
            for name, nic, addrs in att.interfaces:
                fam.info.add_metric(
                    [att.namespace, att.pod, att.container_id, name, nic, addrs, att.mode], 1.0)
            self._traffic(fam, att)
        for status, n in sorted(by_status.items()):
            fam.count.add_metric([status], n)
        yield from (fam.info, fam.count, fam.rx, fam.tx, fam.rxp, fam.txp)

    def _traffic(self, fam: _Families, att: Attachment) -> None:
        if self.stats is None or not att.netns or not att.interfaces:
            return
        try:
            stats = self.stats(att.netns, [i[0] for i in att.interfaces])
        except Exception as exc:  # a vanished sandbox: no traffic series for it
            log.debug("no interface counters for %s/%s in %s: %s",
                      att.namespace, att.pod, att.netns, exc)
            return
        for name, st in sorted(stats.items()):
            lab = [att.namespace, att.pod, name]
            fam.rx.add_metric(lab, st.rx_bytes)
            fam.tx.add_metric(lab, st.tx_bytes)
            fam.rxp.add_metric(lab, st.rx_packets)
            fam.txp.add_metric(lab, st.tx_packets)
