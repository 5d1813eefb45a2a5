"""The device plugin's read of the NIC pools while a NIC is renamed again and again (a
udev rename, an operator's): a NIC listed and gone by its name at the look-up that
follows is left out of that read, never the end of the device plugin's poll thread.

Oracle: what ``host_nics`` returns, read in a netns of our own where a veth ``eth1``
(192.0.2.1/24) is renamed ``eth1x`` and back, ``ip -batch`` as fast as it goes."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cnirunner import sh

from rdma_cni.adapters import netns
from rdma_cni.node.pools import host_nics

pytestmark = pytest.mark.root

ADDR = "192.0.2.1/24"


@pytest.fixture
def renamed(tmp_path: Path) -> Iterator[str]:
    """A netns whose eth1 keeps being renamed (eth1 <-> eth1x) while the test runs."""
    ns = f"dpr{uuid.uuid4().hex[:8]}"
    sh("ip", "netns", "add", ns)
    renamer = None
    try:
        sh("ip", "-n", ns, "link", "add", "name", "eth1", "type", "veth", "peer", "name", "p1")
        sh("ip", "-n", ns, "addr", "add", ADDR, "dev", "eth1")
        batch = tmp_path / "renames"
        batch.write_text("link set dev eth1 name eth1x\nlink set dev eth1x name eth1\n" * 500)
        renamer = subprocess.Popen(
            ["sh", "-c", f'while :; do ip -n {ns} -batch "{batch}" || exit 1; done'],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        yield ns
    finally:
        if renamer is not None:
            renamer.kill()
            renamer.wait()
        sh("ip", "netns", "del", ns)


def test_a_nic_renamed_while_the_pools_are_read_is_left_out(renamed: str) -> None:
    fd = os.open(f"/var/run/netns/{renamed}", os.O_RDONLY | os.O_CLOEXEC)
    home = netns.host_fd()
    seen, calls = {"with": 0, "without": 0}, 0
    try:
        with netns.entered(fd, home):
            end = time.monotonic() + 4.0
            while time.monotonic() < end:
                facts, host_addrs = host_nics(["eth1"])  # never NicUnavailable
                calls += 1
                if "eth1" in facts:
                    assert [str(a) for a in facts["eth1"].addresses] == [ADDR]
                    seen["with"] += 1
                else:
                    seen["without"] += 1
                assert {str(a) for a in host_addrs} == {"192.0.2.1"}
    finally:
        os.close(fd)
        os.close(home)
    assert seen["with"] and seen["without"], (calls, seen)
