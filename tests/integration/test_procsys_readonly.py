"""The pod interface's IPv4 settings (arp_ignore, arp_announce, rp_filter, arp_notify) go
through netlink, not /proc/sys: a lookup there grows with the netns that have had one
(four writes 0.67 ms with 512 such pods, bench/floor_steps.py), and a plugin run in a
container sees /proc/sys read-only. The installed build runs in a mount namespace of its
own with /proc/sys bound read-only over the kernel's; the settings are read back from
the test's own view (/proc/sys in the pod's netns), with the rig's clean check after DEL."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from cnirunner import SYSCTLS, rdma_blocks

pytestmark = pytest.mark.root
PLUGIN_RUNNER = "binary"
READ_ONLY = 'mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && ' \
            'exec "$@"'


def read_only_proc_sys(argv: list[str]) -> list[str]:
    """``argv`` run with /proc/sys read-only, as in a container."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", READ_ONLY, "sh", *argv]


def test_the_wrapper_makes_proc_sys_read_only() -> None:
    write = ["sh", "-c", "echo 0 > /proc/sys/net/ipv4/conf/lo/arp_ignore"]
    proc = subprocess.run(read_only_proc_sys(write), capture_output=True, text=True)
    assert proc.returncode != 0 and "Read-only file system" in proc.stderr, proc


@pytest.mark.parametrize("mode", ["shared-multi", "exclusive"])
def test_a_read_only_proc_sys_still_gets_the_interfaces_their_settings(rig: Any,
                                                                        mode: str) -> None:
    rig.nic("rnic0", "198.51.100.1/26", "198.51.100.62")
    chain = rig.chain(mode)
    assert chain.binary is not None
    chain.binary = read_only_proc_sys(list(chain.binary))
    pod = rig.pod(eth0=None)
    run = chain.add("ro0", pod.path, rdma_blocks(1), pod="ro0")
    assert run.rc == 0, run.err
    for key, want in SYSCTLS.items():
        assert pod.sysctl("eth1", key) == want, key
    assert chain.delete("ro0").rc == 0
