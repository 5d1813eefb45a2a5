"""The RDMA device plugin against a fake sysfs tree and a fake kubelet (real gRPC)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from support.fakes.kubelet import FakeKubelet, PluginClient
from support.fakes.sysfs import FakeSys
from support.proc import wait_for

from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.kube.deviceplugin.cli import _parser, build
from rdma_cni.kube.deviceplugin.devices import preferred_allocation
from rdma_cni.kube.deviceplugin.inventory import Inventory, PluginSettings
from rdma_cni.kube.deviceplugin.server import DevicePlugin, socket_name
from rdma_cni.kube.exporter.deviceplugin import DevicePluginCollector
from rdma_cni.store.core import Store
from rdma_cni.store.run import pluginstatus as status
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.nic import Nic

REPO = Path(__file__).resolve().parents[2]
# netdev, pci, numa, ibdev, uverbs
NICS = [("eth1", "0000:3b:00.0", 0, "mlx5_0", "uverbs0"),
        ("eth2", "0000:5e:00.0", 0, "mlx5_1", "uverbs1"),
        ("eth3", "0000:af:00.0", 1, "mlx5_2", "uverbs2"),
        ("eth4", "0000:d8:00.0", 1, "mlx5_3", "uverbs3")]
PCI = {n: p for n, p, *_ in NICS}


@pytest.fixture
def root() -> Iterator[Path]:
    # short path: unix socket paths are limited to 108 bytes
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fs(root: Path) -> FakeSys:
    fake = FakeSys(root)
    for i, (netdev, pci, numa, ib, uv) in enumerate(NICS):
        fake.netdev(netdev, pci=pci, numa=numa, ifindex=10 + i)
        fake.ibdev(ib, pci=pci, numa=numa, uverbs=uv)
        fake.write(f"dev/infiniband/{uv}", "")
    fake.write("dev/infiniband/rdma_cm", "")
    fake.write("opt/cni/bin/nccl_env.sh", "#!/bin/sh\n")
    (root / "dp").mkdir()
    return fake


def _inventory(root: Path, mode: str, free: Callable[[Nic], int] = lambda n: 250,
               **kw) -> Inventory:
    inv = Inventory(PluginSettings(mode=mode, resource=_res(mode), **kw), Sysfs(str(root)), free)
    inv.refresh()
    return inv


def _res(mode: str) -> str:
    return "vke.volcengine.com/rdma-host" if mode == "shared-host" else "vke.volcengine.com/rdma"


def _port_state(fs: FakeSys, ib: str, state: str) -> None:
    """Atomic, so the plugin's poll never reads a half-written file."""
    path = fs.root / f"sys/class/infiniband/{ib}/ports/1/state"
    tmp = path.with_name("state.tmp")
    tmp.write_text(state + "\n")
    os.replace(tmp, path)


# --- device lists per mode ----------------------------------------------------------

@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_one_device_per_nic_with_numa(fs: FakeSys, root: Path, mode: str) -> None:
    inv = _inventory(root, mode)
    got = [(d.id, d.numa, d.healthy) for d in inv.devices]
    assert got == [(p, (numa,), True) for _, p, numa, *_ in NICS]


def test_shared_multi_slots_capped_by_free_addresses(fs: FakeSys, root: Path) -> None:
    free = {"eth1": 250, "eth2": 3, "eth3": 0, "eth4": 16}
    inv = _inventory(root, "shared-multi", lambda n: free[n.netdev], slots_per_nic=4)
    ids = [d.id for d in inv.devices]
    want = [(PCI["eth1"], 4), (PCI["eth2"], 3), (PCI["eth4"], 4)]
    assert ids == [f"{p}@{i}" for p, k in want for i in range(k)]
    assert inv.by_id[f"{PCI['eth4']}@2"].numa == (1,)


def test_shared_host_capacity_is_smallest_range(fs: FakeSys, root: Path) -> None:
    free = {"eth1": 250, "eth2": 5, "eth3": 100, "eth4": 16}
    inv = _inventory(root, "shared-host", lambda n: free[n.netdev], host_slots=8)
    assert [d.id for d in inv.devices] == [f"host-{i}" for i in range(5)]
    assert inv.devices[0].numa == (0, 1)
    assert [n.netdev for n in inv.devices[0].nics] == ["eth1", "eth2", "eth3", "eth4"]
    inv = _inventory(root, "shared-host", lambda n: 250, host_slots=3)
    assert len(inv.devices) == 3


@pytest.mark.parametrize("mode", ["exclusive", "shared-multi"])
def test_two_netdevs_of_one_pci_function_are_two_devices(root: Path, mode: str) -> None:
    """A dual-port ConnectX-3: eth2 and eth3 on one PCI function (mlx4_0, ports 1 and
    2). Named by that PCI address both were one device ID, so the kubelet counted one
    and ADD always resolved it to eth2; each is named by its netdev now, and ADD's
    resolution of that ID is that NIC."""
    from rdma_cni.node.discovery import discover, resolve_device_id

    fake = FakeSys(root)
    for port, netdev in ((1, "eth2"), (2, "eth3")):
        fake.netdev(netdev, pci="0000:04:00.0", numa=0, ifindex=10 + port, dev_port=port - 1)
    fake.ibdev("mlx4_0", pci="0000:04:00.0", numa=0, uverbs="uverbs0",
               ports={1: "Ethernet", 2: "Ethernet"})
    fake.netdev("eth4", pci="0000:5e:00.0", numa=1, ifindex=20)
    fake.ibdev("mlx5_1", pci="0000:5e:00.0", numa=1, uverbs="uverbs1")
    (root / "dp").mkdir()
    inv = _inventory(root, mode, slots_per_nic=2)
    ids = [d.id for d in inv.devices]
    assert len(set(ids)) == len(ids)
    bases = sorted({i.split("@")[0] for i in ids})
    assert bases == ["0000:5e:00.0", "eth2", "eth3"], ids
    nics = discover(Sysfs(str(root)))
    assert [(n.netdev, n.port) for n in nics if n.ibdev == "mlx4_0"] == [("eth2", 1), ("eth3", 2)]
    for dev_id in ids:
        assert resolve_device_id(Sysfs(str(root)), nics, dev_id).netdev == \
            inv.by_id[dev_id].nics[0].netdev


def test_pinned_stand_in_without_numa_has_no_topology(fs: FakeSys, root: Path) -> None:
    fs.netdev("veth9", ifindex=40)
    inv = _inventory(root, "exclusive", pinned=["veth9", "eth3"])
    assert [(d.id, d.numa) for d in inv.devices] == [("veth9", ()), (PCI["eth3"], (1,))]


def test_slot_cap_is_the_ipam_pool_size() -> None:
    """The device plugin caps slots with the same pool ADD allocates from (rdma_cni.node.pools)."""
    from ipaddress import IPv4Address, IPv4Interface, IPv4Network

    from rdma_cni.ipam.allocator import RangeLimits
    from rdma_cni.node.pools import PoolSizes
    from rdma_cni.vocab.nic import HostNic

    calls: list[tuple[str, ...]] = []

    def reader(names: Sequence[str]) -> tuple[dict[str, HostNic], set[IPv4Address]]:
        calls.append(tuple(names))
        facts = {"eth1": HostNic((IPv4Interface("192.0.2.10/24"),), IPv4Address("192.0.2.1")),
                 "eth2": HostNic((IPv4Interface("198.51.100.5/30"),))}
        return ({n: f for n, f in facts.items() if n in names},
                {IPv4Address("192.0.2.10"), IPv4Address("192.0.2.11"), IPv4Address("127.0.0.1")})

    sizes = PoolSizes({}, reader=reader)
    assert sizes(Nic("eth1")) == (254 - 11 + 1) - 1  # .11-.254 after the host .10, minus .11
    assert sizes(Nic("eth2")) == 0  # /30 is refused in shared modes
    assert sizes(Nic("eth9")) == 0  # not on the host
    narrowed = PoolSizes({"192.0.2.0/24": RangeLimits(IPv4Address("192.0.2.100"),
                                                    IPv4Address("192.0.2.109"),
                                                    (IPv4Network("192.0.2.104/30"),))},
                         reader=reader)
    assert narrowed(Nic("eth1")) == 10 - 4
    assert len(calls) == 4  # one read per new NIC name (3 + 1), none while the ttl holds
    sizes(Nic("eth1"))
    assert len(calls) == 4


@pytest.mark.parametrize(("mode", "want"), [("shared-multi", 12), ("shared-host", 6)])
def test_nics_sharing_a_subnet_offer_its_addresses_once(fs: FakeSys, root: Path, mode: str,
                                                         want: int) -> None:
    """eth1 and eth2 on one /28 draw from one pool of 12 addresses (.3-.14: the host's
    .1 and .2 out): shared-multi offers 12 slots on the two together, not 12 on each;
    shared-host 6 pods, each taking an address on both (eth3 and eth4 have more)."""
    from ipaddress import IPv4Address, IPv4Interface

    from rdma_cni.node.pools import PoolSizes
    from rdma_cni.vocab.nic import HostNic

    facts = {"eth1": HostNic((IPv4Interface("192.0.2.1/28"),)),
             "eth2": HostNic((IPv4Interface("192.0.2.2/28"),)),
             "eth3": HostNic((IPv4Interface("198.51.100.1/26"),)),
             "eth4": HostNic((IPv4Interface("203.0.113.1/26"),))}

    def reader(names: Sequence[str]) -> tuple[dict[str, HostNic], set[IPv4Address]]:
        return ({n: facts[n] for n in names if n in facts},
                {a.ip for f in facts.values() for a in f.addresses})

    inv = _inventory(root, mode, PoolSizes({}, reader=reader), slots_per_nic=64,
                     host_slots=64)
    if mode == "shared-multi":
        per_nic = {p: sum(d.id.startswith(p + "@") for d in inv.devices) for p in PCI.values()}
        assert per_nic[PCI["eth1"]] + per_nic[PCI["eth2"]] == want, per_nic
        assert per_nic[PCI["eth3"]] == 61
    else:
        assert len(inv.devices) == want


# --- preferred allocation ----------------------------------------------------------------

def test_preferred_distinct_nics_on_one_numa_node(fs: FakeSys, root: Path) -> None:
    inv = _inventory(root, "shared-multi", slots_per_nic=4)
    avail = sorted(inv.by_id)
    got = preferred_allocation(avail, [], 2, inv.by_id)
    assert got == [f"{PCI['eth1']}@0", f"{PCI['eth2']}@0"]
    got = preferred_allocation(avail, [], 3, inv.by_id)
    assert {inv.by_id[g].numa for g in got} == {(0,)}
    assert sorted(inv.by_id[g].nics[0].netdev for g in got) == ["eth1", "eth1", "eth2"]


def test_preferred_packs_numa_and_honours_must_include(fs: FakeSys, root: Path) -> None:
    inv = _inventory(root, "exclusive")
    avail = [PCI["eth1"], PCI["eth3"], PCI["eth4"]]  # NUMA 1 has more room
    assert preferred_allocation(avail, [], 2, inv.by_id) == [PCI["eth3"], PCI["eth4"]]
    got = preferred_allocation(avail, [PCI["eth1"]], 2, inv.by_id)
    assert got[0] == PCI["eth1"] and len(got) == 2
    got = preferred_allocation(list(PCI.values()), [PCI["eth4"]], 2, inv.by_id)
    assert got == [PCI["eth4"], PCI["eth3"]]  # must-include's node first


# --- gRPC: registration, ListAndWatch, Allocate, health ------------------------------------

class Running:
    def __init__(self, plugin: DevicePlugin) -> None:
        self.plugin = plugin
        self.thread = threading.Thread(target=plugin.run, daemon=True)

    def __enter__(self) -> DevicePlugin:
        self.thread.start()
        assert self.plugin.serving.wait(10), "plugin never served"
        return self.plugin

    def __exit__(self, *exc: object) -> None:
        self.plugin.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def _plugin(root: Path, mode: str = "exclusive", **kw) -> DevicePlugin:
    sysfs = Sysfs(str(root))
    return DevicePlugin(_inventory(root, mode, **kw), str(root / "dp"),
                        exists=lambda p: sysfs.exists(p.lstrip("/")),
                        nccl_env_path="/opt/cni/bin/nccl_env.sh", poll=0.05)


@pytest.fixture
def kubelet(root: Path, fs: FakeSys) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(reg_socket=str(root / "dp" / "kubelet.sock")).start()
    yield fake
    fake.stop()


def test_registers_and_reregisters_after_kubelet_restart(kubelet: FakeKubelet, root: Path) -> None:
    with Running(_plugin(root, "shared-host")) as plugin:
        regs = kubelet.wait_registrations(1)
        assert len(regs) == 1
        assert (regs[0].version, regs[0].endpoint, regs[0].resource_name) == (
            "v1beta1", "rdma-cni-rdma-host.sock", "vke.volcengine.com/rdma-host")
        assert regs[0].options.get_preferred_allocation_available
        time.sleep(0.3)
        assert len(kubelet.registrations) == 1  # no re-registration while nothing changes
        kubelet.restart()
        assert len(kubelet.wait_registrations(2)) == 2
        os.unlink(plugin.path)  # a restarting kubelet wipes plugin sockets
        assert len(kubelet.wait_registrations(3)) == 3
        wait_for(lambda: plugin.serving.is_set() and os.path.exists(plugin.path),
                 "socket recreated", 10.0, 0.02)
        client = PluginClient(plugin.path)
        assert client.options().get_preferred_allocation_available
        client.close()
    assert not os.path.exists(plugin.path)


def test_list_and_watch_and_health_flips(kubelet: FakeKubelet, fs: FakeSys, root: Path) -> None:
    with Running(_plugin(root)) as plugin:
        client = PluginClient(plugin.path)
        stream = client.list_and_watch()
        first = next(stream)
        assert [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in first] == [
            (p, "Healthy", [numa]) for _, p, numa, *_ in NICS]
        _port_state(fs, "mlx5_2", "1: DOWN")
        second = {d.ID: d.health for d in next(stream)}
        assert second[PCI["eth3"]] == "Unhealthy" and second[PCI["eth1"]] == "Healthy"
        _port_state(fs, "mlx5_2", "4: ACTIVE")
        assert {d.health for d in next(stream)} == {"Healthy"}
        os.unlink(root / "sys/class/net/eth4")  # the netdev disappears
        gone = {d.ID: d.health for d in next(stream)}
        assert gone[PCI["eth4"]] == "Unhealthy" and len(gone) == 4
        fs.symlink("sys/class/net/eth4", f"sys/devices/pci0000:00/{PCI['eth4']}/net/eth4")
        assert {d.health for d in next(stream)} == {"Healthy"}
        client.close()


def test_streams_held_open_never_starve_allocate(kubelet: FakeKubelet, fs: FakeSys,
                                                root: Path) -> None:
    """A local process opens ListAndWatch streams and keeps them: at most STREAMS of one
    registration are served (each holds a worker thread), a newer one ends the oldest
    and is never refused (the kubelet's, opened right after its Register, is served), but
    for the kubelet's (the first after the registration's first options call), kept.
    Allocate is answered at once. The kubelet's next registration ends the streams of
    the one before, and its own stream is served."""
    from rdma_cni.kube.deviceplugin.server import STREAMS

    with Running(_plugin(root)) as plugin:
        wait_for(lambda: plugin.registrations == 1, "registered", 10.0, 0.02)
        client = PluginClient(plugin.path)
        assert client.options().get_preferred_allocation_available  # as the kubelet does
        first = client.list_and_watch()
        assert len(next(first)) == len(NICS)
        streams = []
        for _ in range(2 * STREAMS):
            stream = client.list_and_watch()
            assert len(next(stream)) == len(NICS)  # never refused
            streams.append(stream)
        ended = 2 * STREAMS - (STREAMS - 1)  # the kept one and the newest stay
        for stream in streams[:ended]:
            with pytest.raises(StopIteration):
                next(stream)
        _port_state(fs, "mlx5_2", "1: DOWN")
        for stream in [first, *streams[ended:]]:
            assert {d.ID: d.health for d in next(stream)}[PCI["eth3"]] == "Unhealthy"
        start = time.monotonic()
        assert client.allocate([PCI["eth1"]]).container_responses
        assert time.monotonic() - start < 2.0
        kubelet.restart()
        kubelet.wait_registrations(2)
        for stream in [first, *streams[ended:]]:  # ended by the plugin, within a second
            with pytest.raises(StopIteration):
                next(stream)
        fresh = PluginClient(plugin.path)
        assert len(next(fresh.list_and_watch())) == len(NICS)
        fresh.close()
        client.close()


def test_the_kubelets_stream_outlasts_the_streams_of_other_clients() -> None:
    """Another process reopens its streams as they end (8 threads of it): each new one
    ends the oldest, but never the kubelet's, the first after the registration's first
    options call from the kubelet's user agent, even with another client's stream opened
    between the kubelet's two calls."""
    from rdma_cni.kube.deviceplugin.streams import STREAMS, Streams

    woken: list[int] = []
    streams = Streams(lambda: woken.append(1))
    streams.new_generation()
    streams.options_asked("grpc-go/1.60.1")
    others = [streams.admit("grpc-python/1.85.3")]
    kubelet = streams.admit("grpc-go/1.60.1")
    for _ in range(8 * STREAMS):
        others.append(streams.admit("grpc-python/1.85.3"))
        for s in [s for s in others if streams.ended(s)]:
            streams.leave(s)
    assert kubelet.kept and not streams.ended(kubelet)
    assert sum(not streams.ended(s) for s in others) == STREAMS - 1
    assert len(woken) == 8 * STREAMS + 1 - (STREAMS - 1)
    streams.new_generation()  # the next registration ends it too
    assert streams.ended(kubelet)


def test_a_plugin_dir_gone_for_a_moment_is_served_again(kubelet: FakeKubelet,
                                                         root: Path) -> None:
    running = Running(_plugin(root))
    with running as plugin:
        kubelet.wait_registrations(1)
        shutil.rmtree(root / "dp")
        time.sleep(0.3)  # polls that find no directory to bind in
        (root / "dp").mkdir()
        kubelet.restart()
        wait_for(lambda: os.path.exists(plugin.path), "socket served again", 10.0, 0.02)
        assert running.thread.is_alive()
        client = PluginClient(plugin.path)
        assert client.options().get_preferred_allocation_available
        client.close()


def test_allocate_and_preferred_over_grpc(kubelet: FakeKubelet, root: Path) -> None:
    with Running(_plugin(root, "shared-multi", slots_per_nic=2)) as plugin:
        client = PluginClient(plugin.path)
        ids = [f"{PCI['eth1']}@1", f"{PCI['eth3']}@0"]
        resp = client.allocate(ids, [f"{PCI['eth2']}@0"])
        first, second = resp.container_responses
        assert [(d.container_path, d.host_path, d.permissions) for d in first.devices] == [
            ("/dev/infiniband/uverbs0", "/dev/infiniband/uverbs0", "rw"),
            ("/dev/infiniband/uverbs2", "/dev/infiniband/uverbs2", "rw"),
            ("/dev/infiniband/rdma_cm", "/dev/infiniband/rdma_cm", "rw")]
        assert first.envs["RDMA_CNI_DEVICES"] == "mlx5_0,mlx5_2"
        assert first.envs["RDMA_CNI_DEVICE_IDS"] == ",".join(ids)
        assert [(m.container_path, m.host_path, m.read_only) for m in first.mounts] == [
            ("/usr/local/bin/nccl_env.sh", "/opt/cni/bin/nccl_env.sh", True)]
        assert second.envs["RDMA_CNI_DEVICES"] == "mlx5_1"
        avail = [f"{p}@{i}" for p in PCI.values() for i in range(2)]
        assert client.preferred(avail, [], 2) == [f"{PCI['eth1']}@0", f"{PCI['eth2']}@0"]
        import grpc
        with pytest.raises(grpc.RpcError) as exc:
            client.allocate(["0000:00:00.0@9"])
        assert exc.value.code() == grpc.StatusCode.NOT_FOUND
        client.close()


def test_allocate_skips_missing_device_files(kubelet: FakeKubelet, root: Path) -> None:
    os.unlink(root / "dev/infiniband/rdma_cm")
    os.unlink(root / "opt/cni/bin/nccl_env.sh")
    with Running(_plugin(root)) as plugin:
        client = PluginClient(plugin.path)
        resp = client.allocate([PCI["eth4"]]).container_responses[0]
        assert [d.host_path for d in resp.devices] == ["/dev/infiniband/uverbs3"]
        assert list(resp.mounts) == []
        client.close()


def test_socket_name() -> None:
    assert socket_name("vke.volcengine.com/rdma") == "rdma-cni-rdma.sock"


def test_main_registers_and_stops_on_sigterm(kubelet: FakeKubelet, root: Path) -> None:
    conf = root / "conf.json"
    conf.write_text(json.dumps({"type": "rdma-cni", "mode": "exclusive",
                                "kubelet": {"devicePluginDir": str(root / "dp")}}))
    status_file = root / "device-plugin.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rdma_cni.kube.deviceplugin", "--config", str(conf),
         "--sysfs-root", str(root), "--poll", "0.1", "--status-file", str(status_file)],
        cwd=REPO, stderr=subprocess.PIPE, text=True)
    seen = DevicePluginCollector("vke.volcengine.com/rdma", str(root / "dp"), str(status_file))
    try:
        regs = kubelet.wait_registrations(1, timeout=20)
        assert regs and regs[0].resource_name == "vke.volcengine.com/rdma"
        client = PluginClient(str(root / "dp" / "rdma-cni-rdma.sock"))
        assert len(next(client.list_and_watch())) == 4
        client.close()
        wait_for(lambda: _dp_gauges(seen) == (1.0, 1.0), "registered in the status file", 10.0,
                 0.02)
        kubelet.restart()  # a new kubelet.sock: the old registration no longer counts
        wait_for(lambda: len(kubelet.registrations) == 2, "re-registration", 20, 0.02)
        wait_for(lambda: _dp_gauges(seen) == (1.0, 1.0), "registered on the new kubelet", 10.0,
                 0.02)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert not (root / "dp" / "rdma-cni-rdma.sock").exists()
    assert _dp_gauges(seen) == (0.0, 0.0)


def _dp_gauges(collector: DevicePluginCollector) -> tuple[float, float]:
    """(rdma_cni_device_plugin_up, rdma_cni_device_plugin_registered)."""
    got = {m.name: m.samples[0].value for m in collector.collect()}
    return got["rdma_cni_device_plugin_up"], got["rdma_cni_device_plugin_registered"]


def test_registration_is_tied_to_the_kubelet_socket(tmp_path: Path) -> None:
    import socket as so

    plugin_dir = tmp_path / "dp"
    plugin_dir.mkdir()
    status_file = str(tmp_path / "status.json")
    seen = DevicePluginCollector("vke.volcengine.com/rdma", str(plugin_dir), status_file)
    listener = so.socket(so.AF_UNIX, so.SOCK_STREAM)
    listener.bind(str(plugin_dir / "rdma-cni-rdma.sock"))
    listener.listen(4)
    kubelet_sock = plugin_dir / "kubelet.sock"
    kubelet_sock.write_text("")
    try:
        assert _dp_gauges(seen) == (1.0, 0.0)  # up, no status file yet
        status.write(status_file, "vke.volcengine.com/rdma", "rdma-cni-rdma.sock",
                     status.ident(str(kubelet_sock)))
        assert _dp_gauges(seen) == (1.0, 1.0)
        kubelet_sock.unlink()
        kubelet_sock.write_text("")  # the kubelet restarted
        assert _dp_gauges(seen) == (1.0, 0.0)
    finally:
        listener.close()
    assert _dp_gauges(seen) == (0.0, 0.0)  # socket file left behind, nobody listening


def test_main_bad_config_fails(root: Path) -> None:
    from rdma_cni.kube.deviceplugin.cli import main

    conf = root / "conf.json"
    conf.write_text('{"mode": "bogus"}')
    assert main(["--config", str(conf)]) == 1
    assert main(["--config", str(root / "absent.json")]) == 1


def test_nccl_env_is_looked_for_under_the_host_root(kubelet: FakeKubelet, root: Path) -> None:
    """In the DaemonSet the host's /opt/cni/bin is at /host/opt/cni/bin: the mount names
    the host path, the check looks where this process sees it (--host-root)."""
    from rdma_cni.kube.deviceplugin.cli import _seen_at

    os.unlink(root / "opt/cni/bin/nccl_env.sh")  # not where the sysfs root would look
    seen = _seen_at(str(root / "host"), "/opt/cni/bin/nccl_env.sh")
    assert seen == str(root / "host/opt/cni/bin/nccl_env.sh")
    assert _seen_at("/", "/opt/cni/bin/nccl_env.sh") is None
    sysfs = Sysfs(str(root))
    plugin = DevicePlugin(_inventory(root, "exclusive"), str(root / "dp"),
                          exists=lambda p: sysfs.exists(p.lstrip("/")),
                          nccl_env_path="/opt/cni/bin/nccl_env.sh", nccl_env_seen_at=seen,
                          poll=0.05)
    with Running(plugin):
        client = PluginClient(plugin.path)
        assert list(client.allocate([PCI["eth1"]]).container_responses[0].mounts) == []
        Path(seen).parent.mkdir(parents=True)
        Path(seen).write_text("#!/bin/sh\n")
        mounts = client.allocate([PCI["eth1"]]).container_responses[0].mounts
        assert [(m.container_path, m.host_path, m.read_only) for m in mounts] == [
            ("/usr/local/bin/nccl_env.sh", "/opt/cni/bin/nccl_env.sh", True)]
        client.close()


def _conflist(conf_dir: Path, *types: str) -> None:
    tmp = conf_dir / ".10-vpc-cni.tmp"
    tmp.write_text(json.dumps({"cniVersion": "0.4.0", "name": "vpc-cni",
                               "plugins": [{"type": t} for t in types]}))
    os.replace(tmp, conf_dir / "10-vpc-cni.conflist")


def test_allocate_is_refused_while_the_node_does_not_chain_rdma_cni(
        kubelet: FakeKubelet, root: Path) -> None:
    """The real process, as the DaemonSet runs it: --cni-conf-dir is the host's conf dir."""
    import grpc

    conf = root / "conf.json"
    conf.write_text(json.dumps({"type": "rdma-cni", "mode": "exclusive",
                                "kubelet": {"devicePluginDir": str(root / "dp")}}))
    net_d = root / "net.d"
    net_d.mkdir()
    _conflist(net_d, "vpc-cni", "rdma-cni", "portmap")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rdma_cni.kube.deviceplugin", "--config", str(conf),
         "--sysfs-root", str(root), "--poll", "0.1", "--cni-conf-dir", str(net_d),
         "--status-file", str(root / "dp-status.json")],
        cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        kubelet.wait_registrations(1, timeout=20)
        client = PluginClient(str(root / "dp" / "rdma-cni-rdma.sock"))
        assert client.allocate([PCI["eth1"]]).container_responses[0].devices
        _conflist(net_d, "vpc-cni", "portmap")  # the primary rewrote its list
        with pytest.raises(grpc.RpcError) as exc:
            client.allocate([PCI["eth1"]])
        assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert exc.value.details() == (
            f"refusing to allocate vke.volcengine.com/rdma: the node's first CNI config "
            f"{net_d}/10-vpc-cni.conflist does not chain rdma-cni, so the pod would start "
            "without its RDMA interfaces (is the rdma-cni DaemonSet's cni-watch container "
            "running?)")
        (net_d / "10-vpc-cni.conflist").unlink()
        with pytest.raises(grpc.RpcError, match=f"no CNI config in {net_d}"):
            client.allocate([PCI["eth1"]])
        (net_d / "00-broken.conflist").write_text("{")
        with pytest.raises(grpc.RpcError, match="failed to parse config"):
            client.allocate([PCI["eth1"]])
        (net_d / "00-broken.conflist").unlink()
        _conflist(net_d, "vpc-cni", "rdma-cni")  # the watch put the entry back
        resp = client.allocate([PCI["eth1"]]).container_responses[0]
        assert next(d.host_path for d in resp.devices) == "/dev/infiniband/uverbs0"
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert err.count("refusing to allocate") == 3, err


# --- the node's own NIC -----------------------------------------------------------------

def test_the_nodes_own_nic_is_never_advertised(fs: FakeSys, root: Path) -> None:
    seen: list[tuple[list[str], list[str]]] = []

    def primary(names: Any, node_ips: Any) -> dict[str, str]:
        seen.append((list(names), list(node_ips)))
        return {"eth2": "carries the node's default route"}

    settings = PluginSettings(mode="exclusive", resource=_res("exclusive"),
                              node_ips=("192.0.2.10",))
    inv = Inventory(settings, Sysfs(str(root)), lambda n: 250, primary)
    inv.refresh()
    assert [d.id for d in inv.devices] == [PCI["eth1"], PCI["eth3"], PCI["eth4"]]
    assert seen == [(["eth1", "eth2", "eth3", "eth4"], ["192.0.2.10"])]


def test_a_pinned_list_naming_the_nodes_own_nic_stops_the_device_plugin(
        root: Path, fs: FakeSys, capsys: pytest.CaptureFixture[str]) -> None:
    from rdma_cni.errors import ConfigError

    conf = root / "c.json"
    conf.write_text(json.dumps({"mode": "exclusive", "devices": ["eth1", "eth2"],
                                "nodeIPs": ["192.0.2.10"],
                                "kubelet": {"devicePluginDir": str(root / "dp")}}))
    args = _parser().parse_args(["--config", str(conf), "--sysfs-root", str(root),
                                 "--cni-conf-dir", ""])

    def primary(names: Any, node_ips: Any) -> dict[str, str]:
        return {"eth2": "holds the node's address 192.0.2.10"} if "eth2" in names else {}

    with pytest.raises(ConfigError, match=re.escape("devices names eth2, which holds the "
                                                    "node's address 192.0.2.10: the node's "
                                                    "own NIC")):
        build(args, lambda n: 250, primary)


# --- exclusive mode: a NIC in a pod is in use, not gone ------------------------------
# Where the mode moves the NIC into its pod (exclusive), a NIC gone from the host that a
# pod holds (the store's NIC claim) is in use, not broken: the device plugin keeps it
# Healthy. The kubelet's allocatable counts Healthy devices only and the scheduler
# subtracts the pods' requests from it, so an in-use NIC reported Unhealthy is counted
# twice: with two of four NICs in a pod, a pod asking for the other two stays Pending.

RES = "vke.volcengine.com/rdma"
ALL_HEALTHY = dict.fromkeys(PCI.values(), True)


def _health(inv: Inventory) -> dict[str, bool]:
    inv.refresh()
    return {d.id: d.healthy for d in inv.devices}


def _into_pod(root: Path, netdev: str) -> None:
    """What the host's sysfs shows once the NIC moved into a pod: no such netdev."""
    os.unlink(root / f"sys/class/net/{netdev}")


@pytest.mark.parametrize("pinned", [None, ["eth1", "eth2", "eth3", "eth4"]])
def test_an_exclusive_nic_a_pod_holds_stays_healthy(fs: FakeSys, root: Path,
                                                    pinned: list[str] | None) -> None:
    claims: dict[str, str | None] = {"eth1": None}  # a claim of a release before identities
    inv = Inventory(PluginSettings(mode="exclusive", resource=RES, pinned=pinned),
                    Sysfs(str(root)), lambda n: 250, claimed=lambda: claims)
    assert _health(inv) == ALL_HEALTHY
    _into_pod(root, "eth1")
    _into_pod(root, "eth2")  # gone with no pod holding it: a NIC the node lost
    assert _health(inv) == {**ALL_HEALTHY, PCI["eth2"]: False}
    claims.clear()  # the pod's DEL released it, and the NIC is still not back
    assert _health(inv)[PCI["eth1"]] is False


def test_where_nics_stay_on_the_host_a_claim_does_not_hide_a_lost_one(
        fs: FakeSys, root: Path) -> None:
    inv = Inventory(PluginSettings(mode="shared", resource=RES), Sysfs(str(root)),
                    lambda n: 250, claimed=lambda: {"eth1": PCI["eth1"]})
    assert _health(inv)[PCI["eth1"]] is True
    _into_pod(root, "eth1")  # shared mode: the pod has an ipvlan, the NIC never leaves
    assert _health(inv)[PCI["eth1"]] is False


def test_the_device_plugin_reads_the_claims_of_its_config_data_dir(
        fs: FakeSys, root: Path) -> None:
    data = root / "data"
    Store(str(data)).claim_nic("eth1", AttachmentKey("net", "c1", "eth0"), "eth1")
    listing = sorted(os.listdir(data))
    conf = root / "c.json"
    conf.write_text(json.dumps({"mode": "exclusive", "dataDir": str(data),
                                "kubelet": {"devicePluginDir": str(root / "dp")}}))
    args = _parser().parse_args(["--config", str(conf), "--sysfs-root", str(root),
                                 "--cni-conf-dir", ""])
    plugin = build(args, lambda n: 250, lambda names, ips: {})
    assert all(_health(plugin.inv).values())
    _into_pod(root, "eth1")
    _into_pod(root, "eth2")
    assert _health(plugin.inv) == {**ALL_HEALTHY, PCI["eth2"]: False}
    assert sorted(os.listdir(data)) == listing  # read, never written


def test_a_nic_back_under_another_name_is_listed_once(fs: FakeSys, root: Path) -> None:
    """A NIC that comes back under a new name (a fallback name, a udev rename) has its
    device ID once: the entry of its old name went on listing it, Unhealthy, beside the
    new Healthy one, and the kubelet counted the ID in both."""
    inv = _inventory(root, "exclusive")
    assert _health(inv) == {**ALL_HEALTHY}
    os.unlink(root / "sys/class/net/eth1")
    shutil.rmtree(root / f"sys/devices/pci0000:00/{PCI['eth1']}/net/eth1")
    assert _health(inv)[PCI["eth1"]] is False
    fs.netdev("rnic9", pci=PCI["eth1"], numa=0, ifindex=30)
    inv.refresh()
    ids = [d.id for d in inv.devices]
    assert sorted(ids) == sorted(PCI.values()), ids
    assert _health(inv) == {**ALL_HEALTHY}


def test_a_nic_that_lost_its_rdma_device_is_unhealthy(fs: FakeSys, root: Path) -> None:
    """A pinned NIC whose RDMA device is gone (its driver unloaded, a failed recovery) and
    whose netdev stays: a pod given it would get no uverbs device."""
    inv = _inventory(root, "exclusive", pinned=["eth1", "eth2", "eth3", "eth4"])
    assert _health(inv) == {**ALL_HEALTHY}
    dev = root / f"sys/devices/pci0000:00/{PCI['eth1']}"
    (root / "sys/class/infiniband/mlx5_0").unlink()  # mlx5_ib unloaded: the device goes
    shutil.rmtree(dev / "infiniband")
    shutil.rmtree(dev / "infiniband_verbs")
    shutil.rmtree(root / "sys/class/infiniband_verbs/uverbs0")
    assert _health(inv) == {**ALL_HEALTHY, PCI["eth1"]: False}


# --- Allocate, health and identity of NICs that change ---------------------------------

class _AbortedError(Exception):
    pass


class _Context:
    """A stand-in gRPC context: abort raises, with the status code."""

    def abort(self, code: Any, msg: str) -> None:
        raise _AbortedError(code, msg)


def _remove_nic(root: Path, netdev: str, ib: str, uverbs: str) -> None:
    """The NIC leaves the node (hot-unplugged, its function disabled): netdev, RDMA
    device and uverbs device gone."""
    dev = root / f"sys/devices/pci0000:00/{PCI[netdev]}"
    os.unlink(root / f"sys/class/net/{netdev}")
    (root / f"sys/class/infiniband/{ib}").unlink()
    shutil.rmtree(dev)
    shutil.rmtree(root / f"sys/class/infiniband_verbs/{uverbs}")
    os.unlink(root / f"dev/infiniband/{uverbs}")


def _allocate(plugin: DevicePlugin, ids: list[str]) -> Any:
    from rdma_cni.proto import deviceplugin_v1beta1_pb2 as pb

    req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
    return plugin.servicer.Allocate(req, _Context()).container_responses[0]


@pytest.mark.parametrize("polled", [True, False])
def test_allocate_never_serves_a_nic_gone_nor_its_old_uverbs_device(
        fs: FakeSys, root: Path, polled: bool) -> None:
    """eth1 (mlx5_0, uverbs0) leaves the node and a new NIC's RDMA device gets uverbs0:
    Allocate of eth1's ID is refused (FAILED_PRECONDITION), whether the poll has listed it
    Unhealthy yet or not; it never gives mlx5_0 with uverbs0, now mlx5_4's."""
    import grpc

    plugin = _plugin(root)
    _remove_nic(root, "eth1", "mlx5_0", "uverbs0")
    fs.netdev("eth5", pci="0000:86:00.0", numa=1, ifindex=40)
    fs.ibdev("mlx5_4", pci="0000:86:00.0", numa=1, uverbs="uverbs0")
    fs.write("dev/infiniband/uverbs0", "")
    if polled:
        plugin.inv.refresh()
        assert plugin.inv.by_id[PCI["eth1"]].healthy is False
    with pytest.raises(_AbortedError) as exc:
        _allocate(plugin, [PCI["eth1"]])
    assert exc.value.args[0] == grpc.StatusCode.FAILED_PRECONDITION
    assert PCI["eth1"] in exc.value.args[1]
    assert _allocate(plugin, [PCI["eth2"]]).envs["RDMA_CNI_DEVICES"] == "mlx5_1"


@pytest.mark.parametrize("held", [True, False])
def test_allocate_gives_a_nic_its_pod_holds_as_last_seen(fs: FakeSys, root: Path,
                                                         held: bool) -> None:
    """Exclusive: eth1 is in a pod, its RDMA device with it (gone from the host's sysfs).
    The kubelet gives its ID again once that pod ended, before DEL brought the NIC back:
    Allocate gives it as last seen. Without a pod's claim it is a NIC lost: refused."""
    claims = {"eth1": PCI["eth1"]} if held else {}
    inv = Inventory(PluginSettings(mode="exclusive", resource=RES), Sysfs(str(root)),
                    lambda n: 250, claimed=lambda: claims)
    inv.refresh()
    sysfs = Sysfs(str(root))
    plugin = DevicePlugin(inv, str(root / "dp"), exists=lambda p: sysfs.exists(p.lstrip("/")))
    _into_pod(root, "eth1")
    (root / "sys/class/infiniband/mlx5_0").unlink()
    shutil.rmtree(root / "sys/class/infiniband_verbs/uverbs0")
    if held:
        assert _health(inv)[PCI["eth1"]] is True
        resp = _allocate(plugin, [PCI["eth1"]])
        assert resp.envs["RDMA_CNI_DEVICES"] == "mlx5_0"
        assert resp.devices[0].host_path == "/dev/infiniband/uverbs0"
    else:
        with pytest.raises(_AbortedError):
            _allocate(plugin, [PCI["eth1"]])


def test_allocate_reads_the_uverbs_device_again(fs: FakeSys, root: Path) -> None:
    """The RDMA device of eth4 registered again (a driver reset) and got uverbs7 before the
    next poll: Allocate gives the uverbs device it has now."""
    plugin = _plugin(root)
    shutil.rmtree(root / "sys/class/infiniband_verbs/uverbs3")
    fs.write("sys/class/infiniband_verbs/uverbs7/ibdev", "mlx5_3")
    fs.write("dev/infiniband/uverbs7", "")
    resp = _allocate(plugin, [PCI["eth4"]])
    assert [d.host_path for d in resp.devices] == ["/dev/infiniband/uverbs7",
                                                   "/dev/infiniband/rdma_cm"]


def test_a_nic_renamed_as_its_pool_is_read_never_stops_the_device_plugin(
        fs: FakeSys, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the pools fails (a NIC renamed between the listing and its look-up, past
    the retries): the poll logs it, the last list stands, the plugin goes on."""
    from rdma_cni.errors import NicUnavailable

    monkeypatch.setenv("RDMA_CNI_HEALTH_DIR", str(root))
    fail = threading.Event()

    def free(nic: Nic) -> int:
        if fail.is_set():
            raise NicUnavailable("RDMA NIC eth1 not found on the host")
        return 250

    plugin = _plugin(root, "shared-multi", free=free, slots_per_nic=2)
    before = list(plugin.inv.devices)
    fail.set()
    _port_state(fs, "mlx5_2", "1: DOWN")  # a change to read: the read fails
    with Running(plugin):
        time.sleep(0.3)  # polls that fail
        assert plugin.inv.devices == before
        assert os.path.exists(plugin.path)
        fail.clear()
        wait_for(lambda: not plugin.inv.by_id[f"{PCI['eth3']}@0"].healthy, "listed again",
                 10.0, 0.02)


class _Links:
    """A netlink port on which eth1 is renamed eth1x between the link dump and the
    look-up of eth1 by name."""

    def links(self) -> list[Any]:
        from types import SimpleNamespace

        return [SimpleNamespace(name="eth1")]

    def link(self, name: str) -> None:
        return None

    def addresses(self) -> list[Any]:
        return []

    def close(self) -> None:
        pass


def test_host_nics_skips_a_nic_renamed_between_the_listing_and_its_look_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from rdma_cni.adapters.netlink import Netlink
    from rdma_cni.node.pools import host_nics

    port = _Links()
    monkeypatch.setattr(Netlink, "here", staticmethod(lambda: port))
    assert host_nics(["eth1"]) == ({}, set())


def _rename(fs: FakeSys, root: Path, old: str, new: str, pci: str, numa: int = 0) -> None:
    (root / f"sys/class/net/{old}").unlink()
    fs.netdev(new, pci=pci, numa=numa, ifindex=50)


@pytest.mark.parametrize("through_store", [False, True])
def test_a_nic_in_a_pod_stays_listed_when_a_host_nic_takes_its_old_name(
        fs: FakeSys, root: Path, through_store: bool) -> None:
    """Exclusive: eth1 (0000:3b:00.0) moves into a pod, then eth2 is renamed eth1. The
    pod's NIC is told by the identity its claim records, not by the name: both stay
    listed, Healthy, each once."""
    claims = {"eth1": PCI["eth1"]}
    if through_store:
        data = root / "data"
        Store(str(data)).claim_nic("eth1", AttachmentKey("net", "c1", "eth0"), "eth1",
                                   {"identity": {"pci": PCI["eth1"], "kind": None}})
        conf = root / "c.json"
        conf.write_text(json.dumps({"mode": "exclusive", "dataDir": str(data),
                                    "kubelet": {"devicePluginDir": str(root / "dp")}}))
        args = _parser().parse_args(["--config", str(conf), "--sysfs-root", str(root),
                                     "--cni-conf-dir", ""])
        inv = build(args, lambda n: 250, lambda names, ips: {}).inv
    else:
        inv = Inventory(PluginSettings(mode="exclusive", resource=RES), Sysfs(str(root)),
                        lambda n: 250, claimed=lambda: claims)
    assert _health(inv) == ALL_HEALTHY
    _into_pod(root, "eth1")
    assert _health(inv) == ALL_HEALTHY
    _rename(fs, root, "eth2", "eth1", PCI["eth2"])
    assert _health(inv) == ALL_HEALTHY
    assert sorted(d.id for d in inv.devices) == sorted(PCI.values())
    if not through_store:
        claims.clear()  # the pod's DEL released it, and the NIC is still not back
        assert _health(inv) == {**ALL_HEALTHY, PCI["eth1"]: False}


@pytest.mark.parametrize("mode", ["exclusive", "shared", "shared-multi"])
def test_a_pinned_nic_renamed_lists_its_device_id_once(fs: FakeSys, root: Path,
                                                       mode: str) -> None:
    """Pinned eth1 and eth2; eth1 is renamed eth9, then eth2 eth1: 0000:5e:00.0 is listed
    under eth1, Healthy, and not again (Unhealthy) as eth2 last seen."""
    inv = _inventory(root, mode, pinned=["eth1", "eth2"], slots_per_nic=2)
    assert all(_health(inv).values())
    _rename(fs, root, "eth1", "eth9", PCI["eth1"])
    _rename(fs, root, "eth2", "eth1", PCI["eth2"])
    inv.refresh()
    ids = [d.id for d in inv.devices]
    assert len(ids) == len(set(ids)), ids
    mine = [d for d in inv.devices if d.id.startswith(PCI["eth2"])]
    assert mine and all(d.healthy for d in mine)
    assert [n.netdev for n in mine[0].nics] == ["eth1"]
    assert not any(d.id.startswith(PCI["eth1"]) for d in inv.devices)


@pytest.mark.parametrize("mode", ["exclusive", "shared", "shared-multi", "shared-host"])
def test_a_nic_with_no_address_to_give_is_never_healthy_where_pods_take_one(
        fs: FakeSys, root: Path, mode: str) -> None:
    """eth1's addresses flushed, or its prefix refused by IPAM (a /31): no pod can take an
    address on it, so shared modes never advertise it Healthy; exclusive gives the NIC
    itself and still does."""
    free = dict.fromkeys(PCI, 250)
    inv = _inventory(root, mode, lambda n: free[n.netdev])
    assert inv.devices and all(d.healthy for d in inv.devices)
    free["eth1"] = 0
    inv.refresh()
    on_eth1 = [d.healthy for d in inv.devices if any(n.netdev == "eth1" for n in d.nics)]
    assert on_eth1 == ([True] if mode == "exclusive" else [False] if mode == "shared" else [])
    assert all(d.healthy for d in inv.devices if all(n.netdev != "eth1" for n in d.nics))


def _reference(available: Sequence[str], must: Sequence[str], size: int,
               devices: dict[str, Any]) -> list[str]:
    """The preferred allocation as the plugin picked it before, quadratically: its oracle."""
    from collections import Counter

    from rdma_cni.kube.deviceplugin.devices import _nic_key, _node_key, _slot_key

    chosen = list(dict.fromkeys(must))
    pool = sorted(dict.fromkeys(a for a in available if a not in chosen), key=_slot_key)
    used = Counter(_nic_key(devices, c) for c in chosen)
    capacity = Counter(_node_key(devices, a) for a in pool)
    pinned = {_node_key(devices, c) for c in chosen}
    for node in sorted(capacity, key=lambda n: (n not in pinned, -capacity[n], n)):
        cands = [a for a in pool if _node_key(devices, a) == node]
        while cands and len(chosen) < size:
            pick = min(cands, key=lambda a: used[_nic_key(devices, a)])
            cands.remove(pick)
            chosen.append(pick)
            used[_nic_key(devices, pick)] += 1
    return chosen


def _slot_devices(nics: int, slots: int) -> dict[str, Any]:
    from rdma_cni.kube.deviceplugin.devices import Device

    out = {}
    for i in range(nics):
        nic = Nic(f"rnic{i}", pci=f"0000:{i // 32:02x}:{i % 32:02x}.0", numa=i % 2)
        for s in range(slots):
            out[f"{nic.pci}@{s}"] = Device(f"{nic.pci}@{s}", (nic,), True, (i % 2,))
    return out


def test_preferred_allocation_picks_as_before() -> None:
    import random

    rng = random.Random(7)
    devices = _slot_devices(12, 5)
    ids = list(devices)
    for _ in range(300):
        avail = rng.sample(ids, rng.randint(0, len(ids)))
        must = rng.sample(avail, rng.randint(0, min(3, len(avail))))
        size = rng.randint(len(must), len(avail) + 1)
        assert preferred_allocation(avail, must, size, devices) == \
            _reference(avail, must, size, devices)


def test_preferred_allocation_of_thousands_is_quick() -> None:
    devices = _slot_devices(500, 16)  # 8000 IDs
    start = time.monotonic()
    got = preferred_allocation(list(devices), [], 8000, devices)
    took = time.monotonic() - start
    assert sorted(got) == sorted(devices)
    assert took < 1.0, took  # quadratic, it took about 9 s


def test_preferred_allocation_asking_past_the_devices_advertised_is_refused(
        fs: FakeSys, root: Path) -> None:
    import grpc

    from rdma_cni.proto import deviceplugin_v1beta1_pb2 as pb

    plugin = _plugin(root)
    ok = pb.ContainerPreferredAllocationRequest(available_deviceIDs=list(PCI.values()),
                                                allocation_size=2)
    resp = plugin.servicer.GetPreferredAllocation(
        pb.PreferredAllocationRequest(container_requests=[ok]), _Context())
    assert len(resp.container_responses[0].deviceIDs) == 2
    for big in (pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=[f"x{i}" for i in range(5000)], allocation_size=2),
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(PCI.values()), allocation_size=5)):
        with pytest.raises(_AbortedError) as exc:
            plugin.servicer.GetPreferredAllocation(
                pb.PreferredAllocationRequest(container_requests=[big]), _Context())
        assert exc.value.args[0] == grpc.StatusCode.INVALID_ARGUMENT
