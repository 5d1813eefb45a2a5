"""What the primary-NIC check (rdma_cni/node/primary.py) costs: the netlink requests
one call sends through the kernel adapter, on a node of eight RDMA NICs and the
production config (``nodeIPs`` set), stay a handful whatever the number of NICs. The
socket is a stand-in that answers as the kernel does: a route lookup with the FIB entry
matched (the node's default route, or the local route of its address), a link by index,
a link by index or name, an empty dump."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from support.rtnl_oracle import pyroute2_encoded
from support.rtnl_standin import StandIn

from rdma_cni.adapters import rtnl
from rdma_cni.adapters.netlink import Netlink
from rdma_cni.adapters.rtnlanswer import Answer
from rdma_cni.node.primary import primary_nics

NICS = [f"rnic{i}" for i in range(8)]
#: link index -> name: the node's own NIC (eth0) and the eight RDMA NICs
LINKS = {2: "eth0", **{i + 3: name for i, name in enumerate(NICS)}}
NODE_IP = "192.0.2.10"


class Kernel(StandIn):
    """A netlink socket whose node routes both families through link ``default_via`` and
    holds its address on link ``address_on``; each request sent is recorded."""

    def __init__(self, default_via: int, address_on: int) -> None:
        super().__init__()
        self.default_via, self.address_on = default_via, address_on

    def answer(self, data: bytes, kind: int, seq: int, dump: bool) -> None:
        if not dump and kind == rtnl.RTM_GETROUTE:
            self.queue.append(self._route(Answer(rtnl.rtmsg, data, 0, len(data)), seq))
        elif not dump and kind == rtnl.RTM_GETLINK:
            req = Answer(rtnl.ifinfmsg, data, 0, len(data))  # by index, or by name
            index = req["index"] or {v: k for k, v in LINKS.items()}[req.attr("IFLA_IFNAME")]
            self.queue.append(pyroute2_encoded(
                rtnl.ifinfmsg, [("IFLA_IFNAME", LINKS[index]), ("IFLA_MTU", 1500)],
                {"index": index, "flags": 1}, rtnl.RTM_NEWLINK, 0, seq))

    def _route(self, req: Answer, seq: int) -> bytes:
        dst, family = req.attr("RTA_DST"), req["family"]
        if dst == NODE_IP:  # its local route
            fields = {"family": family, "dst_len": 32, "table": 254, "proto": 2,
                      "scope": 254, "type": 2}
            attrs: list[Any] = [("RTA_TABLE", 254), ("RTA_DST", dst),
                                ("RTA_OIF", self.address_on)]
        else:  # the lookup of a probe: the main table's default route
            fields = {"family": family, "dst_len": 0, "table": 254, "proto": 4, "type": 1}
            gw = "192.0.2.1" if family == socket.AF_INET else "2001:db8::1"
            attrs = [("RTA_TABLE", 254), ("RTA_PRIORITY", 100), ("RTA_GATEWAY", gw),
                     ("RTA_OIF", self.default_via)]
        return pyroute2_encoded(rtnl.rtmsg, attrs, fields, rtnl.RTM_NEWROUTE, 0, seq)


def _primary(kernel: Kernel, node_ips: list[str]) -> dict[str, str]:
    return primary_nics(Netlink(rtnl.Channel(kernel), "stand-in"),  # type: ignore[arg-type]
                        NICS, node_ips)


@pytest.mark.parametrize("default_via, address_on, want", [
    (2, 2, {}),  # the node's own NIC is not an RDMA NIC: none of the eight is the node's
    (6, 6, {"rnic3": "carries the node's default route"}),
    (2, 9, {"rnic6": f"holds the node's address {NODE_IP}"}),
])
def test_eight_nics_cost_a_handful_of_requests(default_via: int, address_on: int,
                                               want: dict[str, str]) -> None:
    kernel = Kernel(default_via, address_on)
    assert _primary(kernel, [NODE_IP]) == want
    # a lookup per family, one of the node address, each link found read by index
    assert len(kernel.sent) == 3 + len({default_via, address_on})
    assert not any(kernel.dumps())

