"""conf/rdma-cni-verify.yaml: a valid pair of pods (strict schema at the oldest and newest
Kubernetes kubernetes-validate ships) that request the RDMA resource, carry the
annotation and run `rdma-cni verify` against each other. No root."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate.utils as kv
import yaml
from kubernetes_validate import validate

from rdma_cni import cli

MANIFEST = Path(__file__).resolve().parents[2] / "conf" / "rdma-cni-verify.yaml"
ANNOTATION = "k8s.volcengine.com/pod-networks"


def test_manifest_is_valid_at_every_shipped_kubernetes() -> None:
    docs = list(yaml.safe_load_all(MANIFEST.read_text()))
    versions = sorted({kv.major_minor(v) for v in kv.all_versions()},
                      key=lambda s: tuple(map(int, s.split("."))))
    for version in (versions[0], versions[-1]):
        for doc in docs:
            validate(doc, f"{version}.0", strict=True)


def test_two_pods_verify_each_other_with_the_rdma_resource() -> None:
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}
    service = docs["rdma-cni-verify"]
    listen, connect = docs["rdma-cni-verify-listen"], docs["rdma-cni-verify-connect"]
    assert service["spec"]["selector"].items() <= listen["metadata"]["labels"].items()
    for pod, role in ((listen, ["--listen"]), (connect, ["--peer", "rdma-cni-verify"])):
        [ctr] = pod["spec"]["containers"]
        cmd = ctr["command"]
        assert cmd[:2] == ["rdma-cni", "verify"] and cmd[2:2 + len(role)] == role, cmd
        assert "verify" in cli.SUBCOMMANDS
        blocks = json.loads(pod["metadata"]["annotations"][ANNOTATION])
        assert ctr["resources"]["limits"]["vke.volcengine.com/rdma"] == len(blocks)
        assert pod["spec"]["restartPolicy"] == "Never"
    port = service["spec"]["ports"][0]["port"]
    assert listen["spec"]["containers"][0]["ports"][0]["containerPort"] == port == 18515


def test_the_image_tag_is_the_package_version() -> None:
    """The pods run the image this version builds (scripts/image.sh tags it
    `<version>`): an older release's image has no `rdma-cni verify`."""
    from rdma_cni import __version__

    pods = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == "Pod"]
    images = {c["image"] for pod in pods for c in pod["spec"]["containers"]}
    assert len(pods) == 2 and images == {f"localhost/rdma-cni:{__version__}"}, images
