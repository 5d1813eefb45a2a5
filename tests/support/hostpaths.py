"""The node's own rdma-cni files are not the tests' to write: every test runs with the
product's default paths (rdma_cni/defaults.py: the log, the operation counts, the
status files, the socket, the store, the CNI bin dir and its NCCL script, the node's
conflists) looked at before
and after it, and a test that created, changed or removed one fails (a test names its
own paths, under its tmp_path). A developer's machine may be a node; the files there
are that node's. Outside the VM tier only: the VM's /run and /var are its own.

A request whose config cannot be read logs where no config can say: the session points
the plugin's test seam for that (``RDMA_CNI_TEST_LOG_FILE``, rdma_cni/testhooks.py) at
a file of its own, inherited by every plugin, ``serve`` and runtime the tests start. The
components' heartbeats (``RDMA_CNI_HEALTH_DIR``, default ``/tmp``: a container's own, the
host's outside one) go to that directory too."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from rdma_cni import defaults, logsetup
from rdma_cni.store.run import heartbeat


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(directory))
    except OSError:
        return []


#: the node's files the product writes by default, and the directories they are made in
NODE_PATHS = (
    defaults.LOG_FILE, defaults.RUN_DIR, defaults.METRICS_FILE, defaults.AGENT_STATUS,
    defaults.DEVICE_PLUGIN_STATUS, defaults.CONFIG_RECORD, defaults.RESIDENT_SOCKET,
    defaults.DATA_DIR, defaults.NCCL_ENV_HOST_PATH,
    os.path.dirname(defaults.NCCL_ENV_HOST_PATH),
    *(heartbeat.heartbeat_path(c, heartbeat.DEFAULT_DIR) for c in ("device-plugin", "agent")),
    # the conflists there (the primary's, which `install` edits); not the directory,
    # where a runtime under test (podman) adds its own network's
    *sorted(entry.path for entry in _entries(defaults.CNI_CONF_DIR)),
)

Seen = dict[str, tuple[int, int, int] | None]


def seen(paths: tuple[str, ...] = NODE_PATHS) -> Seen:
    """Each path's (inode, size, modification time), None when there is none."""
    out: Seen = {}
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            out[path] = None
            continue
        out[path] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def changed(before: Seen, after: Seen) -> list[str]:
    return sorted(p for p in before if before[p] != after.get(p))


def pytest_configure(config: pytest.Config) -> None:
    if logsetup.TEST_LOG_FILE not in os.environ:
        config._rdma_cni_log_dir = tempfile.mkdtemp(prefix="rdma-cni-tests.")  # type: ignore[attr-defined]
        os.environ[logsetup.TEST_LOG_FILE] = os.path.join(
            config._rdma_cni_log_dir, "rdma-cni.log")  # type: ignore[attr-defined]
        os.environ.setdefault(heartbeat.HEALTH_DIR_ENV,
                              config._rdma_cni_log_dir)  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    made = getattr(config, "_rdma_cni_log_dir", None)
    if made is not None:
        os.environ.pop(logsetup.TEST_LOG_FILE, None)
        if os.environ.get(heartbeat.HEALTH_DIR_ENV) == made:
            os.environ.pop(heartbeat.HEALTH_DIR_ENV, None)
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(autouse=True)
def _node_files_untouched() -> Iterator[None]:
    if os.environ.get("RDMA_CNI_IN_VM") == "1":
        yield
        return
    before = seen()
    yield
    touched = changed(before, seen())
    if touched:
        pytest.fail("the test wrote the node's own rdma-cni files (the product's default "
                    f"paths): {', '.join(touched)}; give it paths under its tmp_path",
                    pytrace=False)
