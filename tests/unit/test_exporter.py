"""rdma-cni exporter: collectors over fake sysfs, a temp store and a metrics
file, served on a loopback port and scraped over HTTP."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator, Sequence
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.fakes.sysfs import FakeSys

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.errors import ConfigError
from rdma_cni.ipam.allocator import build_pool
from rdma_cni.kube.exporter import build_registry, load_config, parse_listen, serve
from rdma_cni.kube.exporter.attachments import IfStats, parse_state
from rdma_cni.kube.exporter.capacity import HostNic, Settings, capacity
from rdma_cni.kube.exporter.ports import parse_rate
from rdma_cni.kube.exporter.ports import parse_state as parse_port_state
from rdma_cni.store import metrics_file
from rdma_cni.store.core import Store
from rdma_cni.store.state import AttachmentState
from rdma_cni.store.view import StoreView
from rdma_cni.vocab.attachment import AttachmentKey

IB = "sys/class/infiniband"
KEY = AttachmentKey("vpc-cni", "c0ffee" * 4, "eth0")
NETNS = "/var/run/netns/pod-x"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _get(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def _names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def _fake_tree(root: Path) -> Sysfs:
    fs = FakeSys(root)
    fs.netdev("eth1", pci="0000:3b:00.0", numa=0)
    fs.ibdev("mlx5_0", pci="0000:3b:00.0", uverbs="uverbs0")
    fs.gid("mlx5_0", 1, 0, "fe80::1", "RoCE v2", "eth1")
    port = f"{IB}/mlx5_0/ports/1"
    for name, value in (("port_rcv_data", 1000), ("port_xmit_data", 250),
                        ("port_rcv_packets", 10), ("port_xmit_packets", 5),
                        ("port_rcv_errors", 0), ("port_xmit_discards", 3)):
        fs.write(f"{port}/counters/{name}", str(value))
    for name, value in (("np_cnp_sent", 7), ("rp_cnp_handled", 6), ("out_of_sequence", 2),
                        ("np_ecn_marked_roce_packets", 9), ("lifespan", 10),
                        # other drivers' units (bnxt_re, irdma): bytes, objects in use
                        ("rx_bytes", 4096), ("ip4TxOcts", 512), ("active_qps", 3),
                        ("watermark_qps", 8)):
        fs.write(f"{port}/hw_counters/{name}", str(value))
    fs.write(f"{port}/phys_state", "5: LinkUp")
    fs.unreadable(f"{port}/counters/broken")  # EINVAL-like: skipped
    # a second device: DOWN, 25G, no hw_counters at all
    fs.netdev("eth2", pci="0000:3c:00.0", numa=0, ifindex=3)
    fs.ibdev("mlx5_1", pci="0000:3c:00.0", state="1: DOWN", rate="25 Gb/sec (1X EDR)")
    fs.gid("mlx5_1", 1, 0, "fe80::2", "RoCE v2", "eth2")
    fs.write(f"{IB}/mlx5_1/ports/1/counters/port_rcv_data", "8")
    return Sysfs(str(root))


def _state(ifaces: list[dict[str, Any]], mode: str = "shared-multi") -> AttachmentState:
    return AttachmentState.from_json({
        "status": "ready", "mode": mode, "netns": NETNS, "pod": "team-a/trainer-0",
        "podUID": "u1", "interfaces": ifaces, "result": None})


def _iface(name: str, nic: str, addr: str) -> dict[str, Any]:
    return {"name": name, "nic": nic, "kind": "macvlan", "addresses": [addr], "k": 0,
            "tmp": "t", "mtu": 1500, "table": 100}


HOST = {
    "eth1": HostNic((IPv4Interface("198.51.100.1/28"),), IPv4Address("198.51.100.14")),
    "eth2": HostNic((IPv4Interface("203.0.113.1/29"),), None),
}


def _host(names: Sequence[str]) -> tuple[dict[str, HostNic], set[IPv4Address]]:
    return {n: HOST[n] for n in names if n in HOST}, {IPv4Address("203.0.113.1")}


def _stats(netns: str, ifnames: Sequence[str]) -> dict[str, IfStats]:
    assert netns == NETNS
    return {n: IfStats(4096, 2048, 4, 2) for n in ifnames if n == "eth1"}


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Any]:
    sysfs = _fake_tree(tmp_path / "root")
    data = tmp_path / "data"
    store = Store(str(data))
    store.put_state(KEY, _state([_iface("eth1", "eth1", "198.51.100.2/28"),
                                 _iface("eth2", "eth2", "203.0.113.2/29")]))
    store.reserve_ip("198.51.100.0/28", IPv4Address("198.51.100.2"), KEY, "eth1")
    store.reserve_ip("198.51.100.0/28", IPv4Address("198.51.100.3"), KEY, "eth9")
    store.reserve_ip("203.0.113.0/29", IPv4Address("203.0.113.2"), KEY, "eth2")
    (tmp_path / "run").mkdir()
    metrics = str(tmp_path / "run" / "metrics")
    for code, secs in ((0, 0.02), (0, 0.3), (101, 0.004)):
        metrics_file.record(metrics, "ADD", code, secs)
    metrics_file.record(metrics, "DEL", 0, 0.01)
    raw = {"cniVersion": "1.0.0", "name": "rdma", "mode": "shared-multi",
           "devices": ["eth1", "eth2"], "dataDir": str(data), "metricsFile": metrics,
           "slotsPerNic": 8}
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(json.dumps(raw))
    return {"sysfs": sysfs, "conf": str(conf_file), "data": data, "metrics": metrics}


@pytest.fixture
def scrape(node: dict[str, Any]) -> Iterator[Any]:
    servers = []

    def run(stats: Any = _stats, host: Any = _host) -> Samples:
        conf, raw = load_config(node["conf"])
        registry = build_registry(conf, raw, node["sysfs"], stats, host)
        server = serve(registry, "127.0.0.1", 0)
        servers.append(server)
        return _scrape(server.server_port)

    yield run
    for s in servers:
        s.shutdown()
        s.server_close()


def test_port_counters_generic_and_well_known(scrape: Any) -> None:
    s = scrape()
    lab = {"device": "mlx5_0", "port": "1"}
    # one unit per name: the 4-octet-word counters only as bytes, never beside packets
    words = {("rdma_port_counter_total", frozenset({**lab, "counter": c}.items()))
             for c in ("port_rcv_data", "port_xmit_data")}
    assert not words & set(s)
    assert _get(s, "rdma_port_counter_total", **lab, counter="port_xmit_discards") == 3
    assert _get(s, "rdma_port_receive_bytes_total", **lab) == 4000  # 4-octet words
    assert _get(s, "rdma_port_transmit_bytes_total", **lab) == 1000
    assert _get(s, "rdma_port_receive_packets_total", **lab) == 10
    assert _get(s, "rdma_port_hw_counter_total", **lab, counter="np_cnp_sent") == 7
    assert _get(s, "rdma_port_hw_counter_total", **lab,
                counter="np_ecn_marked_roce_packets") == 9
    # one unit per name in hw_counters too: bytes and objects in use have their own
    assert _get(s, "rdma_port_hw_bytes_total", **lab, counter="rx_bytes") == 4096
    assert _get(s, "rdma_port_hw_bytes_total", **lab, counter="ip4TxOcts") == 512
    assert _get(s, "rdma_port_hw_objects", **lab, counter="active_qps") == 3
    assert _get(s, "rdma_port_hw_objects", **lab, counter="watermark_qps") == 8
    events = {dict(k[1])["counter"] for k in s if k[0] == "rdma_port_hw_counter_total"}
    assert events == {"np_cnp_sent", "rp_cnp_handled", "out_of_sequence",
                      "np_ecn_marked_roce_packets"}, events
    counters = {dict(k[1]).get("counter") for k in s if k[0].startswith("rdma_port_")}
    assert "lifespan" not in counters and "broken" not in counters
    # the device without hw_counters still has its port counters, and no hw series
    assert _get(s, "rdma_port_receive_bytes_total", device="mlx5_1", port="1") == 32
    assert not [k for k in s if k[0] == "rdma_port_hw_counter_total"
                and dict(k[1])["device"] == "mlx5_1"]


def test_port_state_link_layer_and_speed(scrape: Any) -> None:
    s = scrape()
    up, down = {"device": "mlx5_0", "port": "1"}, {"device": "mlx5_1", "port": "1"}
    assert _get(s, "rdma_port_state", **up, state="ACTIVE") == 1
    assert _get(s, "rdma_port_state", **up, state="DOWN") == 0
    assert _get(s, "rdma_port_state", **down, state="ACTIVE") == 0
    assert _get(s, "rdma_port_state", **down, state="DOWN") == 1
    assert _get(s, "rdma_port_phys_state", **up, state="LinkUp") == 1
    assert _get(s, "rdma_port_info", **up, link_layer="Ethernet", netdev="eth1") == 1
    assert _get(s, "rdma_port_speed_bytes_per_second", **up) == 100e9 / 8
    assert _get(s, "rdma_port_speed_bytes_per_second", **down) == 25e9 / 8


def test_attachment_info_and_pod_traffic(scrape: Any) -> None:
    s = scrape()
    info = {"namespace": "team-a", "pod": "trainer-0", "container_id": KEY.container_id,
            "mode": "shared-multi"}
    assert _get(s, "rdma_cni_attachment_info", **info, interface="eth1", nic="eth1",
                address="198.51.100.2/28") == 1
    assert _get(s, "rdma_cni_attachment_info", **info, interface="eth2", nic="eth2",
                address="203.0.113.2/29") == 1
    pod = {"namespace": "team-a", "pod": "trainer-0", "interface": "eth1"}
    assert _get(s, "rdma_cni_pod_interface_receive_bytes_total", **pod) == 4096
    assert _get(s, "rdma_cni_pod_interface_transmit_bytes_total", **pod) == 2048
    assert _get(s, "rdma_cni_pod_interface_receive_packets_total", **pod) == 4
    assert _get(s, "rdma_cni_attachments", status="ready") == 1


def test_vanished_netns_drops_only_traffic(scrape: Any) -> None:
    def gone(netns: str, ifnames: Sequence[str]) -> dict[str, IfStats]:
        raise FileNotFoundError(netns)

    s = scrape(stats=gone)
    assert "rdma_cni_pod_interface_receive_bytes_total" not in _names(s)
    assert "rdma_cni_attachment_info" in _names(s)
    assert _get(s, "rdma_cni_exporter_collector_success", collector="attachments") == 1


def test_ipam_free_and_reserved_addresses(scrape: Any) -> None:
    s = scrape()
    a = {"nic": "eth1", "subnet": "198.51.100.0/28"}
    # .2-.14 minus the gateway .14: 12 assignable; .2 and .3 reserved
    assert _get(s, "rdma_cni_ipam_pool_addresses", **a) == 12
    assert _get(s, "rdma_cni_ipam_reserved_addresses", **a) == 2
    assert _get(s, "rdma_cni_ipam_free_addresses", **a) == 10
    b = {"nic": "eth2", "subnet": "203.0.113.0/29"}
    assert _get(s, "rdma_cni_ipam_pool_addresses", **b) == 5  # .2-.6
    assert _get(s, "rdma_cni_ipam_free_addresses", **b) == 4


def test_slots_shared_multi(scrape: Any) -> None:
    s = scrape()
    lab = {"resource": "vke.volcengine.com/rdma", "mode": "shared-multi"}
    assert _get(s, "rdma_cni_slots_capacity", **lab) == 8 + 5  # slotsPerNic 8, eth2 capped
    assert _get(s, "rdma_cni_slots_allocated", **lab) == 2


def test_operations_counts_and_histogram(scrape: Any) -> None:
    s = scrape()
    assert _get(s, "rdma_cni_operations_total", command="ADD", result="success", code="0") == 2
    assert _get(s, "rdma_cni_operations_total", command="ADD", result="error", code="101") == 1
    assert _get(s, "rdma_cni_operations_total", command="DEL", result="success", code="0") == 1
    h = {"command": "ADD", "result": "success"}
    assert _get(s, "rdma_cni_operation_duration_seconds_count", **h) == 2
    assert _get(s, "rdma_cni_operation_duration_seconds_sum", **h) == pytest.approx(0.32)
    assert _get(s, "rdma_cni_operation_duration_seconds_bucket", **h, le="0.025") == 1
    assert _get(s, "rdma_cni_operation_duration_seconds_bucket", **h, le="0.5") == 2
    assert _get(s, "rdma_cni_operation_duration_seconds_bucket", **h, le="+Inf") == 2


def test_failing_source_costs_only_its_metrics(scrape: Any) -> None:
    def broken(names: Sequence[str]) -> tuple[dict[str, HostNic], set[IPv4Address]]:
        raise OSError("netlink unavailable")

    s = scrape(host=broken)
    assert _get(s, "rdma_cni_exporter_collector_success", collector="capacity") == 0
    assert _get(s, "rdma_cni_exporter_collector_success", collector="rdma_ports") == 1
    assert "rdma_cni_slots_capacity" not in _names(s)
    assert "rdma_port_counter_total" in _names(s)


def test_exporter_never_changes_the_data_dir(scrape: Any, node: dict[str, Any]) -> None:
    data: Path = node["data"]
    (data / "state" / ".tmp-999999999-dead-x.json").write_text("{")  # "orphan" temp
    (data / "state" / "junk.json").write_text("not json")
    before = sorted((p.relative_to(data), p.read_bytes()) for p in data.rglob("*") if p.is_file())
    scrape()
    after = sorted((p.relative_to(data), p.read_bytes()) for p in data.rglob("*") if p.is_file())
    assert before == after


def test_capacity_by_mode() -> None:
    pool = build_pool("eth1", [IPv4Interface("198.51.100.1/28")], None, [], {}, True)
    other = build_pool("eth2", [IPv4Interface("203.0.113.1/28")], None, [], {}, True)
    pools = {"eth1": pool, "eth2": other}
    for mode, expect in (("shared", 2), ("exclusive", 2), ("shared-multi", 13 + 13),
                         ("shared-host", 13)):
        settings = Settings(mode, "r", slots_per_nic=16, host_slots=16)
        assert capacity(settings, ["eth1", "eth2"], pools) == expect, mode
    one = {"eth1": pool, "eth2": pool}  # one subnet: its 13 addresses counted once
    for mode, expect in (("shared-multi", 13), ("shared-host", 6)):
        settings = Settings(mode, "r", slots_per_nic=16, host_slots=16)
        assert capacity(settings, ["eth1", "eth2"], one) == expect, mode
    assert capacity(Settings("shared-host", "r", host_slots=4), ["eth1"], pools) == 4
    assert capacity(Settings("shared-host", "r"), [], {}) == 0
    assert capacity(Settings("shared-multi", "r"), ["eth3"], pools) == 0  # no pool


def test_store_view_reads_states_tolerantly(tmp_path: Path) -> None:
    Store(str(tmp_path)).put_state(KEY, _state([_iface("eth1", "eth1", "198.51.100.2/28")]))
    (tmp_path / "state" / "bad.json").write_text("[1]")
    states = StoreView(str(tmp_path)).states()
    assert len(states) == 1
    att = parse_state(states[0])
    assert (att.namespace, att.pod, att.netns) == ("team-a", "trainer-0", NETNS)
    assert parse_state(AttachmentState.from_json({"pod": "solo", "key": {}})).pod == "solo"


@pytest.mark.parametrize(("text", "bps"), [
    ("100 Gb/sec (4X EDR)", 100e9), ("25 Gb/sec (1X EDR)", 25e9),
    ("2.5 Gb/sec (1X SDR)", 2.5e9), ("10 Mb/sec", 10e6), ("", None), ("fast", None),
])
def test_parse_rate(text: str, bps: float | None) -> None:
    assert parse_rate(text) == bps


def test_parse_port_state() -> None:
    assert parse_port_state("4: ACTIVE") == "ACTIVE"
    assert parse_port_state("5: LinkUp") == "LinkUp"
    assert parse_port_state(None) is None


@pytest.mark.parametrize(("text", "want"), [
    ("127.0.0.1:9999", ("127.0.0.1", 9999)), (":9469", ("0.0.0.0", 9469)),
    ("[::1]:80", ("::1", 80)), ("0.0.0.0", ("0.0.0.0", 9469)),
])
def test_parse_listen(text: str, want: tuple[str, int]) -> None:
    assert parse_listen(text) == want


def test_parse_listen_rejects_garbage() -> None:
    with pytest.raises(ConfigError):
        parse_listen("host:port")


def test_load_config_defaults_metrics_file(tmp_path: Path) -> None:
    from rdma_cni.kube.exporter import metrics_path

    f = tmp_path / "c.json"
    f.write_text(json.dumps({"mode": "shared"}))
    conf, raw = load_config(str(f))
    assert conf.mode == "shared" and metrics_path(raw) == "/run/rdma-cni/metrics"
    f.write_text("[]")
    with pytest.raises(ConfigError):
        load_config(str(f), conf_dir=str(tmp_path / "none"))


def test_per_pod_start_labels_only_on_the_attachment_info(scrape: Any,
                                                          node: dict[str, Any]) -> None:
    """Container IDs and addresses, new at every pod start, label only the info series of
    the attachment, which goes with it; no other series carries them."""
    s = scrape()
    churning = {"container_id", "address", "ip", "sandbox", "netns"}
    carriers = {name for name, labels in s if churning & {k for k, _ in labels}}
    assert carriers == {"rdma_cni_attachment_info"}, carriers
    store = Store(str(node["data"]))
    store.release_ips(KEY)
    store.purge(KEY)  # the pod's DEL
    after = scrape()
    assert "rdma_cni_attachment_info" not in _names(after)
    assert not [k for k in after if churning & {lab for lab, _ in k[1]}]


def test_the_exporter_never_listens_on_the_fabric() -> None:
    from rdma_cni.kube.exporter import check_listen

    fabric = {"198.51.100.1": "ens5", "198.51.100.65": "ens6"}
    check_listen("192.0.2.10", fabric)  # the node's address
    check_listen("127.0.0.1", fabric)
    for every in ("0.0.0.0", "::"):
        with pytest.raises(ConfigError, match="refusing to listen on every address"):
            check_listen(every, fabric)
    with pytest.raises(ConfigError, match=re.escape("refusing to listen on 198.51.100.65: an "
                                                    "address of RDMA NIC ens6, the fabric "
                                                    "pods share")):
        check_listen("198.51.100.65", fabric)


def test_the_default_listen_address_is_the_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    from rdma_cni.kube.exporter import default_listen

    monkeypatch.setenv("HOST_IP", "192.0.2.10")
    assert parse_listen(default_listen()) == ("192.0.2.10", 9469)
    monkeypatch.setenv("HOST_IP", "2001:db8::10")
    assert parse_listen(default_listen()) == ("2001:db8::10", 9469)
    monkeypatch.delenv("HOST_IP")
    assert parse_listen(default_listen()) == ("127.0.0.1", 9469)


def _own_nic_kernel(default_via: str | None) -> Any:
    """The node's netns over the in-memory kernel: eth1 (198.51.100.1/28, an RDMA NIC in
    ``_fake_tree``) and eth2 (203.0.113.1/29), with the default route through eth1 if
    ``default_via``."""
    from support.fakes.netlink import FakeKernel

    from rdma_cni.vocab.netlink import Route

    kernel = FakeKernel()
    port = kernel.port(kernel.host)
    for name, iface in (("eth1", "198.51.100.1/28"), ("eth2", "203.0.113.1/29")):
        kernel.add_nic(kernel.host, name)
        port.add_address(name, IPv4Interface(iface))
    if default_via is not None:
        port.add_route(Route("0.0.0.0/0", default_via, port.require("eth1").index, 254,
                             onlink=True))
    return port


@pytest.mark.parametrize("default_via, node_ips", [
    (None, ["198.51.100.1"]),  # eth1 holds $HOST_IP
    ("198.51.100.14", []),  # eth1 carries the default route
])
def test_the_nodes_own_rdma_nic_is_not_the_fabric(tmp_path: Path, default_via: str | None,
                                                  node_ips: list[str]) -> None:
    """A RoCE-capable primary NIC holding the node's address: the exporter listens on
    $HOST_IP there; the other RDMA NIC's address is still refused."""
    from rdma_cni.kube.exporter import check_listen, fabric_addresses
    from rdma_cni.node.primary import primary_nics

    port = _own_nic_kernel(default_via)
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(json.dumps({"mode": "shared-multi"}))  # discovery: eth1, eth2
    conf, _ = load_config(str(conf_file))
    sysfs = _fake_tree(tmp_path / "root")
    assert fabric_addresses(conf, sysfs, _host) == {"198.51.100.1": "eth1",
                                                    "203.0.113.1": "eth2"}
    fabric = fabric_addresses(conf, sysfs, _host,
                              lambda names, ips: primary_nics(port, names, ips), node_ips)
    assert fabric == {"203.0.113.1": "eth2"}
    check_listen("198.51.100.1", fabric)  # $HOST_IP on the node's own NIC
    with pytest.raises(ConfigError, match=re.escape("refusing to listen on 203.0.113.1: an "
                                                    "address of RDMA NIC eth2")):
        check_listen("203.0.113.1", fabric)


def test_the_host_ip_is_a_node_address_when_it_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from rdma_cni.kube.exporter import node_addresses

    monkeypatch.setenv("HOST_IP", "2001:db8::10")
    assert node_addresses() == ["2001:db8::10"]
    for bad in ("", "node-1", "198.51.100.1:9469"):
        monkeypatch.setenv("HOST_IP", bad)
        assert node_addresses() == []


@pytest.mark.parametrize("pinned", [None, ["eth1", "eth2"]])
def test_exclusive_nics_in_pods_count_in_capacity_and_allocated(
        tmp_path: Path, pinned: list[str] | None) -> None:
    """An exclusive NIC in a pod is gone from the host's sysfs: the node's capacity still
    counts it (the device plugin keeps it Healthy) and it is allocated. Before, capacity
    fell by every NIC in use and allocated read 0 whenever NICs were in use."""
    from rdma_cni.kube.exporter.capacity import CapacityCollector

    fake = FakeSys(tmp_path / "root")
    for i, (netdev, pci) in enumerate((("eth1", "0000:3b:00.0"), ("eth2", "0000:5e:00.0"))):
        fake.netdev(netdev, pci=pci, numa=0, ifindex=10 + i)
        fake.ibdev(f"mlx5_{i}", pci=pci, numa=0, uverbs=f"uverbs{i}")
    data = tmp_path / "data"
    with Store(str(data)).lock():
        Store(str(data)).claim_nic("eth1", AttachmentKey("net", "c1", "eth0"), "eth1")
    sysfs = Sysfs(str(tmp_path / "root"))

    def host(names: Sequence[str]) -> tuple[dict[str, HostNic], set[IPv4Address]]:
        here = [n for n in names if sysfs.exists(f"sys/class/net/{n}")]
        return {n: HostNic((IPv4Interface("198.51.100.1/26"),)) for n in here}, set()

    collector = CapacityCollector(Settings("exclusive", "r", pinned=pinned), sysfs,
                                  StoreView(str(data)), host)

    def slots() -> dict[str, float]:
        return {m.name: m.samples[0].value for m in collector.collect()
                if m.name.startswith("rdma_cni_slots")}

    assert slots() == {"rdma_cni_slots_capacity": 2, "rdma_cni_slots_allocated": 1}
    (tmp_path / "root/sys/class/net/eth1").unlink()  # ADD moved it into the pod
    assert slots() == {"rdma_cni_slots_capacity": 2, "rdma_cni_slots_allocated": 1}


@pytest.mark.parametrize(("mode", "want"), [("shared-multi", 12), ("shared-host", 6)])
def test_capacity_counts_a_pool_nics_share_once(tmp_path: Path, mode: str, want: int) -> None:
    """eth1 and eth2 on one /28 (12 assignable addresses): the capacity the exporter
    reports is the device plugin's, each address counted once
    (tests/unit/test_deviceplugin.py::test_nics_sharing_a_subnet_offer_its_addresses_once)."""
    from rdma_cni.kube.exporter.capacity import CapacityCollector

    fake = FakeSys(tmp_path / "root")
    for i, (netdev, pci) in enumerate((("eth1", "0000:3b:00.0"), ("eth2", "0000:5e:00.0"))):
        fake.netdev(netdev, pci=pci, numa=0, ifindex=10 + i)
        fake.ibdev(f"mlx5_{i}", pci=pci, numa=0, uverbs=f"uverbs{i}")
    addrs = {"eth1": IPv4Interface("192.0.2.1/28"), "eth2": IPv4Interface("192.0.2.2/28")}

    def host(names: Sequence[str]) -> tuple[dict[str, HostNic], set[IPv4Address]]:
        return ({n: HostNic((addrs[n],)) for n in names if n in addrs},
                {a.ip for a in addrs.values()})

    settings = Settings(mode, "r", slots_per_nic=64, host_slots=64)
    collector = CapacityCollector(settings, Sysfs(str(tmp_path / "root")),
                                  StoreView(str(tmp_path / "data")), host)
    [cap] = [m for m in collector.collect() if m.name == "rdma_cni_slots_capacity"]
    assert cap.samples[0].value == want


def test_a_pod_name_of_undecodable_bytes_costs_no_metric(scrape: Any, node: dict[str, Any]
                                                         ) -> None:
    """ADD keeps CNI_ARGS bytes that are not UTF-8 as lone surrogates (K8S_POD_NAME=p\\xff):
    the exposition could not encode such a label and every scrape answered HTTP 500 (the
    liveness probe fetches /metrics). The value shows escaped; every metric is there."""
    rec = _state([_iface("eth1", "eth1", "198.51.100.2/28")])
    Store(str(node["data"])).put_state(KEY, rec.with_(pod="team-a/p\udcff"))
    s = scrape()
    assert _get(s, "rdma_cni_exporter_collector_success", collector="attachments") == 1
    assert "rdma_cni_slots_capacity" in _names(s)
    assert any(v.endswith("p\\udcff") for _, labels in s for _, v in labels)


def test_idle_connections_are_bounded_in_number_and_time(scrape: Any, node: dict[str, Any],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections that send half a request and nothing more (the exporter listens on the
    node's address): at most MAX_CONNECTIONS hold a thread, each for at most TIMEOUT s;
    before, each held a thread and its memory for as long as it stayed open (5,000: 5,053
    threads, 181 MB)."""
    import socket
    import threading
    import time

    from rdma_cni.kube.exporter import httpserve

    monkeypatch.setattr(httpserve, "MAX_CONNECTIONS", 8)
    monkeypatch.setattr(httpserve, "PER_CLIENT", 8)
    monkeypatch.setattr(httpserve, "TIMEOUT", 1.0)
    conf, raw = load_config(node["conf"])
    server = serve(build_registry(conf, raw, node["sysfs"], _stats, _host), "127.0.0.1", 0)
    base = threading.active_count()
    idle = []
    try:
        for _ in range(40):
            c = socket.create_connection(("127.0.0.1", server.server_port))
            c.sendall(b"GET /metrics HTTP/1.1\r\n")
            idle.append(c)
        time.sleep(0.3)
        assert threading.active_count() - base <= 2 * 8  # a handler and its deadline each
        time.sleep(1.5)  # past TIMEOUT: the silent ones are dropped, the slots free
        assert "rdma_cni_slots_capacity" in _names(_scrape(server.server_port))
    finally:
        for c in idle:
            c.close()
        server.shutdown()
        server.server_close()


def test_a_client_trickling_bytes_holds_no_slot_past_the_deadline(
        node: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """One client fills its connections and sends a header line every 0.3 s (a read's
    timeout restarts at each): each connection is cut TIMEOUT s after it was accepted,
    and one client holds at most PER_CLIENT connections, so the scraper (another
    address) is answered meanwhile."""
    import socket
    import threading
    import time

    from rdma_cni.kube.exporter import httpserve

    monkeypatch.setattr(httpserve, "TIMEOUT", 1.0)
    conf, raw = load_config(node["conf"])
    server = serve(build_registry(conf, raw, node["sysfs"], _stats, _host), "127.0.0.2", 0)
    port, stop, cut = server.server_port, threading.Event(), []

    def trickle() -> None:
        c = socket.create_connection(("127.0.0.2", port), source_address=("127.0.0.3", 0))
        try:
            c.sendall(b"GET /metrics HTTP/1.1\r\n")
            while not stop.wait(0.3):
                c.sendall(b"X-Slow: 1\r\n")
        except OSError:
            cut.append(1)
        finally:
            c.close()

    slow = [threading.Thread(target=trickle) for _ in range(40)]
    for t in slow:
        t.start()
    try:
        time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.2:{port}/metrics", timeout=5) as resp:
            assert resp.status == 200
        time.sleep(2.5)
        assert len(cut) >= httpserve.PER_CLIENT  # the ones served were cut at the deadline
    finally:
        stop.set()
        for t in slow:
            t.join(5)
        server.shutdown()
        server.server_close()
