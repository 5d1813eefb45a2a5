"""The agent's last pass, from its status file (:mod:`rdma_cni.store.run.agentstatus`): whether
its view looks wrong, how many pods asked for RDMA and have none, when it last ran, whether
the RDMA netns mode fits the node's mode (only once the agent could read it)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from rdma_cni.kube.exporter.common import number
from rdma_cni.store.run import agentstatus


class AgentCollector:
    name = "agent"

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        doc = agentstatus.read(self.path)
        if doc is None:  # no agent has run here (yet): nothing to say
            return
        suspect = GaugeMetricFamily(
            "rdma_cni_agent_view_suspect", "1 while the agent's view of the node's sandboxes "
            "looks wrong (it then releases nothing it cannot prove gone)")
        suspect.add_metric([], 1.0 if doc.get("viewSuspect") else 0.0)
        missing = GaugeMetricFamily(
            "rdma_cni_pods_without_rdma", "Pods on this node that asked for RDMA interfaces "
            "and have none after their sandbox is ready")
        missing.add_metric([], float(len(agentstatus.pods_without_rdma(doc))))
        foreign = GaugeMetricFamily(
            "rdma_cni_agent_foreign_records", "State records in the data dir written by "
            "another node (a data dir shared between nodes), left alone")
        foreign.add_metric([], float(number(doc.get("foreignRecords"))))
        last = GaugeMetricFamily(
            "rdma_cni_agent_last_pass_timestamp_seconds", "When the agent last completed a pass")
        last.add_metric([], float(number(doc.get("lastPass"))))
        yield from (suspect, missing, foreign, last)
        netns = doc.get("netnsMode")
        if isinstance(netns, dict) and netns.get("netnsMode"):
            mismatch = GaugeMetricFamily(
                "rdma_cni_netns_mode_mismatch", "1 while the RDMA netns mode (rdma system) is "
                "not one the node's mode works under (its pods then fail with code 104)",
                labels=["mode", "netns_mode"])
            mismatch.add_metric([str(netns.get("mode") or ""), str(netns["netnsMode"])],
                                1.0 if netns.get("mismatch") is True else 0.0)
            yield mismatch
