"""The node, deployed from the kustomize base and, in a second run, from the
non-default-paths overlay (every path setting moved: kubelet root, CNI dirs, the
runtime's CRI socket, where this rig's containerd then serves), as they render
(tests/node/manifests.py lists every change): the DaemonSet's pod under podman over a
temp host root, a fake kubelet speaking the real gRPC APIs, workload pods through
containerd's CRI. The tests run in order and share the node; each asserts on what the
system shows (files under the host root, ``ip -j`` in the pod's netns, what the
container sees, the exporter's HTTP answer, the runtime's and the agent's view)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import k8srender
import manifests
import promql
import pytest
import yaml
from cluster import procedures
from cnirunner import k8s_args, run_plugin, vpc_result
from nodelab import MODE, NICS, REPO, RESOURCE, Node, metrics
from support.proc import free_port, wait_for
from workload import ANNOTATION, NAMESPACE, Workloads, links, nic_subnet, pod_cycle, v4

pytestmark = [pytest.mark.root, pytest.mark.node]
NCCL_IN_POD = "/usr/local/bin/nccl_env.sh"
STATE: dict[str, Any] = {}
GHOST_NETNS = "rdnode-ghost"


@pytest.fixture(scope="module")
def pods(node: Node) -> Iterator[Workloads]:
    STATE.clear()
    yield Workloads(node.cd, node.kubelet, node.plugin_socket, node.image, RESOURCE)


def state_files(node: Node) -> list[str]:
    return sorted(str(p.relative_to(node.data)) for p in node.data.rglob("*")
                  if p.is_file() and p.name != "lock")


def entry_of(node: Node) -> dict[str, Any]:
    conflist = json.loads((node.cni_conf / "10-vpc-cni.conflist").read_text())
    assert [p["type"] for p in conflist["plugins"]] == ["bridge", "rdma-cni"]
    return {"name": conflist["name"], "cniVersion": conflist["cniVersion"],
            **conflist["plugins"][1]}


def test_install_put_the_bundle_and_our_entry_on_the_host(node: Node) -> None:
    link = node.cni_bin / "rdma-cni"
    target = os.readlink(link)  # the native front of a versioned tree, its plugin beside
    assert re.fullmatch(r"rdma-cni\.versions/[\w.]+-[0-9a-f]{12}/rdma-cni-front", target), target
    assert (link.parent / target).parent.joinpath("_internal", "libc.so.6").is_file()
    version = subprocess.run([str(link), "--version"], capture_output=True, text=True,
                             timeout=60, check=True)  # the copied plugin runs on this host
    assert version.stdout.startswith("rdma-cni ")
    assert (node.cni_bin / "nccl_env.sh").read_bytes() == \
        (REPO / "scripts" / "nccl_env.sh").read_bytes()
    entry = entry_of(node)
    assert entry["mode"] == "shared-multi"
    assert entry["capabilities"] == {"io.kubernetes.cri.pod-annotations": True}
    assert entry["dataDir"] == str(node.data)
    assert entry["logFile"] == str(node.root / "var/log/rdma-cni/rdma-cni.log")
    # the kubelet's paths follow the kubelet root setting (install --kubelet-dir); the
    # node's address (status.hostIP) is recorded, its NIC kept away from pods
    kubelet = node.kubelet_dir
    assert entry["kubelet"] == {
        "podResourcesSocket": str(kubelet / "pod-resources/kubelet.sock"),
        "checkpointFile": str(kubelet / "device-plugins/kubelet_internal_checkpoint"),
        "devicePluginDir": str(kubelet / "device-plugins")}
    assert entry["nodeIPs"] == [manifests.HOST_IP]
    written = json.loads((node.root / "run/rdma-cni/config.json").read_text())
    assert written == {k: v for k, v in entry.items() if k not in ("name", "cniVersion")}
    log = node.podman.logs(node.pod_id, "install")
    assert re.search(r"kernel \S+ \(>= 4\.18; the plugin brings its own C library\)", log), log
    node.cd.wait_for_config('\\"type\\":\\"rdma-cni\\"')


def test_each_container_holds_only_its_privileges_and_mounts(node: Node) -> None:
    """What podman made of the manifest's securityContext and volumes."""
    want = {"install": (False, {"CAP_CHOWN", "CAP_LEASE"}),
            "cni-watch": (False, {"CAP_CHOWN", "CAP_LEASE"}),
            "device-plugin": (False, set()), "agent": (False, {"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}),
            "exporter": (False, {"CAP_SYS_ADMIN"})}
    seen = node.podman.containers(node.pod_id)
    for name, (privileged, caps) in want.items():
        info = seen[name]
        assert info["HostConfig"]["Privileged"] is privileged, name
        assert set(info.get("EffectiveCaps") or []) == caps, (name, info.get("EffectiveCaps"))
        assert info["HostConfig"]["ReadonlyRootfs"] is True, name
    assert seen["serve"]["HostConfig"]["Privileged"] is True
    for name, info in seen.items():
        sources = {m["Source"] for m in info["Mounts"] if m.get("Type") == "bind"}
        for whole in ("var/log", "var/lib/cni", "run/containerd", "usr"):
            assert str(node.root / whole) not in sources, (name, whole)
        assert "/usr" not in sources and "/var/log" not in sources, name
    cri = {m["Destination"]: m for m in seen["agent"]["Mounts"]}
    sock = str(node.cd.sock)
    assert sock in cri and not cri[sock]["RW"]  # the one socket file, read-only


def test_device_plugin_registered_and_advertises_the_nics(node: Node, pods: Workloads) -> None:
    regs = node.kubelet.wait_registrations(1, timeout=60)
    assert [(r.resource_name, r.endpoint, r.version) for r in regs[:1]] == [
        (RESOURCE, node.plugin_socket.name, "v1beta1")]
    ids, alloc = pods.allocate(1)
    assert len(ids) == 1 and ids[0].split("@")[0] in NICS
    # slotsPerNic (16) capped by each NIC's free addresses: rdnode0's /28 has 14 hosts
    # less its own and the HPC gateway's, rdnode1's less its own
    from support.fakes.kubelet import PluginClient

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
    return node.podman.logs(node.pod_id, "serve") + _read(
        node.root / "var/log/rdma-cni/rdma-cni.log")


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


def test_exporter_shows_the_pods_attachment_and_counters_from_its_netns(node: Node) -> None:
    """The exporter, holding SYS_ADMIN and no other capability (podman's view: the test
    above), enters the pod's netns for the interface counters."""
    body = metrics(node)
    rows = [line for line in body.splitlines() if line.startswith("rdma_cni_attachment_info{")]
    ours = [r for r in rows if f'namespace="{NAMESPACE}"' in r and 'pod="work"' in r]
    assert len(ours) == 1, rows
    assert 'interface="eth1"' in ours[0] and f'address="{STATE["work_addr"]}"' in ours[0]
    assert ours[0].endswith(" 1.0")
    counters = [line for line in body.splitlines()
                if line.startswith("rdma_cni_pod_interface_") and 'pod="work"' in line]
    assert len(counters) == 4, body  # rx/tx bytes and packets of eth1, read inside the pod
    assert 'rdma_cni_exporter_collector_success{collector="attachments"} 1.0' in body


def test_the_exporter_listens_on_the_node_address_only(node: Node) -> None:
    out = subprocess.run(["ss", "-Hltn", f"sport = :{node.exporter_port}"], capture_output=True,
                         text=True, timeout=30, check=True).stdout.split()
    assert f"{manifests.HOST_IP}:{node.exporter_port}" in out, out  # not *: nor 0.0.0.0:


def _agent_status(node: Node) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads((node.root / "run/rdma-cni/agent-status.json")
                                         .read_text())
        return doc
    except (OSError, ValueError):
        return {}


def test_the_agent_asks_the_runtime_at_the_socket_setting(node: Node) -> None:
    deadline = time.monotonic() + 60
    while not (_agent_status(node).get("runtime") or {}).get("version") and \
            time.monotonic() < deadline:
        time.sleep(0.5)
    doc = _agent_status(node)
    assert (doc.get("runtime") or {}).get("version"), (
        doc, node.podman.logs(node.pod_id, "agent")[-3000:])
    assert doc["runtime"]["socket"] == str(node.cd.sock)
    assert doc["runtime"]["version"].startswith("containerd "), doc["runtime"]
    assert doc["viewSuspect"] is False, doc["reasons"]


def test_the_agent_records_the_rdma_netns_mode_against_the_node_mode(node: Node) -> None:
    """Issue 32 item 3, as far as the rig goes (no API server takes the Event here:
    tests/unit/test_agent_netns.py sends it to a fake one): the shipped agent reads the
    RDMA netns mode at its start as this host's RDMA netlink says it, compares it with
    the node's mode, and the exporter publishes the outcome."""
    from rdma_cni.node.rdma_mode import read_netns_mode

    record = wait_for(lambda: _agent_status(node).get("netnsMode"), "the agent's netnsMode",
                      60)
    want = read_netns_mode()  # hostNetwork: the netns the agent reads it in
    assert (record["mode"], record["netnsMode"]) == (MODE, want), record
    body = metrics(node)
    if want is None:
        assert "rdma_cni_netns_mode_mismatch" not in body
    else:
        value = "1.0" if record["mismatch"] else "0.0"
        assert f'rdma_cni_netns_mode_mismatch{{mode="{MODE}",netns_mode="{want}"}} {value}' \
            in body, body


def _holds(node: Node, cid: str) -> list[str]:
    """The store's files of attachment ``cid`` (its state record and address reservation)."""
    out = []
    for p in node.data.rglob("*"):
        if p.is_file() and p.name != "lock" and cid in p.read_text(errors="replace"):
            out.append(str(p.relative_to(node.data)))
    return sorted(out)


def _backdate(node: Node, cid: str) -> None:
    """Attachment ``cid``'s record as if ADD wrote it 300 s ago: the agent gives a younger
    ready record the time a runtime takes to list a sandbox whose ADD just returned."""
    for path in (node.data / "state").glob("*.json"):
        rec = json.loads(path.read_text())
        if rec.get("key", {}).get("containerID") != cid:
            continue
        rec["written"]["boottime"] -= 300
        tmp = path.with_name(f".{path.name}.aged")
        tmp.write_text(json.dumps(rec))
        os.replace(tmp, path)  # the agent reads whole records only


def test_the_agent_releases_an_attachment_the_runtime_does_not_have(node: Node) -> None:
    """A lost DEL: an ADD for a sandbox containerd never made (the plugin run directly),
    whose netns is then gone. The agent (NET_ADMIN and SYS_ADMIN only) asks the runtime
    through the socket setting, gets NOT_FOUND, and frees the state and the address."""
    subprocess.run(["ip", "netns", "del", GHOST_NETNS], capture_output=True, check=False)
    subprocess.run(["ip", "netns", "add", GHOST_NETNS], check=True, timeout=30)
    netns = f"/var/run/netns/{GHOST_NETNS}"
    cid = "9" * 64
    try:
        node.kubelet.set_pod(NAMESPACE, "ghost", {RESOURCE: [f"{list(NICS)[1]}@7"]})
        conf = {**entry_of(node), "prevResult": vpc_result(netns, "198.18.1.250/24"),
                "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {
                    ANNOTATION: json.dumps([{"cniConf": {"name": "rdma"}}])}}}
        add = run_plugin("ADD", conf, binary=str(node.cni_bin / "rdma-cni"),
                         container_id=cid, netns=netns, cni_path=str(node.cni_bin),
                         cni_args=k8s_args(NAMESPACE, "ghost", cid))
        assert add.rc == 0, add
        assert "eth1" in links(netns)
        held = _holds(node, cid)
        assert len(held) >= 2, held  # its state and its address
        _backdate(node, cid)
    finally:
        subprocess.run(["ip", "netns", "del", GHOST_NETNS], capture_output=True, check=False)
    deadline = time.monotonic() + 90
    while _holds(node, cid) and time.monotonic() < deadline:
        time.sleep(0.5)
    status = _agent_status(node)
    assert not _holds(node, cid), (status, node.podman.logs(node.pod_id, "agent")[-3000:])
    assert status["released"] >= 1 or "releasing" in node.podman.logs(node.pod_id, "agent")


def _discovery_paths(node: Node) -> dict[str, tuple[dict[str, str], bool]]:
    """name -> (the target labels Prometheus attaches, honor_labels), for each discovery
    path the manifests ship: the prometheus-operator overlay's ServiceMonitor (as the
    operator turns it into a scrape config) and the pod annotations with the
    `kubernetes-pods` job docs/metrics.md gives."""
    docs = k8srender.render(k8srender.OVERLAYS["prometheus-operator"])
    (sm,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    (endpoint,) = sm["spec"]["endpoints"]
    meta = {"__meta_kubernetes_pod_node_name": manifests.NODE_NAME}
    operator = {"job": svc["metadata"]["name"], "namespace": svc["metadata"]["namespace"],
                "service": svc["metadata"]["name"], "endpoint": endpoint["port"],
                "pod": node.pod_name, "container": "exporter", "instance": node.exporter}
    for r in endpoint.get("relabelings", []):
        operator[r["targetLabel"]] = ";".join(meta[s] for s in r["sourceLabels"])
    job = _documented_pods_job()
    pods = {"job": job["job_name"], "namespace": "kube-system", "pod": node.pod_name,
            "node": manifests.NODE_NAME, "instance": node.exporter}
    return {"ServiceMonitor": (operator, bool(endpoint.get("honorLabels"))),
            "pod annotations": (pods, bool(job.get("honor_labels")))}


def _documented_pods_job() -> dict[str, Any]:
    text = (REPO / "docs" / "metrics.md").read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        doc = yaml.safe_load(block)
        for job in doc.get("scrape_configs", []) if isinstance(doc, dict) else []:
            if job.get("job_name") == "kubernetes-pods":
                return dict(job)
    raise AssertionError("docs/metrics.md shows no kubernetes-pods job")


def test_every_documented_query_answers_from_a_scrape(node: Node, tmp_path: Path) -> None:
    """Three scrapes of the DaemonSet's exporter (the RDMA port series, which need an RDMA
    device this machine lacks, from the same exporter code over a fake sysfs tree) and
    every query of docs/metrics.md, with promtool's engine, for each discovery path."""
    promtool = shutil.which("promtool") or str(REPO / ".venv/tools/bin/promtool")
    if not os.path.exists(promtool):
        pytest.skip("promtool is missing: run ./scripts/setup.sh")
    queries = [q.replace('namespace="team-a"', f'namespace="{NAMESPACE}"')
               .replace('pod="trainer-0"', 'pod="work"')
               for q in promql.documented_queries((REPO / "docs/metrics.md").read_text())]
    assert any('pod="work"' in q for q in queries)
    ports = _fake_port_exporter(tmp_path)
    try:
        scrapes = []
        for _ in range(3):
            scrapes.append((promql.parse(metrics(node)), promql.parse(ports())))
            time.sleep(1)
    finally:
        ports.stop()  # type: ignore[attr-defined]
    for path, (target, honor) in _discovery_paths(node).items():
        series = [promql.stored(ours, target, honor) +
                  promql.stored(fake, {**target, "instance": "fake-sysfs"}, honor)
                  for ours, fake in scrapes]
        ok, out = promql.run(promtool, series, queries, tmp_path)
        assert ok, f"{path}: {out}"


def _fake_port_exporter(tmp: Path) -> Any:
    """The built exporter over a fake sysfs with one RoCE port and its counters."""
    from support.fakes.sysfs import FakeSys

    fs = FakeSys(tmp / "sysfs")
    fs.netdev("ens1", pci="0000:3b:00.0")
    fs.ibdev("mlx5_0", pci="0000:3b:00.0")
    port = "sys/class/infiniband/mlx5_0/ports/1"
    for name, value in (("port_rcv_data", 10), ("port_xmit_data", 20),
                        ("port_rcv_packets", 3), ("port_xmit_packets", 4)):
        fs.write(f"{port}/counters/{name}", str(value))
    fs.write(f"{port}/hw_counters/np_cnp_sent", "7")
    conf = tmp / "conf.json"
    conf.write_text(json.dumps({"mode": "shared", "dataDir": str(tmp / "data"),
                                "metricsFile": str(tmp / "metrics")}))
    port_no = free_port()
    proc = subprocess.Popen([str(REPO / "dist/rdma-cni/rdma-cni"), "exporter", "--config",
                             str(conf), "--sysfs-root", str(tmp / "sysfs"), "--listen",
                             f"127.0.0.1:{port_no}", "--agent-status", str(tmp / "none")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def scrape() -> str:
        import urllib.request

        def get() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port_no}/metrics",
                                            timeout=10) as r:
                    return str(r.read().decode())
            except OSError:
                return None
        return str(wait_for(get, "the fake-sysfs exporter", 30))

    scrape.stop = lambda: (proc.terminate(), proc.wait(10))  # type: ignore[attr-defined]
    return scrape


def _documented_doctor() -> tuple[str, list[str]]:
    """(container, command) of docs/packaging.md's doctor procedure (one kubectl exec)."""
    block = procedures((REPO / "docs" / "packaging.md").read_text())["doctor"]
    (line,) = [x for x in block.splitlines() if x.strip() and not x.startswith("#")]
    argv = shlex.split(line)
    assert argv[:2] == ["kubectl", "-n"] and "exec" in argv, argv
    return argv[argv.index("-c") + 1], argv[argv.index("--") + 1:]


def _doctor(node: Node) -> dict[str, dict[str, str]]:
    """The documented doctor run, with ``--json``, and the record's path as the rig moved
    it (the container's /run/rdma-cni is T's: tests/node/manifests.py)."""
    container, cmd = _documented_doctor()
    record = str(node.host("/run/rdma-cni/config-source.json"))
    out = node.podman.exec(node.pod_id, container, *cmd, "--json", "--config-record", record)
    assert out.stdout.startswith("["), (out.returncode, out.stdout, out.stderr)
    return {c["name"]: c for c in json.loads(out.stdout)}


def test_doctor_runs_in_the_documented_container(node: Node) -> None:
    """Issue 32 item 4: the documented `kubectl exec ... -- rdma-cni doctor` finds the
    node's files through the container's read-only mounts and the paths its environment
    names (the path settings of the rendering, under T here). /dev/infiniband is left
    out: the rig moves it under T, where doctor does not look."""
    by = _doctor(node)
    for name in ("binary", "conflist", "kubelet-sources", "netns-propagation", "restart"):
        assert by[name]["status"] == "ok", by[name]
    assert str(node.cni_bin) in by["binary"]["detail"]  # /host<T><cniBinDir>/rdma-cni
    assert str(node.cni_conf) in by["conflist"]["detail"]
    assert str(node.kubelet_dir / "pod-resources" / "kubelet.sock") in \
        by["kubelet-sources"]["detail"]  # the fake kubelet's socket
    assert by["restart"]["detail"].startswith("not needed"), by["restart"]
    assert by["data-dir"]["status"] == "warn" and "read-only here" in by["data-dir"]["detail"]


def test_an_edited_configmap_is_said_stale_until_the_pod_restarts(node: Node) -> None:
    """Issue 32 item 2: the ConfigMap's file edited in place (as the kubelet updates a
    mounted ConfigMap) makes cni-watch mark the running configuration stale within its
    interval: rdma_cni_config_stale 1 from the exporter, `restart: needed` from doctor.
    Put back, it is not stale any more."""
    mounts = {m["Destination"]: m for m in
              node.podman.containers(node.pod_id)["cni-watch"]["Mounts"]}
    source = Path(mounts["/etc/rdma-cni"]["Source"]) / "config.json"
    original = source.read_bytes()
    interval = 30 + 15  # cni-watch's --interval in the manifest, and some slack
    try:
        source.write_bytes(original.rstrip() + b"\n\n")  # same config, other bytes
        wait_for(lambda: "rdma_cni_config_stale 1.0" in metrics(node),
                 "rdma_cni_config_stale 1", interval)
        restart = _doctor(node)["restart"]
        assert restart["status"] == "warn" and restart["detail"].startswith("needed"), restart
        assert "kubectl rollout restart" in restart["fix"]
        assert "the running configuration is stale" in node.podman.logs(node.pod_id,
                                                                         "cni-watch")
    finally:
        source.write_bytes(original)
    wait_for(lambda: "rdma_cni_config_stale 0.0" in metrics(node),
             "rdma_cni_config_stale 0", interval)


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
    ok, detail = pod_cycle(node.cd, node.kubelet, "after-delete",
                           f"{list(NICS)[1]}@9")  # in-process ADD/DEL
    assert ok, detail
    assert state_files(node)  # only the workload's attachment is left
    pods.stop(w)
    assert state_files(node) == []
