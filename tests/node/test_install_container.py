"""The DaemonSet's install container, run alone from the image with podman (its
command, env and mounts as manifests.py shifts them under a temp host root):
the mode comes from the node label through the bundled ``kubernetes`` client (a fake
API server over HTTPS), and the host gets a versioned tree that needs none of its
userland: the install container no longer looks at the host's C library at all."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import k8srender
import manifests
import pytest
from nodelab import NICS, make_root, shipped_image
from support.fakes.kubeapi import FakeKubeApi
from support.proc import wait_for

pytestmark = [pytest.mark.root, pytest.mark.node]
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MODE_LABEL = "vke.node.rdma.mode"  # where the kubelet puts it
PRIMARY = {"cniVersion": "0.4.0", "name": "vpc-cni", "plugins": [{"type": "bridge"}]}


@pytest.fixture(scope="module")
def rig(image_rig: dict[str, Any]) -> dict[str, Any]:
    return image_rig


def _host(rig: dict[str, Any], name: str) -> Path:
    root = rig["tmp"] / name
    make_root(root, k8srender.paths_of(k8srender.BASE))
    (root / "etc/cni/net.d/10-vpc-cni.conflist").write_text(json.dumps(PRIMARY))
    return root


def run_install(rig: dict[str, Any], root: Path, env: dict[str, str] | None = None,
                mounts: dict[str, str] | None = None,
                hostpaths: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``podman run`` of the manifest's install container; ``hostpaths`` replaces the
    host side of named volumes, ``mounts`` adds host:container mounts."""
    args, command = _podman_args(rig, root, "install", env, mounts, hostpaths)
    return rig["podman"].run("run", "--rm", *args, rig["image"], *command, check=False)


def _podman_args(rig: dict[str, Any], root: Path, name: str, env: dict[str, str] | None,
                 mounts: dict[str, str] | None, hostpaths: dict[str, str] | None = None,
                 ) -> tuple[list[str], list[str]]:
    """The ``podman run`` options and the command of the manifest's container ``name``
    (an init container or a container), its paths under ``root``."""
    ds, cms = manifests.split(k8srender.render(k8srender.BASE))
    pod, _ = manifests.node_pod(ds, root, {shipped_image(): rig["image"]}, "install", 1)
    spec = pod["spec"]
    (c,) = [c for c in spec["initContainers"] + spec["containers"] if c["name"] == name]
    cm_dir, tmp = root / "configmap", root / "container-tmp"
    cm_dir.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    (cm,) = manifests.configmaps(cms, root, manifests.redirected(ds), "shared-multi", list(NICS))
    (cm_dir / "config.json").write_text(cm["data"]["config.json"])
    volumes = {v["name"]: v["hostPath"]["path"] if "hostPath" in v else
               str(cm_dir if "configMap" in v else tmp) for v in spec["volumes"]}
    volumes.update(hostpaths or {})
    # the container's securityContext as the manifest sets it
    sc = c["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["readOnlyRootFilesystem"]
    args = ["--network", "host", "--cap-drop", "ALL", "--read-only",
            "--security-opt", "no-new-privileges"]
    for cap in sc["capabilities"].get("add", []):
        args += ["--cap-add", cap]
    for e in c.get("env", []):
        args += ["-e", f"{e['name']}={e['value']}"]
    for k, v in (env or {}).items():
        args += ["-e", f"{k}={v}"]
    for m in c["volumeMounts"]:
        Path(volumes[m["name"]]).mkdir(parents=True, exist_ok=True)
        args += ["-v", f"{volumes[m['name']]}:{m['mountPath']}" + (":ro" if m.get("readOnly")
                                                                   else "")]
    for host, ctr in (mounts or {}).items():
        args += ["-v", f"{host}:{ctr}:ro"]
    return args, list(c["command"])


def test_mode_comes_from_the_node_label_through_the_kubernetes_client(rig: dict[str, Any]
                                                                      ) -> None:
    root = _host(rig, "label")
    api = FakeKubeApi(rig["tmp"] / "api", "node-test-token",
                      {manifests.NODE_NAME: {"vke.node.rdma.mode": "exclusive"}}).start()
    sa = api.service_account(rig["tmp"] / "api" / "serviceaccount")
    try:
        out = run_install(rig, root, env=api.env(), mounts={str(sa): SA_DIR})
    finally:
        api.stop()
    assert out.returncode == 0, out.stderr
    assert [r.lower() for r in api.requests] == [
        f"/api/v1/nodes/{manifests.NODE_NAME} bearer node-test-token"]
    entry = json.loads((root / "etc/cni/net.d/10-vpc-cni.conflist").read_text())["plugins"][1]
    assert entry["mode"] == "exclusive"  # the label's, not the ConfigMap's shared-multi
    assert "conflist entry (mode exclusive): added to" in out.stderr
    # what the entry was rendered from, for cni-watch to compare (issue 32 item 2)
    record = json.loads((root / "run/rdma-cni/config-source.json").read_text())
    assert (record["label"], record["labelUsed"], record["mode"]) == (
        "exclusive", True, "exclusive")
    assert record["configFile"] == "/etc/rdma-cni/config.json"
    assert record["configSha256"] == hashlib.sha256(
        (root / "configmap" / "config.json").read_bytes()).hexdigest()


def test_a_changed_node_label_is_said_stale_while_cni_watch_runs(rig: dict[str, Any]) -> None:
    """Issue 32 item 2, the label half: the install container renders the entry from the
    label; ``cni-watch`` as the manifest runs it (its two intervals shortened from 30 s
    and 300 s) reads the label again through the kubernetes client, and a label changed
    in the API makes the running configuration stale in the record that the exporter and
    ``doctor`` read; cni-watch says so in its log."""
    root = _host(rig, "relabel")
    nodes = {manifests.NODE_NAME: {MODE_LABEL: "exclusive"}}
    api = FakeKubeApi(rig["tmp"] / "api-relabel", "node-test-token", nodes).start()
    sa = api.service_account(rig["tmp"] / "api-relabel" / "serviceaccount")
    podman, cid = rig["podman"], ""
    try:
        env, mounts = api.env(), {str(sa): SA_DIR}
        assert run_install(rig, root, env=env, mounts=mounts).returncode == 0
        record = root / "run/rdma-cni/config-source.json"
        first = json.loads(record.read_text())["started"]
        args, command = _podman_args(rig, root, "cni-watch", env, mounts)
        i = command.index("--interval")
        assert command[i + 1] == "30", command
        command[i + 1:i + 2] = ["1", "--label-interval", "1"]
        cid = podman.run("run", "-d", *args, rig["image"], *command).stdout.strip()
        rec = lambda: json.loads(record.read_text())  # noqa: E731
        # cni-watch's own start rewrote the record, and its first check came after it
        wait_for(lambda: rec()["started"] != first and rec()["checked"] > rec()["started"],
                 "cni-watch's first check")
        assert rec()["stale"] == [] and rec()["label"] == "exclusive", rec()
        nodes[manifests.NODE_NAME][MODE_LABEL] = "shared"  # the operator relabels the node
        stale = wait_for(lambda: rec()["stale"], "the stale record", 30)
        assert any(MODE_LABEL in s and "shared" in s for s in stale), stale
        out = podman.run("logs", cid)
        logs = out.stdout + out.stderr
        assert "the running configuration is stale" in logs, logs
    finally:
        if cid:
            podman.run("rm", "-f", "-t", "0", cid, check=False)
        api.stop()


def test_install_lays_a_versioned_tree_that_brings_its_c_library(rig: dict[str, Any]) -> None:
    root = _host(rig, "tree")
    out = run_install(rig, root)
    assert out.returncode == 0, out.stderr
    bin_dir = root / "opt/cni/bin"
    target = os.readlink(bin_dir / "rdma-cni")
    name = target.split("/")[1]
    assert target == f"rdma-cni.versions/{name}/rdma-cni-front", target
    tree = bin_dir / "rdma-cni.versions" / name
    assert (tree / "_internal" / "libc.so.6").is_file()
    assert (tree / "_internal" / "ld-linux-x86-64.so.2").is_file()
    assert not (tree / "_internal" / "kubernetes").exists()  # the image's, not the host's
    assert "the plugin brings its own C library" in out.stderr
    size = sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())
    assert size < 40e6, size


def test_a_primary_file_of_another_owner_keeps_it_and_its_in_place_writer(
        rig: dict[str, Any]) -> None:
    """The primary's conflist belongs to another user and a process of the primary holds
    it open for writing when the install container starts, then rewrites it in place.
    With the manifest's capabilities the entry is written with the file's owner kept
    (CHOWN), and the read lease (LEASE, for another user's file) makes install wait for
    the writer and merge its edit: without them the owner became root and the writer's
    edit went to a file no longer at the path."""
    root = _host(rig, "owner")
    conf = root / "etc/cni/net.d/10-vpc-cni.conflist"
    os.chown(conf, 2345, 2346)
    edited = {**PRIMARY, "plugins": [{"type": "bridge", "mtu": 1400}]}
    writer = subprocess.Popen(
        ["python3", "-c", "import os,sys,time; f=open(sys.argv[1],'r+'); time.sleep(2); "
         "f.seek(0); f.truncate(); f.write(sys.argv[2]); f.close()",
         str(conf), json.dumps(edited)])
    try:
        time.sleep(0.3)  # the writer has the file open before install reads it
        out = run_install(rig, root)
    finally:
        assert writer.wait(10) == 0
    assert out.returncode == 0, out.stderr
    st = conf.stat()
    assert (st.st_uid, st.st_gid) == (2345, 2346)
    plugins = json.loads(conf.read_text())["plugins"]
    assert plugins[0] == {"type": "bridge", "mtu": 1400}, plugins  # the writer's edit
    assert plugins[1]["type"] == "rdma-cni", plugins
