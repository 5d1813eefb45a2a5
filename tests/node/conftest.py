"""Fixtures of the node tier: one DaemonSet pod (podman) and one containerd per module
and rendering, over a temp host root; everything is removed at the end (see
nodelab.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "e2e"))
sys.path.insert(0, str(HERE.parent))

from nodelab import Node, make_node  # noqa: E402


@pytest.fixture(scope="module", params=["base", "non-default-paths"])
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    """The node deployed from the base, then from the overlay that moves every path."""
    yield from make_node(request.param)
