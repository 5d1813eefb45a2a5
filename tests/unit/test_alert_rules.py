"""conf/k8s/components/prometheus-operator/alerts.yaml: a valid PrometheusRule that
covers what an operator must hear first, with metrics the project documents and advice
that cannot cause duplicate addresses. ``promtool check rules`` runs when promtool is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "conf/k8s/components/prometheus-operator/alerts.yaml"
METRICS_DOC = REPO / "docs/metrics.md"
NEEDED = {  # what must be alerted on -> a metric selector the alert's expression uses
    "exporter down": 'up{job="rdma-cni-metrics"}',
    "device plugin down": "rdma_cni_device_plugin_up == 0",
    "device plugin not registered": "rdma_cni_device_plugin_registered == 0",
    "pods without RDMA": "rdma_cni_pods_without_rdma > 0",
    "agent view suspect": "rdma_cni_agent_view_suspect == 1",
    "IPAM nearly exhausted": "rdma_cni_ipam_free_addresses",
    "NIC down": 'rdma_port_state{state="ACTIVE"} == 0',
    "RDMA netns mode mismatch": "rdma_cni_netns_mode_mismatch == 1",
    "configuration stale": "rdma_cni_config_stale == 1",
}


def _doc() -> dict[str, Any]:
    doc = yaml.safe_load(RULES.read_text())
    assert isinstance(doc, dict)
    return doc


def _rules() -> list[dict[str, Any]]:
    return [r for g in _doc()["spec"]["groups"] for r in g["rules"]]


def test_is_a_prometheus_rule_with_complete_alerts() -> None:
    doc = _doc()
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    names = [r["alert"] for r in _rules()]
    assert len(names) == len(set(names))
    for rule in _rules():
        assert rule["expr"].strip() and re.fullmatch(r"\d+[smh]", rule["for"]), rule
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule


@pytest.mark.parametrize("what", sorted(NEEDED))
def test_every_first_order_problem_has_an_alert(what: str) -> None:
    needle = NEEDED[what]
    assert any(needle in " ".join(r["expr"].split()) for r in _rules()), what


def test_every_metric_used_is_documented() -> None:
    documented = set(re.findall(r"`(rdma_[a-z0-9_]+)", METRICS_DOC.read_text()))
    used = {m for r in _rules() for m in re.findall(r"\b(rdma_[a-z0-9_]+)", r["expr"])}
    assert used and used <= documented, used - documented


def test_ipam_advice_cannot_cause_duplicates() -> None:
    (rule,) = [r for r in _rules() if "rdma_cni_ipam_free_addresses" in r["expr"]]
    text = " ".join(rule["annotations"]["description"].split())
    assert "drain" in text and "another RDMA NIC or subnet" in text
    for m in re.finditer(r"widen", text):  # only ever as a warning
        assert text[max(0, m.start() - 8):m.start()].strip().lower().endswith("not"), text


def test_promtool_check_rules(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    plain = tmp_path / "rules.yml"
    plain.write_text(yaml.safe_dump(_doc()["spec"]))  # a PrometheusRule's spec is a rules file
    res = subprocess.run([promtool, "check", "rules", str(plain)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
