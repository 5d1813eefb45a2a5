"""Fixtures of the native integration tier (root, veth/macvlan/netns on this kernel).

``rig`` (tests/support/rigs.py) gives each test a node netns with stand-in NICs, pod
netns, a data dir and a libcni-like :class:`~cnirunner.Chain`; after the test it
asserts that the node netns is exactly as it was, the data dir holds no
state/ips/nics files, and every netns the test made is gone.
"""

from __future__ import annotations

import os

import pytest

if os.geteuid() != 0:  # tests/conftest.py skips `root` tests; never build netns as non-root
    pytestmark = pytest.mark.skip(reason="needs root")
