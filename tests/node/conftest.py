"""Fixtures of the node tier: one DaemonSet pod (podman) and one containerd per module
and rendering, over a temp host root; everything is removed at the end (see
nodelab.py)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "e2e"))
sys.path.insert(0, str(HERE.parent))

from nodelab import Node, build_image, make_node, skip_reason  # noqa: E402
from podman import Podman  # noqa: E402


@pytest.fixture(scope="module", params=["base", "non-default-paths"])
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    """The node deployed from the base, then from the overlay that moves every path."""
    yield from make_node(request.param)


@pytest.fixture(scope="module")
def image_rig() -> Iterator[dict[str, Any]]:
    """The image this tree builds (scripts/image.sh, cached), a temp dir and a podman
    with its own containers.conf there; skipped where the node tier cannot run."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    image, _ = build_image()
    tmp = Path(tempfile.mkdtemp(prefix="rn-image-", dir="/tmp"))
    try:
        yield {"image": image, "tmp": tmp, "podman": Podman(tmp)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
