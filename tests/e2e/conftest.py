"""Fixtures of the containerd end-to-end tier (see e2e_node.py): one private
containerd per module, stand-in RDMA NICs on the host, all removed at the end."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_node import make_node


@pytest.fixture(scope="module")
def node() -> Iterator[dict[str, Any]]:
    yield from make_node()
