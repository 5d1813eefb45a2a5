"""conf/k8s/: the values file is the one place (rendering its defaults gives the shipped
files; rendering other values leaves no trace of the defaults), strict schema validation
at the oldest and newest Kubernetes kubernetes-validate ships, and the security lint
(checkov) fails on a finding without a justified skip. No root."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate.utils as kv
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "render-manifests.py"
CHECKOV = REPO / ".venv" / "checkov" / "bin" / "checkov"
OTHER = {"namespace": "rdma-system", "image": "registry.example/rdma/rdma-cni:9.9.9",
         "kubeletDir": "/data/kubelet", "cniBinDir": "/usr/libexec/cni",
         "cniConfDir": "/etc/kubernetes/cni/net.d"}
# host paths that stay where they are whatever the values (not a user's choice: the
# plugin, run by the runtime on the host, finds its data dir, log and socket there)
FIXED_HOST_PATHS = {"/var/lib/cni", "/var/run/netns", "/sys", "/dev/infiniband", "/var/log",
                    "/run/rdma-cni", "/run/containerd"}  # /run/containerd: the CRI socket


def _load_script() -> Any:
    spec = importlib.util.spec_from_file_location("render_manifests", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rm = _load_script()


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)


def pod_specs(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [d["spec"]["template"]["spec"] for docs in rendered.values() for d in docs
            if d["kind"] == "DaemonSet"]


def test_rendering_the_defaults_gives_the_shipped_files() -> None:
    defaults = rm.load_values(rm.DEFAULTS)
    assert set(defaults) == set(rm.KEYS)
    assert rm.render(defaults) == rm.shipped()
    assert set(rm.shipped()) >= {"daemonset.yaml", "rbac.yaml", "configmap.yaml"}


def test_other_values_change_every_place_and_leave_no_default_behind(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(OTHER))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--values", str(values), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rendered = {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
                for p in sorted(out.glob("*.yaml"))}
    assert rendered == rm.render(OTHER) and set(rendered) == set(rm.shipped())
    everything = [s for docs in rendered.values() for s in strings(docs)]
    assert not [s for s in everything if "kube-system" in s]
    assert not [s for s in everything if "rdma-cni:0.1.0" in s]
    for doc in (d for docs in rendered.values() for d in docs):
        if "namespace" in doc["metadata"]:
            assert doc["metadata"]["namespace"] == OTHER["namespace"]
    (pod,) = pod_specs(rendered)
    images = {c["image"] for c in [*pod["initContainers"], *pod["containers"]]}
    assert images == {OTHER["image"]}
    host = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    moved = host - FIXED_HOST_PATHS
    assert moved and all(p.startswith((OTHER["kubeletDir"] + "/", OTHER["cniBinDir"],
                                       OTHER["cniConfDir"])) for p in moved), moved
    assert {f"{OTHER['kubeletDir']}/device-plugins", f"{OTHER['kubeletDir']}/pod-resources",
            OTHER["cniBinDir"], OTHER["cniConfDir"]} <= host
    args = [a for c in pod["containers"] for a in c["command"]]
    assert not [a for a in args if a.startswith("/opt/cni/bin")]  # no host bin path left
    for name, docs in rendered.items():
        for doc in docs:
            _validate(doc, kv.latest_version(), f"{name} rendered")


@pytest.mark.parametrize("content, message", [
    ("namespace: [a]\n", "namespace must be a non-empty string"),
    ("imag: x\n", "unknown key 'imag'"),
    ("cniBinDir: opt/cni\n", "must be a normalised absolute path"),
    ("namespace: Kube_System\n", "is not a DNS label"),
    ("- a\n", "expected a mapping"),
    (": : :\n", "cannot read values file"),
])
def test_bad_values_are_one_line_naming_the_key(tmp_path: Path, content: str,
                                                message: str) -> None:
    values = tmp_path / "v.yaml"
    values.write_text(content)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--values", str(values), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not out.exists()


def test_a_manifest_disagreeing_with_the_defaults_is_refused() -> None:
    defaults = rm.load_values(rm.DEFAULTS)
    ds = copy.deepcopy(rm.shipped()["daemonset.yaml"][0])
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = "rdma-cni:other"
    with pytest.raises(rm.RenderError, match=r"not the default 'localhost/rdma-cni:0\.1\.0'"):
        rm.render_doc(ds, defaults, OTHER, "daemonset.yaml")


# -- strict schema validation ----------------------------------------------------------
def _versions() -> list[str]:
    minors = sorted({kv.major_minor(v) for v in kv.all_versions()},
                    key=lambda s: tuple(map(int, s.split("."))))
    return [minors[0], minors[-1]]


def _validate(doc: dict[str, Any], version: str, where: str) -> None:
    try:
        kv.validate(doc, version, strict=True)
    except kv.SchemaNotFoundError:
        assert doc["apiVersion"] == "monitoring.coreos.com/v1", f"{where}: no schema"


def test_the_oldest_and_newest_schemas_are_the_expected_ones() -> None:
    oldest, newest = _versions()
    assert tuple(map(int, oldest.split("."))) <= (1, 25)
    assert tuple(map(int, newest.split("."))) >= (1, 37)


@pytest.mark.parametrize("version", _versions())
def test_shipped_manifests_validate_strictly(version: str) -> None:
    for name, docs in rm.shipped().items():
        for doc in docs:
            _validate(doc, version, name)


@pytest.mark.parametrize("version", _versions())
def test_strict_validation_catches_a_misplaced_field(version: str) -> None:
    ds = copy.deepcopy(rm.shipped()["daemonset.yaml"][0])
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # typo
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, version, strict=True)
    ds = copy.deepcopy(rm.shipped()["daemonset.yaml"][0])
    ds["spec"]["template"]["spec"]["hostNetwork"] = "yes"
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, version, strict=True)


# -- security lint ------------------------------------------------------------------------
def _checkov(directory: Path) -> tuple[int, dict[str, Any]]:
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} missing: run ./scripts/setup.sh")
    proc = subprocess.run([str(CHECKOV), "-d", str(directory), "--framework", "kubernetes",
                           "--skip-download", "-o", "json"],
                          capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout)
    return proc.returncode, report if isinstance(report, dict) else report[0]


def test_checkov_passes_and_every_skip_has_a_reason(tmp_path: Path) -> None:
    rc, report = _checkov(REPO / "conf" / "k8s")
    assert rc == 0 and report["summary"]["failed"] == 0, report["results"]["failed_checks"]
    skipped = report["results"]["skipped_checks"]
    assert skipped, "no skip annotations seen"
    for check in skipped:
        reason = check["check_result"].get("suppress_comment", "")
        assert len(reason) > 20, f"{check['check_id']} skipped without a reason"
    # the lint can fail: the same DaemonSet without its justified skips
    bare = copy.deepcopy(rm.shipped()["daemonset.yaml"][0])
    bare["metadata"].pop("annotations")
    (tmp_path / "daemonset.yaml").write_text(yaml.safe_dump(bare))
    rc, report = _checkov(tmp_path)
    assert rc != 0
    failed = {c["check_id"] for c in report["results"]["failed_checks"]}
    assert failed == {c["check_id"] for c in skipped}
