"""`rdma-cni verify`'s findings, one cause a line (tools/verify_rails.py, pure)."""

from __future__ import annotations

from rdma_cni.tools.verify_rails import (
    INDEX_DIFFERS,
    INDEX_WRONG,
    MTU_MISMATCH,
    NO_GID,
    NO_ROUTE,
    NOT_VISIBLE,
    Rail,
    local_rails,
    nccl_view,
    pair_cause,
    route_cause,
)
from rdma_cni.vocab.nic import Gid

V2 = "RoCE v2"


def _gid(ibdev: str, index: int, ip: str | None, ndev: str, gtype: str = V2) -> Gid:
    text = f"::ffff:{ip}" if ip else "fe80::1"
    return Gid(ibdev, 1, index, text, gtype, ndev)


GIDS = [_gid("rxe0", 0, None, "eth1", "IB/RoCE v1"), _gid("rxe0", 1, "198.51.100.2", "eth1"),
        _gid("rxe0", 2, "198.51.100.9", "eth1"),  # another pod's eth1 (shared table)
        _gid("rxe1", 3, "198.51.100.130", "eth2")]
IFACES = {"eth2": ("198.51.100.130", 1500), "eth1": ("198.51.100.2", 1500)}


def test_rails_name_hca_port_and_the_interfaces_own_gid_index() -> None:
    rails = local_rails(IFACES, GIDS, {}, ["rxe0", "rxe1"])
    assert [(r.ifname, r.hca, r.gid_index, r.gid, r.cause) for r in rails] == [
        ("eth1", "rxe0:1", 1, "::ffff:198.51.100.2", None),
        ("eth2", "rxe1:1", 3, "::ffff:198.51.100.130", None)]
    # indices differ, and the range covering both also holds another pod's GID
    assert "198.51.100.9" in nccl_view(GIDS, rails, {}, "eth0")["error"]
    view = nccl_view(GIDS[:2] + GIDS[3:], rails, {}, "eth0")
    assert view["NCCL_IB_HCA"] == "=rxe0:1,rxe1:1" and "NCCL_IB_ADDR_RANGE" in view


def test_no_device_and_no_gid_are_named() -> None:
    [rail] = local_rails({"eth1": ("198.51.100.2", 1500)}, [], {}, [])
    assert rail.cause is not None and rail.cause.startswith(NOT_VISIBLE)
    [rail] = local_rails({"eth1": ("198.51.100.3", 1500)}, GIDS, {}, ["rxe0", "rxe1"])
    assert rail.cause is not None and rail.cause.startswith(NO_GID), rail.cause
    assert "::ffff:198.51.100.3" in rail.cause and "rxe0, rxe1" in rail.cause


def test_an_exported_index_that_is_not_the_interfaces_is_named() -> None:
    [rail, _] = local_rails(IFACES, GIDS, {"NCCL_IB_GID_INDEX": "0"}, ["rxe0", "rxe1"])
    assert rail.gid_index == 0 and rail.own_index == 1
    assert rail.cause is not None and rail.cause.startswith(INDEX_WRONG)
    assert "selects fe80::1 (IB/RoCE v1, eth1) on rxe0:1" in rail.cause, rail.cause
    assert "index 1" in rail.cause, rail.cause
    [rail, _] = local_rails(IFACES, GIDS, {"NCCL_IB_GID_INDEX": "7"}, ["rxe0", "rxe1"])
    assert rail.cause is not None and "an empty slot" in rail.cause
    # the peer's own index is the exported one: the index differs between the pods
    peer = Rail("eth1", "198.51.100.66", 1500, "rxe5", 1, 7, 7, "::ffff:198.51.100.66")
    cause = pair_cause(rail, peer)
    assert cause is not None and cause.startswith(INDEX_DIFFERS), cause


def test_pairing_names_the_peer_mtu_and_route() -> None:
    mine = Rail("eth1", "198.51.100.2", 1500, "rxe0", 1, 1, 1, "::ffff:198.51.100.2")
    peer = Rail("eth1", "198.51.100.66", 1500, "rxe1", 1, 1, 1, "::ffff:198.51.100.66")
    assert pair_cause(mine, peer) is None
    assert "fewer RDMA interfaces" in str(pair_cause(mine, None))
    low = Rail("eth1", "198.51.100.66", 1400, "rxe1", 1, 1, 1, "::ffff:198.51.100.66")
    assert str(pair_cause(mine, low)).startswith(MTU_MISMATCH)
    gone = Rail("eth1", "198.51.100.66", 1500, cause="RDMA device not visible in the pod: x")
    assert str(pair_cause(mine, gone)) == "the peer's eth1: RDMA device not visible in the pod: x"
    assert route_cause(mine, peer, "eth1") is None
    assert str(route_cause(mine, peer, None)).startswith(NO_ROUTE)
    assert "leaves through eth0" in str(route_cause(mine, peer, "eth0"))


def test_rails_travel_as_json() -> None:
    rail = Rail("eth1", "198.51.100.2", 1500, "rxe0", 1, 1, 1, "::ffff:198.51.100.2",
                qp={"qpn": 17})
    assert Rail.from_json({**rail.to_json(), "unknown": 1}) == rail
