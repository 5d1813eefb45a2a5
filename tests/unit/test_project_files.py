"""LICENSE matches pyproject.toml's license, CHANGELOG.md covers the version, and the
build's commit id is what `rdma-cni --version` needs (``unknown`` outside git)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from rdma_cni import __version__, cliargs

REPO = Path(__file__).resolve().parents[2]


def test_license_matches_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert project["version"] == __version__


def test_changelog_covers_the_version() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text
    assert re.search(rf"^## \[{re.escape(__version__)}\] - \d{{4}}-\d\d-\d\d$", text, re.M)


def test_commit_id_in_and_outside_git(tmp_path: Path) -> None:
    script = REPO / "scripts" / "commit-id.sh"
    inside = subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?\n", inside), inside
    copy = tmp_path / "scripts"
    copy.mkdir()
    shutil.copy(script, copy / "commit-id.sh")
    outside = subprocess.run([str(copy / "commit-id.sh")], capture_output=True, text=True,
                             check=True, env={"PATH": "/usr/bin:/bin",
                                              "GIT_CEILING_DIRECTORIES": str(tmp_path)})
    assert outside.stdout == "unknown\n"


def test_version_text_reads_the_recorded_commit(tmp_path: Path) -> None:
    recorded = Path(cliargs.__file__).with_name(cliargs.COMMIT_FILE)
    want = recorded.read_text().strip() if recorded.exists() else "unknown"
    assert cliargs.version_text() == f"rdma-cni {__version__} (commit {want})"
