"""Tier selection shared by all tests (markers are registered in pyproject.toml).

- `vm`: runs only inside the VM tier (RDMA_CNI_IN_VM=1, set by scripts/vm-run.sh);
  elsewhere it is skipped. Inside the VM every non-`vm` test is deselected.
- `root`: skipped unless the effective uid is 0.
"""

from __future__ import annotations

import os

import pytest

VM_SKIP_REASON = "needs the VM tier kernel (ipvlan/dummy/rdma_rxe); run scripts/vm-run.sh"
ROOT_SKIP_REASON = "needs root (euid 0)"

# The root tiers' node rig (rig, runner, built_binary, installed_plugin) and the check
# that no test writes the node's own rdma-cni files: one registration here, so no
# conftest imports another.
pytest_plugins = ["support.rigs", "support.hostpaths"]


def in_vm() -> bool:
    return os.environ.get("RDMA_CNI_IN_VM") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if in_vm():
        deselected = [it for it in items if it.get_closest_marker("vm") is None]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [it for it in items if it.get_closest_marker("vm") is not None]
    is_root = os.geteuid() == 0
    for item in items:
        if item.get_closest_marker("vm") is not None and not in_vm():
            item.add_marker(pytest.mark.skip(reason=VM_SKIP_REASON))
        if item.get_closest_marker("root") is not None and not is_root:
            item.add_marker(pytest.mark.skip(reason=ROOT_SKIP_REASON))
