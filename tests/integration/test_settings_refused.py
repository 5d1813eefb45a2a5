"""An exclusive NIC's recorded settings, restored on the host: a key the kernel refuses
costs only that key.

Its IPv4 settings went in one RTM_SETLINK (IFLA_AF_SPEC, every key); the kernel
validates every key first and refuses the whole request for one it does not have (an
index above its ``IPV4_DEVCONF_MAX``: a record of a later kernel's, e.g. the node booted
back into an older one), so none was restored. Its IPv6 settings are written one file
after another and stopped at the first refusal (a value out of the kernel's range:
``mtu`` above the link's). Now a refusal falls back to one key at a time and is logged.

Real kernel, in-process: the adapter and :func:`restore_settings` on a veth in a
throwaway netns; oracle: ``/proc/sys/net/ipv{4,6}/conf/<nic>`` read there."""

from __future__ import annotations

import logging
import os
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.netns import ip
from support.proc import sh

from rdma_cni.adapters import netns
from rdma_cni.adapters.netlink import Netlink
from rdma_cni.datapath.hostconfig import restore_settings
from rdma_cni.vocab.netlink import IPV4_DEVCONF
from rdma_cni.vocab.plan import IfacePlan

pytestmark = pytest.mark.root


@pytest.fixture
def host() -> Iterator[tuple[str, Netlink]]:
    """A netns with a veth ``rnic0`` (the node's defaults) and a port into it."""
    name = f"rcsr{uuid.uuid4().hex[:6]}"
    ip(None, "netns", "add", name)
    try:
        ip(name, "link", "add", "rnic0", "type", "veth", "peer", "name", "rnic1")
        home = netns.host_fd()
        fd = netns.open_netns(f"/run/netns/{name}")
        nl = Netlink.inside(fd, home, "the host")
        try:
            yield name, nl
        finally:
            nl.close()
            os.close(fd)
            os.close(home)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _conf(ns: str, family: str, key: str) -> int:
    return int(sh("ip", "netns", "exec", ns, "cat", f"/proc/sys/net/{family}/conf/rnic0/{key}"))


def _plan(nl: Netlink, **settings: dict[str, int]) -> IfacePlan:
    """A plan recording ``settings`` and, for the rest, what rnic0 has now."""
    now = nl.link_conf("rnic0")
    assert now is not None
    saved: dict[str, Any] = {**now.saved(), "ipv4": {}, "ipv6": {}, **settings}
    return IfacePlan(k=0, name="eth1", tmp="t", nic="rnic0", kind="physical", mtu=1500,
                     table=100, host_link=saved)


def test_an_ipv4_key_the_kernel_lacks_costs_only_itself(
        host: tuple[str, Netlink], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    ns, nl = host
    # a key of a later kernel, its index above any this one has
    monkeypatch.setitem(IPV4_DEVCONF, "a_later_kernels", 255)
    assert (_conf(ns, "ipv4", "arp_ignore"), _conf(ns, "ipv4", "accept_local")) == (0, 0)
    plan = _plan(nl, ipv4={"arp_ignore": 2, "a_later_kernels": 1, "accept_local": 1})
    with caplog.at_level(logging.WARNING, logger="rdma_cni"):
        restore_settings(nl, "rnic0", plan)
    assert (_conf(ns, "ipv4", "arp_ignore"), _conf(ns, "ipv4", "accept_local")) == (2, 1)
    refused = [r.getMessage() for r in caplog.records if "not restored" in r.getMessage()]
    assert len(refused) == 1 and "IPv4 setting a_later_kernels" in refused[0], refused


def test_an_ipv6_value_out_of_range_costs_only_itself(
        host: tuple[str, Netlink], caplog: pytest.LogCaptureFixture) -> None:
    ns, nl = host
    assert (_conf(ns, "ipv6", "accept_ra"), _conf(ns, "ipv6", "mtu")) == (1, 1500)
    plan = _plan(nl, ipv6={"mtu": 9000, "accept_ra": 2, "autoconf": 0})
    with caplog.at_level(logging.WARNING, logger="rdma_cni"):
        restore_settings(nl, "rnic0", plan)
    assert (_conf(ns, "ipv6", "accept_ra"), _conf(ns, "ipv6", "autoconf"),
            _conf(ns, "ipv6", "mtu")) == (2, 0, 1500)
    refused = [r.getMessage() for r in caplog.records if "not restored" in r.getMessage()]
    assert len(refused) == 1 and "IPv6 setting mtu" in refused[0], refused
