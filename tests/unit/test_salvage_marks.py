"""DEL of an unreadable state record rebuilds what to undo from the links that bear the
attachment's mark (rdma_cni/datapath/salvage.py). The mark is readable in the pod, so a
pod with CAP_NET_ADMIN can put it on a link of its own making: only a mode that moves
NICs takes a marked link that is no sub-interface for its NIC, and only under a name
its NIC claim records. Before, a marked dummy in a shared-multi pod went to the host
under the pod's own name for it, with the addresses and routes the pod gave it."""

from __future__ import annotations

import sys
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

import pytest

from rdma_cni.records import replace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from fakes.netlink import FakeKernel

from rdma_cni.datapath.plan import identity_of
from rdma_cni.datapath.salvage import rebuild
from rdma_cni.datapath.session import Session
from rdma_cni.datapath.teardown import marker_of, teardown
from rdma_cni.store.core import Store
from rdma_cni.store.records import CLAIM_ROUTES, claim_plan
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.kinds import LinkKind
from rdma_cni.vocab.netlink import Route
from rdma_cni.vocab.plan import HostRoute, IfacePlan, NicFacts

KEY = AttachmentKey("vpc-cni", "cid", "eth0")
MARK = marker_of(KEY.digest())


def _pod_with_a_marked_dummy(k: FakeKernel, name: str) -> None:
    """What the pod made: a dummy under ``name`` with our mark, an address and a
    default route on it."""
    pod_ns = k.spaces[k.paths["/run/netns/pod"]] if "/run/netns/pod" in k.paths else \
        k.netns("pod", "/run/netns/pod")
    dummy = k.add_nic(pod_ns, name, virtual=True)
    pod_ns.links[dummy.index] = replace(dummy, kind="dummy", alias=MARK, up=True)
    pod = k.port(pod_ns)
    pod.add_address(name, IPv4Interface("192.0.2.77/32"))
    pod.add_route(Route(dst="0.0.0.0/0", gateway="198.51.100.66", oif=dummy.index,
                        table=254, onlink=True))


def _salvage(k: FakeKernel, store: Store, moves_nics: bool) -> list[str]:
    session = Session("/run/netns/pod", pod_required=False, ops=k)
    try:
        assert session.host is not None
        state = rebuild(store, KEY, session.pod, session.host, "/run/netns/pod", 20000,
                        moves_nics)
        teardown(session, state, KEY.digest())
        return [p.name for p in state.interfaces]
    finally:
        session.close()


@pytest.mark.parametrize(("moves_nics", "claimed"), [(False, "eth1"), (False, None),
                                                      (True, None), (True, "eth2")])
def test_a_marked_link_the_pod_made_never_reaches_the_host(
        tmp_path: Path, moves_nics: bool, claimed: str | None) -> None:
    store = Store(str(tmp_path / "data"))
    if claimed is not None:
        with store.lock():
            store.claim_nic("rnic0", KEY, claimed)  # a claim under another pod name
    k = FakeKernel()
    k.add_nic(k.host, "rnic0", parent_dev="0000:48:00.0", parent_bus="pci")
    before = ([(lk.name, lk.index) for lk in k.port(k.host).links()],
              k.port(k.host).addresses(), k.port(k.host).routes())
    _pod_with_a_marked_dummy(k, "eth1")
    assert _salvage(k, store, moves_nics) == []
    host = k.port(k.host)
    assert ([(lk.name, lk.index) for lk in host.links()], host.addresses(),
            host.routes()) == before


def _exclusive_nic_in_pod(k: FakeKernel, store: Store, with_plan: bool) -> int:
    """rnic0, a PCI NIC with 198.51.100.1/26 and a route via 198.51.100.62 on the host,
    claimed by KEY (its claim holding ADD's plan when ``with_plan``, as an earlier
    release's claim did not) and moved into the pod, where the pod hid it under another
    name and made a marked dummy, with an address and a default route, under the name the
    claim records (eth1). Its index."""
    nic = k.add_nic(k.host, "rnic0", parent_dev="0000:48:00.0", parent_bus="pci",
                    perm_mac="02:00:00:00:48:00")
    k.host.links[nic.index] = nic = replace(nic, kind=None)
    host = k.port(k.host)
    host.add_address("rnic0", IPv4Interface("198.51.100.1/26"))
    host.add_route(Route(dst="198.19.0.0/16", gateway="198.51.100.62", oif=nic.index,
                         table=254))
    facts = NicFacts(name="rnic0", index=nic.index, mtu=1500, mac=nic.mac, pci="0000:48:00.0",
                     parent_dev="0000:48:00.0", parent_bus="pci", perm_mac=nic.perm_mac,
                     addresses=(IPv4Interface("198.51.100.1/26"),),
                     host_routes=(HostRoute("198.19.0.0/16", "198.51.100.62", 3, 0, False),))
    plan = IfacePlan(k=0, name="eth1", tmp="eth1", nic="rnic0", kind=LinkKind.PHYSICAL,
                     mtu=1500, table=0, addresses=facts.addresses, identity=identity_of(facts),
                     host_mtu=1500, host_up=True, host_routes=facts.host_routes)
    with store.lock():
        assert store.claim_nic("rnic0", KEY, "eth1", claim_plan(plan) if with_plan else None)
    pod_ns = k.netns("pod", "/run/netns/pod")
    host.move_to_netns("rnic0", pod_ns.fd, "move")
    pod = k.port(pod_ns)
    pod.rename("rnic0", "hidden0", MARK, "hide")
    _pod_with_a_marked_dummy(k, "eth1")
    return nic.index


@pytest.mark.parametrize("with_plan", [True, False])
def test_an_exclusive_nic_the_pod_hid_is_never_replaced_by_its_look_alike(
        tmp_path: Path, with_plan: bool) -> None:
    store = Store(str(tmp_path / "data"))
    k = FakeKernel()
    index = _exclusive_nic_in_pod(k, store, with_plan)
    _salvage(k, store, moves_nics=True)
    host = k.port(k.host)
    on_host = host.link("rnic0")
    pod = k.port(k.spaces[k.paths["/run/netns/pod"]])
    assert pod.link("eth1") is not None and pod.link("eth1").kind == "dummy"  # left
    assert ("0.0.0.0/0", "198.51.100.66") not in {(r.dst, r.gateway) for r in host.routes()}
    if with_plan:  # the NIC itself came back, with what the host had, not the pod's
        assert on_host is not None and on_host.index == index
        assert [a for _, a in host.addresses(index)] == [IPv4Interface("198.51.100.1/26")]
        assert ("198.19.0.0/16", "198.51.100.62") in {(r.dst, r.gateway)
                                                      for r in host.routes(oif=index)}
    else:  # an earlier release's claim proves nothing: nothing is taken
        assert on_host is None


def test_a_claim_keeps_the_plan_and_at_most_claim_routes_of_it(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "data"))
    routes = tuple(HostRoute(f"198.19.{i // 250}.{i % 250}/32", "198.51.100.62", 3, 0, False)
                   for i in range(CLAIM_ROUTES + 1))
    plan = IfacePlan(k=0, name="eth1", tmp="eth1", nic="rnic0", kind=LinkKind.PHYSICAL,
                     mtu=1500, table=0, identity={"pci": "0000:48:00.0", "kind": None},
                     host_routes=routes[:CLAIM_ROUTES])
    big = replace(plan, nic="rnic1", host_routes=routes)
    with store.lock():
        assert store.claim_nic("rnic0", KEY, "eth1", claim_plan(plan))
        assert store.claim_nic("rnic1", KEY, "eth2", claim_plan(big))
        assert store.claim_nic("rnic0", KEY, "eth1", claim_plan(plan))  # a repeated ADD
    claims = store.claimed_plans(KEY)
    assert store.nic_claims() == {"rnic0": (KEY, "eth1"), "rnic1": (KEY, "eth2")}
    assert len(claims["rnic0"][1]["host_routes"]) == CLAIM_ROUTES  # type: ignore[index]
    kept = claims["rnic1"][1]
    assert kept is not None and kept["host_routes"] == [] and kept["hostRoutesLeft"]
    assert (tmp_path / "data" / "nics" / "rnic1").stat().st_size < 2000
    assert store.claimed_plans(AttachmentKey("vpc-cni", "other", "eth0")) == {}


def test_a_marked_sub_link_on_another_nic_is_not_ours(tmp_path: Path) -> None:
    """The pod's eth0 is an ipvlan on the node's primary NIC (as under some primaries);
    the pod names it eth2 and marks it, and a reservation of ours names eth2. Salvage
    deletes only the marked sub-link whose lower device is the NIC of its reservation's
    subnet, on the host: ours on rnic0, not the primary's."""
    store = Store(str(tmp_path / "data"))
    with store.lock():
        for ip, ifname in (("198.51.100.5", "eth1"), ("198.51.100.6", "eth2")):
            assert store.reserve_ip("198.51.100.0/26", IPv4Address(ip), KEY, ifname)
    k = FakeKernel()
    k.add_nic(k.host, "rnic0")
    k.add_nic(k.host, "ens3")
    host = k.port(k.host)
    host.add_address("rnic0", IPv4Interface("198.51.100.1/26"))
    host.add_address("ens3", IPv4Interface("203.0.113.1/24"))
    pod_ns = k.netns("pod", "/run/netns/pod")
    for kind, nic, name in ((LinkKind.MACVLAN, "rnic0", "eth1"), (LinkKind.IPVLAN, "ens3", "eth2")):
        host.create_sublink(kind, name, host.require(nic), pod_ns.fd, 1500, None)
        k.port(pod_ns).set_alias(name, MARK, "mark")
    assert _salvage(k, store, False) == ["eth1", "eth2"]
    assert [lk.name for lk in k.port(pod_ns).links()] == ["lo", "eth2"]
