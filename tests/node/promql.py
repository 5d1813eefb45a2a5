"""The documented PromQL queries, run by a real query engine against series scraped from
the exporter: Prometheus' own ``promtool test rules`` (the engine Prometheus evaluates
rules with) over input series made of consecutive scrapes.

What Prometheus stores of a scrape depends on how the target was discovered: it adds the
target's labels (``job``, ``instance``, ``namespace``, ``pod``, ...) and, where a scraped
label has the same name, ``honor_labels`` decides: true keeps the scraped one, false
renames it ``exported_<name>`` (so the exporter's ``pod`` label would become
``exported_pod``). :func:`stored` does exactly that for a discovery path's target labels.

Each query is wrapped in ``absent(...)`` and expected to give nothing: promtool fails a
query that returns no series, and prints which one.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float]
INTERVAL = 15  # seconds between the scrapes as the test files place them


def parse(text: str) -> list[Sample]:
    """The samples of one scrape (the exposition format)."""
    return [(s.name, tuple(sorted(s.labels.items())), float(s.value))
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def stored(samples: Sequence[Sample], target: Mapping[str, str], honor: bool) -> list[Sample]:
    """The samples as Prometheus stores them for a target with ``target`` labels."""
    out = []
    for name, labels, value in samples:
        merged = dict(labels)
        for key, val in target.items():
            if key in merged and honor:
                continue
            if key in merged:
                merged[f"exported_{key}"] = merged.pop(key)
            merged[key] = val
        out.append((name, tuple(sorted(merged.items())), value))
    return out


def documented_queries(markdown: str) -> list[str]:
    """The queries of the ```promql blocks (a line starting with spaces continues the
    query above it; ``#`` lines are comments)."""
    queries: list[str] = []
    for block in re.findall(r"```promql\n(.*?)```", markdown, re.S):
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.startswith((" ", "\t")) and queries:
                queries[-1] += " " + line.strip()
            else:
                queries.append(line.strip())
    return queries


def _series(name: str, labels: Labels) -> str:
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in labels)
    return f"{name}{{{inner}}}"


def input_series(scrapes: Sequence[Sequence[Sample]]) -> list[dict[str, str]]:
    """promtool's input series: one value per scrape (``_`` where a series is missing)."""
    keys: dict[tuple[str, Labels], list[str]] = {}
    for i, scrape in enumerate(scrapes):
        for name, labels, value in scrape:
            values = keys.setdefault((name, labels), ["_"] * len(scrapes))
            values[i] = repr(value) if value == value else "NaN"
    return [{"series": _series(n, lab), "values": " ".join(v)} for (n, lab), v in keys.items()]


def run(promtool: str, scrapes: Sequence[Sequence[Sample]], queries: Sequence[str],
        tmp: Path) -> tuple[bool, str]:
    """(every query answered, promtool's output)."""
    at = f"{INTERVAL * (len(scrapes) - 1)}s"
    test = {"rule_files": [], "evaluation_interval": f"{INTERVAL}s",
            "tests": [{"interval": f"{INTERVAL}s", "input_series": input_series(scrapes),
                       "promql_expr_test": [{"expr": f"absent({q})", "eval_time": at,
                                             "exp_samples": []} for q in queries]}]}
    path = tmp / "queries.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    out = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                         text=True, timeout=120)
    return out.returncode == 0, out.stdout + out.stderr
