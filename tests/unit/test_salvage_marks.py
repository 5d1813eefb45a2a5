"""DEL of an unreadable state record rebuilds what to undo from the links that bear the
attachment's mark (rdma_cni/datapath/salvage.py). The mark is readable in the pod, so a
pod with CAP_NET_ADMIN can put it on a link of its own making: only a mode that moves
NICs takes a marked link that is no sub-interface for its NIC, and only under a name
its NIC claim records. Before, a marked dummy in a shared-multi pod went to the host
under the pod's own name for it, with the addresses and routes the pod gave it."""

from __future__ import annotations

import sys
from dataclasses import replace
from ipaddress import IPv4Interface
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from fakes.netlink import FakeKernel

from rdma_cni.datapath.salvage import rebuild
from rdma_cni.datapath.session import Session
from rdma_cni.datapath.teardown import marker_of, teardown
from rdma_cni.store.core import Store
from rdma_cni.vocab.attachment import AttachmentKey
from rdma_cni.vocab.netlink import Route

KEY = AttachmentKey("vpc-cni", "cid", "eth0")
MARK = marker_of(KEY.digest())


def _pod_with_a_marked_dummy(k: FakeKernel, name: str) -> None:
    """What the pod made: a dummy under ``name`` with our mark, an address and a
    default route on it."""
    pod_ns = k.netns("pod", "/run/netns/pod")
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
