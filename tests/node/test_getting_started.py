"""docs/getting-started.md from the image to a pod with RDMA interfaces, its marked blocks
(``<!-- getting-started: NAME -->``) run as written on the node rig (tests/node/nodelab.py:
a temp host root T, a fake kubelet, a private containerd, podman playing the DaemonSet's
pod; tests/node/cluster.py stands in for ``kubectl`` on this one node). The last step,
``rdma-cni verify`` between two pods, needs RDMA between two nodes and runs in the VM
(tests/vm/test_vm_getting_started.py).

What the rig does in place of a node, for each block:
- ``image``: ``./scripts/setup.sh`` and ``./scripts/build.sh`` are the lines
  scripts/test.sh runs before pytest (asserted here, so the doc and the suite cannot
  drift); ``./scripts/image.sh`` is what the rig runs to build its image (nodelab's
  ``build_image``); what the doc says they leave is checked.
- ``load-containerd``: run in dist/ with ``CONTAINERD_ADDRESS`` set to the rig's
  containerd, after the image is removed from it; the pod of section 4 runs from it.
- ``load-crio``: run in dist/ (podman's storage is where image.sh built the image).
- ``deploy``: through the stand-in; this kernel has no ipvlan, so the node labelled
  ``shared`` plays ``shared-multi`` (the mode that needs only macvlan): the label and
  the DaemonSet's scheduling on it are what the block shows, the mode's datapath is the
  VM tier's.
- ``doctor-cluster``, ``see``: through the stand-in's ``kubectl exec``.
- ``pod``: the Pod as the kubelet makes it (tests/node/workload.py) with the YAML's name,
  annotation, resource count and command; ``<your NCCL image>`` is the loaded image.
- section 5's metrics: its URL, the rig's exporter address for ``<node address>``.
Not run (the guide's opening says so): the alternatives of sections 1b and 2 (a
registry push, the other overlays: their renderings are checked by tests/unit/
test_manifests.py and scripts/check-manifests.sh, and the node tier plays
non-default-paths), ``kubectl get`` (the rig has no API server), and what section 5 says
to look at inside the pod (the test reads the pod's links over netlink).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import textwrap
import urllib.request
from collections.abc import Iterator
from typing import Any

import manifests
import pytest
import yaml
from chroot import skip_exec_under_chroot
from cluster import MODE_LABEL, OneNode
from nodelab import ARCHIVE, REPO, Node, node_of, shipped_image
from support.proc import wait_for
from workload import ANNOTATION, RESOURCE, Workloads, links, nic_subnet, v4

pytestmark = [pytest.mark.root, pytest.mark.node]
DOC = REPO / "docs" / "getting-started.md"
MARKED = re.compile(r"<!-- getting-started: ([\w-]+)\b[^>]*-->\s*```(\w+)\n(.*?)```", re.S)
#: what this kernel cannot run -> the mode the rig plays instead (module docstring)
KERNEL_MODES = {"shared": "shared-multi", "shared-host": "shared-multi"}


def blocks() -> dict[str, str]:
    found = {m.group(1): textwrap.dedent(m.group(3)) for m in MARKED.finditer(DOC.read_text())}
    for name in ("image", "load-containerd", "load-crio", "deploy", "doctor-cluster", "pod",
                 "see", "verify"):
        assert name in found, f"{DOC.name} lost its block marked getting-started: {name}"
    return found


def commands(block: str) -> list[str]:
    lines = (line.split(" #", 1)[0].strip() for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def rig() -> Iterator[dict[str, Any]]:
    with node_of("base", play=False) as node:
        pods = Workloads(node.cd, node.kubelet, node.plugin_socket, node.image, RESOURCE)
        cluster = OneNode(node, {shipped_image(): node.image}, lambda: None, labels={},
                          kernel_modes=KERNEL_MODES)
        yield {"node": node, "pods": pods, "cluster": cluster, "blocks": blocks()}


def test_the_image_block_is_what_the_suite_runs(rig: dict[str, Any]) -> None:
    """Section 1b: the three commands, each run by the suite as written, and what the
    doc says they leave: the version's tag, the commit's tag, the archive and its ref."""
    cmds = commands(rig["blocks"]["image"])
    assert cmds == ["./scripts/setup.sh", "./scripts/build.sh", "./scripts/image.sh"], cmds
    suite = commands((REPO / "scripts" / "test.sh").read_text())
    assert "./scripts/setup.sh" in suite, suite
    assert any(re.fullmatch(r'echo "== build"; ./scripts/build.sh', c) for c in suite), suite
    node: Node = rig["node"]
    version = re.search(r'__version__ = "([^"]+)"',
                        (REPO / "rdma_cni" / "__init__.py").read_text()).group(1)  # type: ignore
    for ref in (f"localhost/rdma-cni:{version}", node.image):
        assert node.podman.run("image", "exists", ref, check=False).returncode == 0, ref
    assert ARCHIVE.stat().st_size > 0
    assert (ARCHIVE.parent / (ARCHIVE.name + ".ref")).read_text().split()[0] == node.image


def _in_dist(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(shlex.split(line), cwd=ARCHIVE.parent, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)


def test_the_archive_loads_into_containerd_as_written(rig: dict[str, Any]) -> None:
    node: Node = rig["node"]
    images = lambda: node.cd.ctr("images", "ls", "-q").split()  # noqa: E731
    for ref in {node.image, shipped_image()} & set(images()):
        node.cd.ctr("images", "rm", ref)
    assert not {node.image, shipped_image()} & set(images())
    (line,) = commands(rig["blocks"]["load-containerd"])
    out = _in_dist(line, {"CONTAINERD_ADDRESS": str(node.cd.sock)})
    assert out.returncode == 0, out.stderr
    # the commit's tag, and the version's, which the manifests name
    assert {node.image, shipped_image()} <= set(images()), (out.stdout, images())


def test_the_archive_loads_into_podman_as_written(rig: dict[str, Any]) -> None:
    node: Node = rig["node"]
    (line,) = commands(rig["blocks"]["load-crio"])
    out = _in_dist(line, node.podman.env)
    assert out.returncode == 0, out.stderr
    for ref in (node.image, shipped_image()):  # "Loaded image: <ref>", both tags
        assert f"Loaded image: {ref}" in out.stdout, out.stdout


def test_deploy_runs_the_daemonset_only_once_the_node_is_labelled(rig: dict[str, Any]) -> None:
    """Section 2: applied, the DaemonSet has no pod on the unlabelled node; the label
    brings it, installed, every probe passing, in the label's mode."""
    node, cluster = rig["node"], rig["cluster"]
    cmds = commands(rig["blocks"]["deploy"])
    apply, rest = cmds[0], "\n".join(cmds[1:])
    cluster.run(apply, {})
    assert cluster.revisions and not node.pod_id  # no pod before the label
    cluster.run(rest, {"node": manifests.NODE_NAME})
    assert node.pod_id and cluster.labels[MODE_LABEL] == "shared"
    conflist = json.loads((node.cni_conf / "10-vpc-cni.conflist").read_text())
    assert [p["type"] for p in conflist["plugins"]] == ["bridge", "rdma-cni"]
    assert (node.cni_bin / "rdma-cni").is_file()
    assert conflist["plugins"][1]["mode"] == KERNEL_MODES["shared"]


def test_doctor_in_the_cluster_as_written(rig: dict[str, Any]) -> None:
    """Section 3: both lines in the node's pod; the installed pieces check out, and the
    exit status is 1 because the rig's NICs are veths without RDMA (no /dev/infiniband);
    the JSON says the same as the lines."""
    node, cluster = rig["node"], rig["cluster"]
    cluster.exit_ok, cluster.output[:] = (1,), []
    try:
        cluster.run(rig["blocks"]["doctor-cluster"],
                    {"rdma-cni pod of the node": node.pod_name})
    finally:
        cluster.exit_ok = (0,)
    text, js = cluster.output
    status = dict((name, st) for st, name in
                  re.findall(r"^\[(\w+) *\] ([\w-]+):", text, re.M))
    # ("restart" reads the DaemonSet's record at /run/rdma-cni, which the rig moves
    # under T: tests/node/test_node.py checks it with the record's path given)
    for name in ("binary", "conflist", "kubelet-sources", "netns-propagation"):
        assert status.get(name) == "OK", text
    assert [n for n, st in status.items() if st == "FAIL"] == ["dev-infiniband"], text
    assert {c["name"]: c["status"].upper() for c in json.loads(js)} == status


def test_the_documented_pod_gets_its_interfaces(rig: dict[str, Any]) -> None:
    """Section 4: the Pod as written (its image the one loaded above): eth1 and eth2 with
    addresses of their NICs' subnets; its command runs nccl_env.sh, which says in the
    container's log why it has nothing to export here (no RDMA device behind a veth)."""
    node, pods, cluster = rig["node"], rig["pods"], rig["cluster"]
    cluster.wait_ready()
    pods.wait_capacity()
    (pod,) = yaml.safe_load_all(rig["blocks"]["pod"])
    (c,) = pod["spec"]["containers"]
    assert c["image"] == "<your NCCL image>"
    count = int(c["resources"]["limits"][RESOURCE])
    w = pods.start(pod["metadata"]["name"], count, annotations=pod["metadata"]["annotations"],
                   command=c["command"])
    rig["work"] = w
    assert len(json.loads(pod["metadata"]["annotations"][ANNOTATION])) == count
    pod_links = links(node.cd.netns_of(w.sandbox))
    assert sorted(pod_links) == ["eth0", "eth1", "eth2", "lo"], pod_links
    for name in ("eth1", "eth2"):
        (addr,) = v4(pod_links[name])
        assert nic_subnet(addr), addr
    (exit_code,) = wait_for(lambda: _exited(pods, w.container), "the container's exit", 60)
    log = (node.cd.tmp / "logs" / pod["metadata"]["name"] / "main.log").read_text()
    said = [line.split(" ", 3)[-1] for line in log.splitlines()]  # CRI: time stream tag text
    assert exit_code != 0 and len(said) == 1 and said[0].startswith("nccl_env.sh: "), log
    assert "not found" not in log, log


def _exited(pods: Workloads, cid: str) -> tuple[int] | None:
    """(exit code,) once the container has exited (CRI ContainerStatus), else None."""
    pb = pods.pb
    st = pods.call("ContainerStatus", pb.ContainerStatusRequest(container_id=cid),
                   pb.ContainerStatusResponse).status
    return (int(st.exit_code),) if st.state == pb.CONTAINER_EXITED else None


def test_ls_through_the_agent_as_written(rig: dict[str, Any]) -> None:
    """Section 5: the documented ``rdma-cni ls`` lists the pod's two interfaces."""
    cluster = rig["cluster"]
    cluster.output[:] = []
    cluster.run(rig["blocks"]["see"], {})
    (out,) = cluster.output
    rows = [line.split() for line in out.splitlines()[1:]]  # POD CONTAINER INTERFACE ...
    assert sorted(r[2] for r in rows if r[0].endswith("nccl-test")) == ["eth1", "eth2"], out


def test_the_documented_metrics_answer(rig: dict[str, Any]) -> None:
    """Section 5's metrics bullet: its URL (the node's address standing for the rig's
    exporter address) answers, with an attachment series per interface of the pod and
    every metric the bullet names."""
    skip_exec_under_chroot()  # the pod and the DaemonSet it reads come from the tests above
    node: Node = rig["node"]
    text = DOC.read_text()
    bullet = text[text.index("- Metrics on each node's address"):]
    bullet = bullet[:bullet.index("\n\n")]
    (url,) = re.findall(r"`(http://[^`]+)`", bullet)
    host, port = url.removeprefix("http://").split("/", 1)[0].split(":")
    assert host == "<node address>" and port == "9469", url  # the manifest's port
    with urllib.request.urlopen(url.replace(f"{host}:{port}", node.exporter), timeout=30) as r:
        body = r.read().decode()
    ours = [line for line in body.splitlines()
            if line.startswith("rdma_cni_attachment_info{") and 'pod="nccl-test"' in line]
    assert sorted(re.search(r'interface="(\w+)"', x).group(1)  # type: ignore[union-attr]
                  for x in ours) == ["eth1", "eth2"], ours
    for name in re.findall(r"`(rdma_\w+)", bullet):
        family = name.removesuffix("_total")  # the client's TYPE line names either
        assert re.search(rf"^# TYPE ({family}|{name}) ", body, re.M), f"{name} is not exported"
    rig["pods"].stop(rig.pop("work"))
