"""Fixtures of the fault suites (issue 14): faults of a running node, each driven
through both ways a CNI request is served.

- ``path`` is ``"inproc"`` (``residentSocket: ""``: the exec'd plugin does the work)
  or ``"resident"`` (``rdma-cni serve`` runs in the node netns and the exec'd
  plugin forwards to it); every test taking ``faults`` runs once per path.
- ``faults.chain(...)`` is ``rig.chain(...)`` with ``residentSocket`` set for the
  path; ``faults.served(cmd)`` counts what the server handled (0 in-process), so a
  test can prove the path it claims.
- The integration tier's ``rig`` checks the node netns and data dir are clean at
  the end.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cnirunner import Chain  # noqa: E402
from support.resident import Serve, front_layout  # noqa: E402


class Faults:
    def __init__(self, node_rig: Any, path: str, tmp: Path) -> None:
        self.rig, self.path, self.tmp = node_rig, path, tmp
        self.server: Serve | None = None
        if path == "resident":
            self.server = Serve(node_rig.node.ns, tmp / "r.sock", tmp / "serve.log")

    @property
    def socket(self) -> str:
        return str(self.tmp / "r.sock") if self.server is not None else ""

    def chain(self, mode: str, devices: Any = ("rnic0",), **extra: Any) -> Chain:
        return self.rig.chain(mode, devices, residentSocket=self.socket, **extra)

    def served(self, command: str) -> int:
        return self.server.served(command) if self.server is not None else 0

    def expect_served(self, command: str, n: int) -> None:
        """The resident path handled ``n`` ``command`` requests (in-process: none)."""
        want = n if self.server is not None else 0
        assert self.served(command) == want, f"{command} served {self.served(command)}"

    def log_text(self) -> str:
        """The plugin's log, wherever the path writes it (the server has its own)."""
        files = [self.rig.log_file, self.tmp / "serve.log"]
        return "".join(f.read_text() for f in files if f.exists())

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


@pytest.fixture(params=["inproc", "resident"])
def faults(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Faults]:
    f = Faults(request.getfixturevalue("rig"), request.param, tmp_path)
    try:
        yield f
    finally:
        f.stop()


@pytest.fixture(params=["python-client", "front"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> list[str] | None:
    """The exec'd side: the Python entry (python -m rdma_cni) or the native front as
    `install` lays it out."""
    if request.param == "python-client":
        return None
    return front_layout(request.getfixturevalue("built_binary"), tmp_path / "bin")
