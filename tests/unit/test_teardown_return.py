"""Issue 14 item 6 (no root): DEL waits, bounded, for the kernel to return an exclusive
NIC that is in no visible netns while its bus device still exists; a NIC whose device
is gone (or a virtual stand-in) is done at once; past the wait DEL fails with code 11,
and a give-up horizon ends the retries."""

from __future__ import annotations

import time
from ipaddress import IPv4Interface
from pathlib import Path
from typing import Any

import pytest

from rdma_cni.adapters.netlink import Link
from rdma_cni.adapters.sysfs import Sysfs
from rdma_cni.cni.commands import delete
from rdma_cni.datapath.teardown import NicNotBack, _recover_on_host, hardware_of
from rdma_cni.records import replace
from rdma_cni.store import boot as bootmod
from rdma_cni.store.boot import BootMark
from rdma_cni.store.core import Store
from rdma_cni.store.state import AttachmentState
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.plan import IfacePlan

MARK = "rdma-cni:abc"
PLAN = IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1500,
                 table=100, addresses=(IPv4Interface("192.0.2.1/26"),),
                 identity={"pci": "0000:03:00.0", "parentDev": None, "permMac": None,
                           "mac": "02:00:00:00:00:01"}, host_mtu=1500)


class FakeHost:
    """The node's links as netlink shows them; the NIC appears after ``after`` seconds."""

    def __init__(self, after: float | None) -> None:
        self.appear = None if after is None else time.monotonic() + after
        self.name = "eth1"
        self.calls: list[str] = []

    def links(self) -> list[Link]:
        if self.appear is None or time.monotonic() < self.appear:
            return []
        return [Link(7, self.name, 1500, "02:00:00:00:00:01", None, False, alias=MARK)]

    def link(self, name: str) -> Link | None:
        return next((lk for lk in self.links() if lk.name == name), None)

    def require(self, name: str) -> Link:
        link = self.link(name)
        assert link is not None
        return link

    def rename(self, name: str, new: str, alias: str, action: str) -> None:
        self.calls.append(action)
        self.name = new

    def set_mtu(self, name: str, mtu: int, action: str) -> None:
        self.calls.append(action)

    def set_up(self, name: str, action: str, mtu: int | None = None) -> None:
        self.calls.append(action)

    def add_address(self, name: str, iface: IPv4Interface) -> None:
        self.calls.append(f"add {iface} to {name}")

    def put_addr(self, name: str, addr: Any) -> None:
        self.calls.append(f"add {addr.cidr} to {name}")

    def add_route(self, route: Any) -> None:
        self.calls.append(f"route {route.dst}")


@pytest.fixture
def sysfs(tmp_path: Path) -> Sysfs:
    (tmp_path / "sys/bus/pci/devices/0000:03:00.0").mkdir(parents=True)
    (tmp_path / "sys/bus/virtio/devices").mkdir(parents=True)
    return Sysfs(str(tmp_path))


def test_the_bus_device_is_found_by_pci_address_or_parent(sysfs: Sysfs) -> None:
    assert hardware_of(PLAN, sysfs) == "pci device 0000:03:00.0"
    gone = replace(PLAN, identity={"pci": "0000:04:00.0", "parentDev": "../../x"})
    assert hardware_of(gone, sysfs) is None
    assert hardware_of(replace(PLAN, identity={"mac": "02:00:00:00:00:01"}), sysfs) is None


def test_a_nic_returned_during_the_wait_is_renamed_and_restored(sysfs: Sysfs) -> None:
    host = FakeHost(after=0.3)
    _recover_on_host(host, PLAN, MARK, sysfs, wait=5)  # type: ignore[arg-type]
    assert host.name == "rnic0"
    assert "add 192.0.2.1/26 to rnic0" in host.calls and "bring rnic0 up" in host.calls


def test_a_nic_not_back_within_the_wait_is_code_11(sysfs: Sysfs) -> None:
    host = FakeHost(after=None)
    t0 = time.monotonic()
    with pytest.raises(NicNotBack) as err:
        _recover_on_host(host, PLAN, MARK, sysfs, wait=0.3)  # type: ignore[arg-type]
    assert 0.3 <= time.monotonic() - t0 < 2
    assert err.value.code == 11 and "rnic0" in err.value.msg


def test_a_nic_whose_device_is_gone_is_done_without_waiting(sysfs: Sysfs) -> None:
    host = FakeHost(after=None)
    gone = replace(PLAN, identity={"pci": "0000:09:00.0", "mac": "02:00:00:00:00:01"})
    t0 = time.monotonic()
    _recover_on_host(host, gone, MARK, sysfs, wait=5)  # type: ignore[arg-type]
    assert time.monotonic() - t0 < 1 and host.calls == []


class Clocks:
    """The wall clock and CLOCK_BOOTTIME as :func:`delete._give_up` reads them (through
    :meth:`rdma_cni.store.boot.BootMark.now`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, boot: str = "boot-1") -> None:
        self.wall, self.boottime, self.boot = 1_700_000_000.0, 1000.0, boot
        monkeypatch.setattr(time, "time", lambda: self.wall)
        real = time.clock_gettime

        def clock_gettime(clk: int) -> float:
            return self.boottime if clk == time.CLOCK_BOOTTIME else real(clk)
        monkeypatch.setattr(time, "clock_gettime", clock_gettime)
        monkeypatch.setattr(bootmod, "this_boot", lambda: self.boot)


def _marked(tmp_path: Path) -> tuple[Store, AttachmentKey, AttachmentState]:
    store = Store(str(tmp_path / "data"))
    key = AttachmentKey("net", "c1", "eth0")
    store.claim_nic("rnic0", key, "eth1")
    store.put_state(key, AttachmentState())
    state = store.get_state(key)
    assert state is not None
    return store, key, state


def test_del_keeps_failing_until_the_give_up_horizon(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    clocks = Clocks(monkeypatch)
    store, key, state = _marked(tmp_path)
    assert not delete._give_up(store, key, state, "not back")  # first: marks the time
    marked = store.get_state(key)
    assert marked is not None and marked.nic_pending_since == BootMark("boot-1", 1000.0)
    clocks.boottime += delete.GIVE_UP - 1
    assert not delete._give_up(store, key, marked, "not back")  # within the horizon
    clocks.boottime += 1
    assert delete._give_up(store, key, marked, "not back")
    assert store.get_state(key) is None and store.nic_claims() == {}


def test_a_wall_clock_set_forward_does_not_end_the_wait(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An NTP step of the wall clock between two DELs released the NIC's claim while the
    NIC was still hidden in the pod (the wait was timed by time.time())."""
    clocks = Clocks(monkeypatch)
    store, key, state = _marked(tmp_path)
    assert not delete._give_up(store, key, state, "not back")
    marked = store.get_state(key)
    assert marked is not None
    clocks.wall += 10 * delete.GIVE_UP
    clocks.boottime += 30
    assert not delete._give_up(store, key, marked, "not back")
    assert store.get_state(key) is not None and set(store.nic_claims()) == {"rnic0"}


@pytest.mark.parametrize("old", [BootMark("boot-0", 0.0), BootMark(None, 1.0)])
def test_a_mark_of_another_boot_or_release_starts_the_wait_afresh(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: BootMark) -> None:
    """A mark of another boot, or the wall-clock number of an earlier release, is no
    time of this boot: this DEL marks it anew, the full wait follows."""
    clocks = Clocks(monkeypatch)
    store, key, state = _marked(tmp_path)
    assert not delete._give_up(store, key, state.with_(nic_pending_since=old), "not back")
    marked = store.get_state(key)
    assert marked is not None and marked.nic_pending_since == BootMark("boot-1", 1000.0)
    clocks.boottime += delete.GIVE_UP - 1
    assert not delete._give_up(store, key, marked, "not back")
    clocks.boottime += 1
    assert delete._give_up(store, key, marked, "not back")


def test_fallback_names_of_two_nics_differ_and_a_taken_one_is_not_a_failure() -> None:
    """A returning NIC whose host name is taken comes back under a name of its own. It was
    ``rdma`` and the last six characters of the PCI address, the same for 0000:48:00.0 and
    0000:88:00.0 (and the second one's rename then failed with EEXIST at every DEL)."""
    from rdma_cni.datapath.physical import fallback_name, home_name

    a, b = (replace(PLAN, identity={"pci": pci}) for pci in ("0000:48:00.0", "0000:88:00.0"))
    assert fallback_name(a) == "rdma000048000" and fallback_name(b) == "rdma000088000"
    by_mac = replace(PLAN, identity={"mac": "02:00:00:00:00:01"})
    assert len(fallback_name(by_mac)) <= 15 and fallback_name(by_mac) != fallback_name(a)
    taken = {"rnic0", fallback_name(a)}
    assert home_name(a, taken.__contains__, 9) == "rdmaif9"
    assert home_name(b, taken.__contains__, 9) == "rdma000088000"
    assert home_name(replace(b, nic="rnic1"), taken.__contains__, 9) == "rnic1"


def test_a_nic_back_under_its_own_host_name_keeps_it(sysfs: Sysfs) -> None:
    """The pod's name for the NIC may be its host name (VKE's nodes name RDMA NICs eth1,
    eth2, ... as pods name their interfaces): the kernel then returns it under that
    name, which is taken by the NIC itself. It was renamed to its fallback name."""
    host = FakeHost(after=0.3)  # returned while DEL waits for it
    _recover_on_host(host, replace(PLAN, nic="eth1"), MARK, sysfs, wait=5)  # type: ignore[arg-type]
    assert host.name == "eth1" and not any(c.startswith("rename") for c in host.calls)
    assert "add 192.0.2.1/26 to eth1" in host.calls


def test_two_nics_back_on_each_others_host_names_both_get_their_own() -> None:
    """VKE's nodes name RDMA NICs eth1, eth2, ... and pods name their interfaces so too:
    the pod's eth1 may be the host's eth2 and the other way round. When the pod's netns
    dies first, the kernel returns each under its pod name, the other's host name. DEL
    renamed the first to its fallback name and left it there for good (the second took
    the name the first freed), and the device plugin's config, which names eth1 and eth2,
    lost a NIC."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
    from fakes.netlink import FakeKernel

    from rdma_cni.datapath.plan import identity_of
    from rdma_cni.datapath.session import Session
    from rdma_cni.datapath.teardown import teardown
    from rdma_cni.store.state import make_state
    from rdma_cni.vocab.kinds import LinkKind
    from rdma_cni.vocab.plan import NicFacts

    k = FakeKernel()
    pod_ns = k.netns("pod", "/run/netns/pod")
    host = k.port(k.host)
    plans, indexes = [], {}
    for n, (nic, in_pod, ip) in enumerate((("eth2", "eth1", "198.51.100.1/26"),
                                           ("eth1", "eth2", "198.51.100.65/26"))):
        pci = f"0000:{0x48 + n:02x}:00.0"
        link = k.add_nic(k.host, nic, parent_dev=pci, parent_bus="pci")
        k.host.links[link.index] = link = replace(link, kind=None)
        indexes[nic] = link.index
        facts = NicFacts(name=nic, index=link.index, mtu=1500, mac=link.mac, pci=pci,
                         parent_dev=pci, parent_bus="pci")
        plans.append(IfacePlan(k=n, name=in_pod, tmp=in_pod, nic=nic, kind=LinkKind.PHYSICAL,
                               mtu=1500, table=0, addresses=(IPv4Interface(ip),),
                               identity=identity_of(facts), host_mtu=1500, host_up=True))
    pod = k.port(pod_ns)
    for p in plans:  # as ADD left them: in the pod under the pod's names
        host.move_to_netns(p.nic, pod_ns.fd, "move")
        pod.rename(p.nic, f"t{p.k}", MARK, "rename")
    for p in plans:
        pod.rename(f"t{p.k}", p.name, MARK, "rename")
    k.remove_netns(pod_ns.fd)
    assert {lk.name: lk.index for lk in host.links() if lk.name != "lo"} == \
        {"eth1": indexes["eth2"], "eth2": indexes["eth1"]}
    session = Session("/run/netns/pod", pod_required=False, ops=k)
    try:
        teardown(session, make_state("ready", "exclusive", "/run/netns/pod", "", "", 20000,
                                     plans), "abc")
    finally:
        session.close()
    assert {lk.name: lk.index for lk in host.links() if lk.name != "lo"} == indexes
    assert [str(a) for _, a in host.addresses(indexes["eth2"])] == ["198.51.100.1/26"]
    assert [str(a) for _, a in host.addresses(indexes["eth1"])] == ["198.51.100.65/26"]
    assert all(lk.up for lk in host.links() if lk.name != "lo")
