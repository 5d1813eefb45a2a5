"""The node, deployed from the manifests as they ship (tests/node/manifests.py lists
every change): the DaemonSet's pod under podman over a temp host root, a fake kubelet
speaking the real gRPC APIs, workload pods through containerd's CRI. The tests run in
order and share the node; each asserts on what the system shows (files under the
host root, ``ip -j`` in the pod's netns, what the container sees, the exporter's
HTTP answer)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_node import ip_json
from nodelab import NICS, REPO, RESOURCE, Node, metrics, wait_for
from workload import NAMESPACE, Workloads, rdma_annotation

pytestmark = [pytest.mark.root, pytest.mark.node]
NCCL_IN_POD = "/usr/local/bin/nccl_env.sh"
STATE: dict[str, Any] = {}


@pytest.fixture(scope="module")
def pods(node: Node) -> Iterator[Workloads]:
    yield Workloads(node.cd, node.kubelet, node.plugin_socket, node.image, RESOURCE)


def links(netns: str) -> dict[str, dict[str, Any]]:
    return {i["ifname"]: i for i in ip_json("addr", "show", netns=netns)}


def v4(link: dict[str, Any]) -> list[str]:
    return [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
            if a["family"] == "inet"]


def nic_subnet(addr: str) -> bool:
    """In a stand-in NIC's /28, not the NIC's own address."""
    import ipaddress

    ip = ipaddress.ip_interface(addr)
    nets = {ipaddress.ip_interface(a).network: a for a, _ in NICS.values()}
    return ip.network in nets and nets[ip.network] != addr


def state_files(node: Node) -> list[str]:
    return sorted(str(p.relative_to(node.data)) for p in node.data.rglob("*")
                  if p.is_file() and p.name != "lock")


def test_install_put_the_bundle_and_our_entry_on_the_host(node: Node) -> None:
    link = node.cni_bin / "rdma-cni"
    target = os.readlink(link)  # the native front of a versioned tree, its plugin beside
    assert re.fullmatch(r"rdma-cni\.d/[\w.]+-[0-9a-f]{12}/rdma-cni-front", target), target
    assert (link.parent / target).parent.joinpath("_internal", "libc.so.6").is_file()
    version = subprocess.run([str(link), "--version"], capture_output=True, text=True,
                             timeout=60, check=True)  # the copied plugin runs on this host
    assert version.stdout.startswith("rdma-cni ")
    assert (node.cni_bin / "nccl_env.sh").read_bytes() == \
        (REPO / "scripts" / "nccl_env.sh").read_bytes()
    conflist = json.loads((node.cni_conf / "10-vpc-cni.conflist").read_text())
    assert [p["type"] for p in conflist["plugins"]] == ["bridge", "rdma-cni"]
    entry = conflist["plugins"][1]
    assert entry["mode"] == "shared-multi"
    assert entry["capabilities"] == {"io.kubernetes.cri.pod-annotations": True}
    assert entry["dataDir"] == str(node.data)
    written = json.loads((node.root / "run/rdma-cni/config.json").read_text())
    assert written == entry
    log = node.podman.logs(node.pod_id, "install")
    assert re.search(r"kernel \S+ \(>= 4\.18; the plugin brings its own C library\)", log), log
    node.cd.wait_for_config('\\"type\\":\\"rdma-cni\\"')


def test_device_plugin_registered_and_advertises_the_nics(node: Node, pods: Workloads) -> None:
    regs = node.kubelet.wait_registrations(1, timeout=60)
    assert [(r.resource_name, r.endpoint, r.version) for r in regs[:1]] == [
        (RESOURCE, node.plugin_socket.name, "v1beta1")]
    ids, alloc = pods.allocate(1)
    assert len(ids) == 1 and ids[0].split("@")[0] in NICS
    # slotsPerNic (16) capped by each NIC's free addresses: rdnode0's /28 has 14 hosts
    # less its own and the HPC gateway's, rdnode1's less its own
    from fakekubelet import PluginClient

    client = PluginClient(str(node.plugin_socket))
    try:
        devs = next(iter(client.list_and_watch()))
    finally:
        client.close()
    per_nic = {nic: sum(d.ID.split("@")[0] == nic for d in devs) for nic in NICS}
    assert per_nic == {"rdnode0": 12, "rdnode1": 13}
    assert all(d.health == "Healthy" for d in devs)
    assert [(m.container_path, m.host_path, m.read_only) for m in alloc.mounts] == [
        (NCCL_IN_POD, str(node.cni_bin / "nccl_env.sh"), True)]


def test_every_probe_of_the_manifest_passes(node: Node) -> None:
    ran = []
    for name, probes in node.probes.items():
        for kind, probe in probes.items():
            if "exec" in probe:
                out = wait_for(lambda n=name, p=probe: _probe_ok(node, n, p),
                               f"{kind} of {name}", timeout=60)
                ran.append((name, kind, out))
            else:
                assert probe["httpGet"]["path"] == "/metrics"
                assert "rdma_cni_exporter_collector_success" in metrics(node)
                ran.append((name, kind, "GET /metrics 200"))
    assert {n for n, _, _ in ran} == {"cni-watch", "agent", "serve", "device-plugin",
                                      "exporter"}
    assert len(ran) == 10


def _probe_ok(node: Node, name: str, probe: dict[str, Any]) -> str | None:
    out = node.podman.exec(node.pod_id, name, *probe["exec"]["command"])
    return "exit 0" if out.returncode == 0 else None


def test_a_probe_fails_when_its_component_is_broken(node: Node) -> None:
    """The serve probe against a socket nobody serves, cni-watch's against an empty dir."""
    out = node.podman.exec(node.pod_id, "serve", "rdma-cni", "probe", "serve", "--socket",
                           "/run/no-such.sock")
    assert out.returncode == 1 and "is missing" in out.stderr
    out = node.podman.exec(node.pod_id, "cni-watch", "rdma-cni", "probe", "cni-watch",
                           "--cni-conf-dir", "/tmp")
    assert out.returncode == 1 and "no CNI config in /tmp" in out.stderr


def _serve_listens(node: Node) -> bool:
    """The DaemonSet's resident server's socket is in place (under the node's /run): it
    is renamed there only once it listens."""
    try:
        return stat.S_ISSOCK((node.root / "run/rdma-cni/rdma-cni.sock").lstat().st_mode)
    except OSError:
        return False


def test_workload_pod_gets_eth1_and_what_allocate_returned(node: Node, pods: Workloads) -> None:
    # the serve container is up before the pod (the probe test waits for it too; where
    # that cannot run, under a chroot, a pod started first is served in-process, rightly)
    wait_for(lambda: _serve_listens(node), "the resident server's socket", timeout=60)
    w = pods.start("work")
    STATE["work"] = w
    netns = node.cd.netns_of(w.sandbox)
    pod = links(netns)
    assert sorted(pod) == ["eth0", "eth1", "lo"]
    assert v4(pod["eth0"])[0].startswith("198.18.1.")
    (addr,) = v4(pod["eth1"])
    assert nic_subnet(addr), addr
    STATE["work_addr"] = addr
    # the ADD went through the DaemonSet's resident server
    assert re.search(r"resident ADD \w+ exit 0", _serve_log(node)), _serve_log(node)
    code, env, _ = pods.exec(w.container, "env")
    assert code == 0
    for k, v in w.allocation.envs.items():
        assert f"{k}={v}" in env.splitlines()
    assert w.allocation.envs["RDMA_CNI_DEVICE_IDS"] == ",".join(w.ids)
    code, mountinfo, _ = pods.exec(w.container, "cat", "/proc/self/mountinfo")
    line = next(m for m in mountinfo.splitlines() if f" {NCCL_IN_POD} " in m)
    assert " ro," in line or " ro " in line
    devices = [(d.container_path, d.host_path) for d in w.allocation.devices]
    assert devices == []  # no /dev/infiniband here: Allocate gives none, the pod has none


def _serve_log(node: Node) -> str:
    return node.podman.logs(node.pod_id, "serve") + _read(node.root / "var/log/rdma-cni.log")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_nccl_env_in_the_pod_runs_and_says_why_it_fails(node: Node, pods: Workloads) -> None:
    w = STATE["work"]
    code, out, err = pods.exec(w.container, NCCL_IN_POD)
    assert code != 0 and out == ""
    assert err.startswith("nccl_env.sh: ") and len(err.strip().splitlines()) == 1, err
    assert not re.search(r"not found|syntax error|unexpected|Permission denied", err), err
    code, out, err = pods.exec(w.container, "sh", "-c",
                               f". {NCCL_IN_POD}; echo sourced-returned-$?")
    assert code == 0 and re.search(r"sourced-returned-[1-9]", out), (out, err)


def test_exporter_shows_the_pods_attachment(node: Node) -> None:
    body = metrics(node)
    rows = [line for line in body.splitlines() if line.startswith("rdma_cni_attachment_info{")]
    ours = [r for r in rows if f'namespace="{NAMESPACE}"' in r and 'pod="work"' in r]
    assert len(ours) == 1, rows
    assert 'interface="eth1"' in ours[0] and f'address="{STATE["work_addr"]}"' in ours[0]
    assert ours[0].endswith(" 1.0")


def _pod_cycle(node: Node, name: str, device: str) -> tuple[bool, str]:
    """One RDMA pod through the CRI: started, checked for eth1, stopped, removed."""
    node.kubelet.set_pod(NAMESPACE, name, {RESOURCE: [device]}, container="main")
    try:
        config = node.cd.pod_config(name, f"uid-{name}", rdma_annotation(1), NAMESPACE)
        sid = node.cd.run_pod(name, f"uid-{name}", config=config)
    except Exception as e:
        return False, f"RunPodSandbox: {e}"
    try:
        pod = links(node.cd.netns_of(sid))
        return ("eth1" in pod and nic_subnet(v4(pod["eth1"])[0])), json.dumps(sorted(pod))
    finally:
        node.cd.stop_pod(sid)
        node.cd.remove_pod(sid)


def _upgrade_image(node: Node) -> str:
    """A second tag whose host plugin differs (one more file in /opt/rdma-cni-host)."""
    ref = f"localhost/rdma-cni-node-test:upgrade-{node.pod_name[-6:]}"
    env = node.podman.env
    ctr = sh_env(env, "buildah", "from", "--quiet", node.image).strip()
    try:
        sh_env(env, "buildah", "run", "--network", "none", ctr, "sh", "-c",
               "echo upgraded > /opt/rdma-cni-host/UPGRADE-MARK")
        image_id = sh_env(env, "buildah", "commit", "--quiet", ctr, ref).strip()
    finally:
        sh_env(env, "buildah", "rm", ctr)
    node.podman.images.append(image_id)
    return ref


def sh_env(env: dict[str, str], *cmd: str) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, f"{' '.join(cmd)}: {out.stderr[-2000:]}"
    return out.stdout


def test_image_upgrade_while_pods_start_loses_no_add(node: Node) -> None:
    new = _upgrade_image(node)
    results: list[tuple[str, bool, str]] = []
    phase = {"now": "before"}
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            name, device = f"up{i}", f"{list(NICS)[i % 2]}@{i % 8}"
            ok, detail = _pod_cycle(node, name, device)
            results.append((phase["now"], ok, f"{name}: {detail}"))
            i += 1

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(results) >= 2, "pods before the upgrade", 120)
        registrations = len(node.kubelet.registrations)
        phase["now"] = "during"
        node.remove()                   # the rolling update deletes the old pod ...
        node.play(new)                  # ... and creates one from the new template
        node.kubelet.wait_registrations(registrations + 1, timeout=60)
        phase["now"] = "after"
        wait_for(lambda: sum(p == "after" for p, _, _ in results) >= 2, "pods after", 120)
    finally:
        stop.set()
        thread.join(timeout=180)
    failed = [r for r in results if not r[1]]
    assert not failed, failed
    assert sum(p == "during" for p, _, _ in results) >= 1, results
    assert (node.cni_bin / "rdma-cni").resolve().parent.joinpath(
        "UPGRADE-MARK").read_text() == "upgraded\n"  # the link names the new tree
    print(f"\nupgrade: {len(results)} pod ADDs, "
          f"{sum(p == 'during' for p, _, _ in results)} during the upgrade, 0 lost")
    STATE["upgrade_adds"] = len(results)


def test_deleting_the_node_pod_leaves_pods_and_the_primary_working(node: Node,
                                                                  pods: Workloads) -> None:
    w = STATE["work"]
    start = time.monotonic()
    warnings = node.remove()
    # every container stops on SIGTERM (as PID 1 too), none is killed after the grace
    assert "SIGKILL" not in warnings and time.monotonic() - start < 10, warnings
    assert not (node.root / "run/rdma-cni/rdma-cni.sock").exists()
    conflist = json.loads((node.cni_conf / "10-vpc-cni.conflist").read_text())
    assert [p["type"] for p in conflist["plugins"]] == ["bridge", "rdma-cni"]
    assert v4(links(node.cd.netns_of(w.sandbox))["eth1"]) == [STATE["work_addr"]]
    plain = node.cd.run_pod("plain", "uid-plain")           # the primary chain alone
    pod = links(node.cd.netns_of(plain))
    assert sorted(pod) == ["eth0", "lo"] and v4(pod["eth0"])[0].startswith("198.18.1.")
    node.cd.stop_pod(plain)
    node.cd.remove_pod(plain)
    ok, detail = _pod_cycle(node, "after-delete", f"{list(NICS)[1]}@9")  # in-process ADD/DEL
    assert ok, detail
    assert state_files(node)  # only the workload's attachment is left
    pods.stop(w)
    assert state_files(node) == []
