"""The executor, its rollback at every step boundary, the session and teardown, run
without root over the in-memory kernel (tests/support/fakes/netlink.py, itself held to the
real kernel by tests/integration/test_netlink_contract.py)."""

from __future__ import annotations

import pytest
from support.fakenode import EXCL, MARK, POD, PRIO, SHARED, Node, add, delete

from rdma_cni import testhooks
from rdma_cni.datapath import execute
from rdma_cni.datapath.plan import SYSCTLS
from rdma_cni.datapath.session import Session
from rdma_cni.errors import EnvError, IfNameInUse, IOFailure
from rdma_cni.records import replace
from rdma_cni.vocab.plan import IfacePlan


def test_shared_add_makes_marked_configured_sub_links() -> None:
    node = Node()
    add(node, SHARED)
    pod = node.view()["pod"]
    assert pod["links"] == [("eth0", "veth", 1500, True, None),
                            ("eth1", "macvlan", 9000, True, MARK),
                            ("eth2", "macvlan", 1500, True, MARK)]
    assert pod["addrs"] == [("eth1", "198.51.100.10/26"), ("eth2", "198.51.100.11/26")]
    assert (100, "198.51.100.0/26", None, "eth1", 253, False) in pod["routes"]
    assert (101, "198.19.0.0/16", "198.51.100.62", "eth2", 0, True) in pod["routes"]
    assert pod["rules"] == [(PRIO, 100, "198.51.100.10/32"), (PRIO, 101, "198.51.100.11/32")]
    assert {k[1:] for k in node.kernel.sysctls} == {(n, key) for n in ("eth1", "eth2")
                                                  for key, _ in SYSCTLS}


def test_a_taken_name_is_refused_and_leaves_nothing() -> None:
    node = Node()
    before = node.view()
    with pytest.raises(IfNameInUse, match="eth0 is already in use"):
        add(node, [replace(SHARED[0], name="eth0")])
    assert node.view() == before


def test_a_sub_link_above_the_nics_mtu_is_refused_and_leaves_nothing() -> None:
    node = Node()
    before = node.view()
    with pytest.raises(IOFailure, match=r"create macvlan .* on rnic1: invalid argument"):
        add(node, [SHARED[0], replace(SHARED[1], mtu=9000)])
    assert node.view() == before


@pytest.mark.parametrize("k", range(len(execute.steps_for(SHARED)) + 1))
def test_shared_failure_at_any_step_rolls_back(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    node = Node()
    before = node.view()
    monkeypatch.setenv(testhooks.FAIL_AT_STEP, str(k))
    with pytest.raises(IOFailure, match=f"injected failure at step {k}"):
        add(node, SHARED)
    assert node.view() == before


@pytest.mark.parametrize("k", range(len(execute.steps_for([EXCL])) + 1))
def test_exclusive_failure_at_any_step_gives_the_nic_back(monkeypatch: pytest.MonkeyPatch,
                                                          k: int) -> None:
    node = Node()
    before = node.view()
    monkeypatch.setenv(testhooks.FAIL_AT_STEP, str(k))
    with pytest.raises(IOFailure):
        add(node, [EXCL])
    assert node.view() == before
    assert all(fd in node.kernel.released for fd in node.kernel.spaces
               if node.kernel.spaces[fd].label == "a private netns")


def test_exclusive_add_moves_the_nic_in_with_its_configuration() -> None:
    node = Node()
    add(node, [EXCL])
    view = node.view()
    assert [lk[0] for lk in view["host"]["links"]] == ["rnic1"]
    assert ("eth1", "veth", 9000, True, MARK) in view["pod"]["links"]
    assert view["pod"]["addrs"] == [("eth1", "198.51.100.1/26")]
    assert (254, "198.19.0.0/16", "198.51.100.62", "eth1", 0, True) in view["pod"]["routes"]


@pytest.mark.parametrize("plans", [SHARED, [EXCL]], ids=["shared", "exclusive"])
def test_del_undoes_add_and_a_second_del_finds_nothing_left(plans: list[IfacePlan]) -> None:
    node = Node()
    before = node.view()
    add(node, plans)
    delete(node, plans)
    assert node.view() == before
    delete(node, plans)
    assert node.view() == before


def test_del_after_the_pod_netns_died_restores_the_returned_nic() -> None:
    node = Node()
    before = node.view()["host"]
    add(node, [EXCL])
    node.kill_pod()  # the kernel hands the NIC back, named as in the pod, unconfigured
    assert ("eth1", "veth", 9000, False, MARK) in node.view()["host"]["links"]
    delete(node, [EXCL])
    assert node.view()["host"] == before


def test_del_of_sub_links_after_the_pod_netns_died_is_state_only() -> None:
    node = Node()
    before = node.view()["host"]
    add(node, SHARED)
    node.kill_pod()
    delete(node, SHARED)
    assert node.view()["host"] == before


def test_del_leaves_links_it_did_not_make() -> None:
    node = Node()
    add(node, SHARED)
    pod = node.kernel.port(node.pod)  # type: ignore[arg-type]
    pod.set_alias("eth2", "someone-else", "alias")
    delete(node, SHARED)
    assert [lk[0] for lk in node.view()["pod"]["links"]] == ["eth0", "eth2"]


def test_session_refuses_a_missing_or_host_netns_for_add_and_not_for_del() -> None:
    node = Node()
    node.kill_pod()
    with pytest.raises(EnvError, match="does not exist"):
        node.session()
    s = node.session(required=False)
    assert not s.has_pod
    s.close()
    node.kernel.paths[POD] = node.host.fd
    with pytest.raises(EnvError, match="own \\(host\\) netns"):
        node.session()
    s = node.session(required=False)
    assert not s.has_pod and s.pod_fd is None
    s.close()
    with pytest.raises(EnvError, match="CNI_NETNS is empty"):
        Session("", pod_required=True, ops=node.kernel)  # type: ignore[arg-type]


def test_session_closes_its_ports() -> None:
    node = Node()
    s = node.session()
    ports = [s.host, s.pod]
    s.close()
    assert all(p is not None and p.closed for p in ports)  # type: ignore[attr-defined]
