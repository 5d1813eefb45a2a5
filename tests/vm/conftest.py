"""Fixtures for the VM tier: netns, dummy and virtio stand-in NICs, Soft-RoCE devices.

All of them remove what they create. They only work inside the VM (RDMA_CNI_IN_VM=1);
tests using them carry the `vm` marker, so elsewhere they are skipped before setup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import vmkit
from support.netns import ip
from support.proc import sh, wait_for
from vmkit import Rxe


@pytest.fixture
def make_netns() -> Iterator[Callable[[], str]]:
    """Factory: a fresh network namespace (deleted at teardown)."""
    made: list[str] = []

    def make() -> str:
        name = vmkit.unique_name("vmns")
        sh("ip", "netns", "add", name)
        made.append(name)
        return name

    yield make
    for name in reversed(made):
        with contextlib.suppress(RuntimeError):
            sh("ip", "netns", "delete", name)


@pytest.fixture
def make_dummy() -> Iterator[Callable[[], str]]:
    """Factory: an up dummy NIC in the VM's root netns (deleted at teardown)."""
    made: list[str] = []

    def make() -> str:
        name = vmkit.unique_name("dum")
        ip(None, "link", "add", name, "type", "dummy")
        made.append(name)
        ip(None, "link", "set", name, "up")
        return name

    yield make
    for name in reversed(made):
        if vmkit.link_exists(name):
            with contextlib.suppress(RuntimeError):
                ip(None, "link", "delete", name)


@pytest.fixture(scope="session")
def virtio_nics() -> list[str]:
    """The VM's two virtio-net PCI NICs (vng --network loop), up, in the root netns.

    They behave like physical NICs: a PCI device in sysfs, returned to the root
    netns when their netns dies. Tests that move one must leave it in the root netns.
    """
    nics = vmkit.virtio_nics()
    if len(nics) < 2:
        pytest.skip(f"needs two virtio-net NICs (vng --network loop), found {nics}")
    for nic in nics:
        ip(None, "link", "set", nic, "up")
    import vmrig

    for nic in nics:  # carrier comes some seconds later under emulation: wait for it here,
        # not in the middle of a test that compares the node with its baseline
        wait_for(lambda n=nic: vmrig.has_carrier(n), timeout=vmrig.SETTLE)
    return nics


@pytest.fixture(scope="session")
def make_rxe() -> Iterator[Callable[[str], Rxe]]:
    """Factory: a Soft-RoCE device on a netdev (one per netdev; deleted at session end)."""
    made: dict[str, Rxe] = {}

    def make(netdev: str) -> Rxe:
        if netdev not in made:
            name = f"rxe{len(made)}"
            vmkit.add_rxe(name, netdev)
            made[netdev] = Rxe(name, netdev)
        return made[netdev]

    yield make
    for rxe in made.values():
        with contextlib.suppress(RuntimeError):
            vmkit.delete_rxe(rxe.name)


@pytest.fixture(scope="session")
def rxe(virtio_nics: list[str], make_rxe: Callable[[str], Rxe]) -> Rxe:
    """Soft-RoCE on the first virtio NIC: an RDMA NIC stand-in with a PCI device."""
    return make_rxe(virtio_nics[0])


@pytest.fixture(scope="session")
def vm_binary(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The built binary (dist/rdma-cni, built on the host), copied into the guest once."""
    import vmrig

    return vmrig.guest_binary(tmp_path_factory.mktemp("bundle"))


@pytest.fixture(scope="session")
def vm_plugin(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The host plugin (dist/rdma-cni-host) laid out in a CNI bin dir in the guest, as
    ``install`` does on a node: what the rig's chains run."""
    import vmrig

    return vmrig.guest_plugin(tmp_path_factory.mktemp("plugin"))


@pytest.fixture
def rig(tmp_path: Path, vm_plugin: list[str]) -> Iterator[object]:
    """A :class:`vmrig.VmRig` in the VM's root netns, verified clean at the end."""
    import vmrig

    with vmrig.vm_rig(tmp_path, vm_plugin) as made:
        yield made
