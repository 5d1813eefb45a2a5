"""The node rig of the root tiers (integration, faults, hardening), registered as
fixtures by tests/conftest.py (``pytest_plugins``).

``rig`` gives each test a node netns with stand-in NICs, pod netns, a data dir and
a libcni-like :class:`~cnirunner.Chain`; after the test it asserts that the node
netns is exactly as it was, the data dir holds no state/ips/nics files, and every
netns the test made is gone. ``built_binary`` builds the bundle once per session,
``installed_plugin`` lays it out as a node runs it, ``runner`` picks what
``rig.chain()`` runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from cnirunner import (
    BINARY,
    HOST_TREE,
    HPC_NET,
    REPO,
    SETTLE,
    Chain,
    Node,
    Pod,
    data_files,
    install_host_tree,
    plugin_conf,
    snapshot,
    wait_oper_up,
    without,
)

from support.netns import named as netns_named


@pytest.fixture(scope="session")
def built_binary(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Build dist/rdma-cni once per session (scripts/build.sh is a no-op when up to date)
    and run a private copy of the bundle, so a concurrent rebuild cannot pull it away.

    ``RDMA_CNI_TEST_BINARY`` points the suite at another build instead.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root")
    override = os.environ.get("RDMA_CNI_TEST_BINARY")
    if override:
        return [override]
    dest = tmp_path_factory.mktemp("bundle") / "rdma-cni"
    for _ in range(3):
        proc = subprocess.run([str(REPO / "scripts" / "build.sh")], cwd=REPO,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"build failed: {proc.stdout}{proc.stderr}"
        try:  # the host tree beside it, where install looks for it (as in the image)
            shutil.copytree(BINARY.parent, dest, symlinks=True, dirs_exist_ok=True)
            shutil.copytree(HOST_TREE, dest.parent / HOST_TREE.name, symlinks=True,
                            dirs_exist_ok=True)
            break
        except (OSError, shutil.Error):  # rebuilt under our feet: build and copy again
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(dest.parent / HOST_TREE.name, ignore_errors=True)
    return [str(dest / BINARY.name)]


@pytest.fixture(scope="session")
def installed_plugin(built_binary: list[str],
                     tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The plugin as a node runs it: the session's host tree (beside ``built_binary``'s
    private copy) laid out in a CNI bin dir of its own by install's functions
    (``<bin>/rdma-cni`` -> the versioned tree's front, which forwards to ``serve`` or
    runs the plugin through the tree's own loader). ``RDMA_CNI_TEST_BINARY`` points the
    suite at another build instead."""
    override = os.environ.get("RDMA_CNI_TEST_BINARY")
    if override:
        return [override]
    tree = Path(built_binary[0]).parent.parent / HOST_TREE.name
    return [str(install_host_tree(tmp_path_factory.mktemp("cni-bin"), tree))]


class Rig:
    """One test's node, pods, data dir and chain; verified clean at the end."""

    def __init__(self, tmp: Path, binary: Sequence[str] | None = None) -> None:
        self.binary = binary  # the default runner of chain(): None is python -m rdma_cni
        self.node = Node()
        self.tmp = tmp
        self.data_dir = tmp / "data"
        self.log_file = tmp / "rdma-cni.log"
        self.baseline: dict[str, Any] | None = None
        self.gone: set[str] = set()  # NICs a test destroys on purpose (veth dies with a netns)

    # --- building -------------------------------------------------------------
    def nic(self, name: str = "rnic0", cidr: str | None = "198.51.100.1/26",
            gw: str | None = "198.51.100.62", **kw: Any) -> str:
        routes = kw.pop("routes", [(HPC_NET, gw)] if gw and cidr else [])
        return self.node.add_nic(name, cidr, routes=routes, **kw)

    def pod(self, eth0: str | None = "203.0.113.5/24") -> Pod:
        return self.node.add_pod(eth0)

    def plugin(self, mode: str, devices: Sequence[str] = ("rnic0",),
               **extra: Any) -> dict[str, Any]:
        return plugin_conf(mode, devices, self.tmp, **extra)

    def chain(self, mode: str, devices: Sequence[str] = ("rnic0",), *,
              binary: Sequence[str] | None = None, cni_version: str = "0.4.0",
              **extra: Any) -> Chain:
        """The chain to drive; the node's baseline snapshot is taken at the first call."""
        if self.baseline is None:
            self.baseline = snapshot(self.node.ns)
        return Chain(self.plugin(mode, devices, **extra), cni_version=cni_version,
                     node_ns=self.node.ns, binary=binary or self.binary)

    # --- oracles ----------------------------------------------------------------
    def files(self) -> list[str]:
        return data_files(self.data_dir)

    def node_changes(self) -> dict[str, Any]:
        """What differs from the baseline (empty when the node is as before). A NIC that
        was up and has just come back gets its carrier within a second (the kernel's
        linkwatch updates operstate late): it is waited for, up to 2 s; then the kernel's
        own work on it (its IPv6 link-local address, DAD) gets a few seconds to end
        before a difference counts."""
        assert self.baseline is not None
        want = without(self.baseline, self.gone)
        present = set(self.node.links())
        for lk in want["links"]:
            if lk["operstate"] == "UP" and lk["ifname"] in present:
                with contextlib.suppress(RuntimeError):
                    wait_oper_up(self.node.ns, str(lk["ifname"]), timeout=2.0)
        deadline = time.monotonic() + SETTLE
        while True:
            have = snapshot(self.node.ns)
            if have == want or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        return {k: {"was": [x for x in want[k] if x not in have[k]],
                    "now": [x for x in have[k] if x not in want[k]]}
                for k in want if want[k] != have[k]}

    def assert_clean(self) -> None:
        assert self.files() == [], f"data dir not clean: {self.files()}"
        if self.baseline is not None:
            assert self.node_changes() == {}, "node netns changed"

    def log_tail(self, n: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text().splitlines()[-n:])


@pytest.fixture
def runner(request: pytest.FixtureRequest) -> list[str] | None:
    """What ``rig.chain()`` runs by default: ``python -m rdma_cni``, or the session's build
    as installed on a node (``installed_plugin``: immune to edits of the working tree
    during the run) in modules that set ``PLUGIN_RUNNER = "binary"``;
    RDMA_CNI_TEST_RUNNER=python forces python everywhere."""
    if os.environ.get("RDMA_CNI_TEST_RUNNER") == "python" or \
            getattr(request.module, "PLUGIN_RUNNER", "python") != "binary":
        return None
    return list(request.getfixturevalue("installed_plugin"))


@pytest.fixture
def rig(tmp_path: Path, runner: list[str] | None) -> Iterator[Rig]:
    r = Rig(tmp_path, runner)
    failed_check: AssertionError | None = None
    try:
        yield r
        try:
            r.assert_clean()
        except AssertionError as exc:
            failed_check = exc
    finally:
        r.node.close()
    assert netns_named(r.node.prefix) == [], "netns left behind"
    if failed_check is not None:
        raise AssertionError(f"{failed_check}\nplugin log:\n{r.log_tail()}")
