"""A node's reboot, as the runtime meets it after the boot: every pod netns is gone, the
runtime DELs the old sandboxes (their netns paths no longer exist) and ADDs new ones.
Two stores: a data dir on a tmpfs, emptied by the reboot, and one on disk, which keeps
what the crash left, including what a power loss cuts of records written without an
fsync (an empty file, a file cut mid-write). The new boot is a new kernel boot ID: the
plugin (the installed build) runs in a mount namespace of its own with another
/proc/sys/kernel/random/boot_id bound over the kernel's. Oracles: the pods' addresses
(ip -j), the store's files, and the rig's clean check (the node as before, no file left)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cnirunner import rdma_blocks

pytestmark = pytest.mark.root
PLUGIN_RUNNER = "binary"

PODS = 4


def booted(binary: list[str], boot_file: Path) -> list[str]:
    """``binary`` run as in another boot: ``boot_file`` over the kernel's boot ID."""
    script = 'mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, str(boot_file),
            *binary]


@pytest.fixture
def tmpfs_data(rig: Any) -> Iterator[Path]:
    """The rig's data dir on a tmpfs of its own (as /run is on a node)."""
    rig.data_dir.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "rdma-cni-test",
                    str(rig.data_dir)], check=True)
    try:
        yield rig.data_dir
    finally:
        subprocess.run(["umount", str(rig.data_dir)], check=False)


def start_pods(rig: Any, chain: Any, tag: str) -> dict[str, Any]:
    pods = {f"{tag}{i}": rig.pod(eth0=None) for i in range(PODS)}
    for cid, pod in pods.items():
        run = chain.add(cid, pod.path, rdma_blocks(1), pod=cid)
        assert run.rc == 0, run.err
    return pods


def addresses(pods: dict[str, Any]) -> list[str]:
    return [a for pod in pods.values() for a in pod.addrs("eth1")]


def reboot(rig: Any, pods: dict[str, Any]) -> None:
    """What a reboot leaves of the pods: no netns, so none of their interfaces."""
    for pod in pods.values():
        rig.node.delete_pod(pod)


def after_reboot(rig: Any, chain: Any, old: dict[str, Any]) -> dict[str, Any]:
    """The runtime after the boot: the DEL of every old sandbox, then new pods."""
    for cid in old:
        run = chain.delete(cid)
        assert run.rc == 0, run.err
    new = start_pods(rig, chain, "new")
    seen = addresses(new)
    assert len(seen) == PODS and len(set(seen)) == PODS, seen  # one address per pod
    return new


def stop(chain: Any, pods: dict[str, Any]) -> None:
    for cid in pods:
        assert chain.delete(cid).rc == 0


def test_a_reboot_empties_a_store_on_tmpfs(rig: Any, tmpfs_data: Path) -> None:
    rig.nic("rnic0", "198.51.100.1/26", "198.51.100.62")
    chain = rig.chain("shared-multi")
    old = start_pods(rig, chain, "old")
    assert len(rig.files()) == 2 * PODS

    reboot(rig, old)
    subprocess.run(["umount", str(tmpfs_data)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "rdma-cni-test",
                    str(tmpfs_data)], check=True)
    assert rig.files() == []

    new = after_reboot(rig, chain, old)
    assert len(rig.files()) == 2 * PODS  # the new pods', nothing else
    stop(chain, new)


def test_a_reboot_after_a_power_loss_leaves_nothing_of_the_old_pods(
        rig: Any, tmp_path: Path) -> None:
    rig.nic("rnic0", "198.51.100.1/26", "198.51.100.62")
    chain = rig.chain("shared-multi")
    old = start_pods(rig, chain, "old")
    files = rig.files()
    assert len(files) == 2 * PODS
    # what a power loss leaves of records written without an fsync: two cut records
    # (an address's reservation left empty, a state record cut mid-write)
    addr = next(rig.data_dir / f for f in files if f.startswith("addrs/"))
    addr.write_bytes(b"")
    state = next(rig.data_dir / f for f in files if f.startswith("state/"))
    state.write_bytes(state.read_bytes()[:40])

    reboot(rig, old)
    boot_file = tmp_path / "boot_id"
    boot_file.write_text(f"{uuid.uuid4()}\n")
    assert chain.binary is not None
    chain.binary = booted(list(chain.binary), boot_file)

    new = after_reboot(rig, chain, old)
    keys = {json.loads((rig.data_dir / f).read_text())["key"]["containerID"]
            for f in rig.files()}
    assert keys == set(new), rig.files()  # the old pods' records are all gone
    assert len(rig.files()) == 2 * PODS
    lock = (rig.data_dir / "lock").read_text().strip()
    assert lock == boot_file.read_text().strip()
    stop(chain, new)

