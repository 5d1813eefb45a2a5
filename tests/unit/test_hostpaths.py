"""tests/support/hostpaths.py, the check that no test writes the node's own rdma-cni
files: what it compares notices a file made, written, replaced or removed."""

from __future__ import annotations

import os
from pathlib import Path

from support import hostpaths

from rdma_cni import defaults


def test_a_file_made_written_replaced_or_removed_is_noticed(tmp_path: Path) -> None:
    made, written, replaced, removed, kept = (str(tmp_path / n) for n in "abcde")
    for path in (written, replaced, removed, kept):
        Path(path).write_text("x")
    paths = (made, written, replaced, removed, kept)
    before = hostpaths.seen(paths)
    Path(made).write_text("x")
    Path(written).write_text("xy")
    Path(replaced + ".new").write_text("x")
    os.replace(replaced + ".new", replaced)
    os.unlink(removed)
    assert hostpaths.changed(before, hostpaths.seen(paths)) == sorted(
        [made, written, replaced, removed])


def test_the_node_paths_are_the_products_defaults() -> None:
    for path in (defaults.LOG_FILE, defaults.METRICS_FILE, defaults.AGENT_STATUS,
                 defaults.DEVICE_PLUGIN_STATUS, defaults.RESIDENT_SOCKET, defaults.DATA_DIR,
                 defaults.RUN_DIR, defaults.NCCL_ENV_HOST_PATH):
        assert path in hostpaths.NODE_PATHS
