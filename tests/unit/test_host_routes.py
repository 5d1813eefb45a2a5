"""Exclusive NICs get their host routes back exactly (protocol, metric, onlink)."""

from __future__ import annotations

from rdma_cni.adapters.netlink import Link, Route
from rdma_cni.datapath.plan import IfacePlan
from rdma_cni.node.hostinfo import _facts
from rdma_cni.store.records import plan_from_dict, plan_to_dict


def test_facts_keep_route_protocol_metric_and_onlink() -> None:
    link = Link(index=3, name="rnic0", mtu=1400, mac="02:00:00:00:00:01", kind="veth", up=True)
    via = [Route(dst="198.18.0.0/15", gateway="198.51.100.62", oif=3, table=254, proto=3),
           Route(dst="198.19.0.0/16", gateway="198.51.100.62", oif=3, table=254, proto=12,
                 priority=50, onlink=True)]
    facts = _facts(link, (), via, None)
    assert facts.routes == (("198.18.0.0/15", "198.51.100.62"), ("198.19.0.0/16", "198.51.100.62"))
    assert facts.host_routes == (("198.18.0.0/15", "198.51.100.62", 3, 0, False),
                                 ("198.19.0.0/16", "198.51.100.62", 12, 50, True))
    assert str(facts.gateway) == "198.51.100.62"


def test_state_record_round_trips_host_routes() -> None:
    plan = IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1400,
                     table=100, routes=(("198.19.0.0/16", "198.51.100.62"),),
                     host_routes=(("198.19.0.0/16", "198.51.100.62", 12, 50, True),))
    assert plan_from_dict(plan_to_dict(plan)) == plan


def test_old_state_without_host_routes_still_loads() -> None:
    plan = IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1400,
                     table=100, routes=(("198.19.0.0/16", "198.51.100.62"),))
    d = plan_to_dict(plan)
    del d["host_routes"]
    assert plan_from_dict(d).host_routes == ()
