"""The lock the bundles are built from (requirements/bundle.txt): every runtime
dependency of the bundle and the image, and the build tool, pinned to one version that
satisfies pyproject's range, with hashes; setup.sh and the Containerfile install it with
``--require-hashes``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements" / "bundle.txt"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes)."""
    out: dict[str, tuple[str, int]] = {}
    name = ""
    for line in LOCK.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^ \\]+)", line)
        if m:
            name = _norm(m.group(1))
            out[name] = (m.group(2), 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            out[name] = (out[name][0], out[name][1] + 1)
    return out


def test_every_runtime_dependency_and_the_build_tool_is_pinned_with_hashes() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]
              + project["optional-dependencies"]["k8s"]]
    wanted += [Requirement(line) for line in (REPO / "requirements" / "build.in")
               .read_text().splitlines() if line and not line.startswith("#")]
    lock = locked()
    for req in wanted:
        version, hashes = lock.get(_norm(req.name), ("", 0))
        assert version, f"{req.name} is not in {LOCK.name}"
        assert req.specifier.contains(version), f"{req.name}=={version} outside {req.specifier}"
        assert hashes >= 1, f"{req.name} has no hash in {LOCK.name}"
    assert all(h >= 1 for _, h in lock.values()), "a locked package without a hash"
    assert "--index-url" not in LOCK.read_text() and "file://" not in LOCK.read_text()


def test_the_lock_is_installed_hash_checked() -> None:
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert "--require-hashes -r requirements/bundle.txt" in setup
    containerfile = (REPO / "Containerfile").read_text()
    assert "--require-hashes -r requirements/bundle.txt" in containerfile
    assert "pip install -q --no-deps '.'" in containerfile
