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


def test_the_version_lives_in_one_place() -> None:
    """rdma_cni/__init__.py has it; the package reads it from there, the image recipe and
    scripts take it from there, the manifests' image tag is checked equal to it
    (tests/unit/test_manifests.py, tests/unit/test_verify_manifest.py); no other file
    states it."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and pyproject["project"]["dynamic"] == [
        "version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "rdma_cni.__version__"}
    assert re.fullmatch(r'__version__ = "\d+\.\d+\.\d+"\n',
                        (REPO / "rdma_cni/__init__.py").read_text())
    copies = {"rdma_cni/__init__.py", "conf/k8s/base/kustomization.yaml", "CHANGELOG.md",
              "conf/rdma-cni-verify.yaml"}
    stated = sorted(str(p.relative_to(REPO)) for p in _project_files()
                    if re.search(rf"(?<![\d.]){re.escape(__version__)}(?![\d.])",
                                 p.read_text(errors="replace")))
    assert set(stated) <= copies, stated
    containerfile = (REPO / "Containerfile").read_text()
    assert "org.opencontainers.image.version=${VERSION}" in containerfile
    assert "rdma_cni/__init__.py" in (REPO / "scripts/image.sh").read_text()


def _project_files() -> list[Path]:
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True,
                             text=True, check=True).stdout.split()
    skip = ("bench/results/", "tests/")  # tests name CNI spec versions such as 0.2.0
    return [REPO / f for f in tracked if not f.startswith(skip) and (REPO / f).is_file()]


def _releases(text: str) -> list[tuple[str, str, str]]:
    """(version, date or "Unreleased", body) of each release section, newest first."""
    heads = list(re.finditer(r"^## \[(\d+\.\d+\.\d+)\] - (\S+)$", text, re.M))
    return [(m.group(1), m.group(2), text[m.end():heads[i + 1].start() if i + 1 < len(heads)
                                          else len(text)]) for i, m in enumerate(heads)]


def test_changelog_gives_the_next_version() -> None:
    releases = _releases((REPO / "CHANGELOG.md").read_text())
    (version, when, body), (before, _, _) = releases[0], releases[1]
    assert version == __version__
    assert when == "Unreleased" or re.fullmatch(r"\d{4}-\d\d-\d\d", when)
    new, old = (tuple(map(int, v.split("."))) for v in (version, before))
    assert new > old
    if "### Breaking" in body:  # a broken name takes the next minor (0.x) or major version
        assert new[0] > old[0] if old[0] >= 1 else new[:2] > old[:2], (version, before)


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


def test_one_image_recipe() -> None:
    """scripts/image.sh builds the Containerfile (its prebuilt-bundles mode) instead of a
    layout of its own, and the Containerfile carries both trees whichever way it builds."""
    image_sh = (REPO / "scripts/image.sh").read_text()
    assert re.search(r"buildah bud .*-f Containerfile", image_sh.replace("\\\n", " "))
    assert "BUNDLE=context" in image_sh and "buildah mount" in image_sh  # the base rootfs only
    assert not re.search(r"cp -a dist/", image_sh)
    # every build has a tag of its own beside the version's
    assert 'ref="$name:$version-$commit"' in image_sh
    assert '-t "$ref" -t "$name:$version"' in image_sh
    containerfile = (REPO / "Containerfile").read_text()
    for tree in ("rdma-cni", "rdma-cni-host"):
        assert f"COPY --from=bundle /src/dist/{tree} /opt/{tree}" in containerfile
    assert "./scripts/build.sh" in containerfile  # BUNDLE=build runs the same build


def test_the_prerequisite_check_reads_the_kernel_stamp_vm_prepare_writes(
        tmp_path: Path) -> None:
    """check-prereqs.sh and vm-prepare.sh agree on the VM kernel's stamp: a fresh
    machine that ran vm-prepare.sh must pass the check (CI stopped there once)."""
    release = re.search(r"^NEXT_RELEASE=(\S+)$",
                        (REPO / "scripts/vm-prepare.sh").read_text(), re.M)
    assert release
    vmlinuz = tmp_path / "vmlinuz"
    vmlinuz.write_bytes(b"")
    (tmp_path / f"kernel-{release.group(1)}").write_text(f"{vmlinuz}\n")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "RDMA_CNI_VM_DIR": str(tmp_path)}
    out = subprocess.run([str(REPO / "scripts/check-prereqs.sh")], env=env,
                         capture_output=True, text=True, check=False)
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if " VM kernel " in ln]
    assert lines and all("prereq: ok" in ln for ln in lines), lines


#: a measured or configured quantity: a time, a size or a share (``104 ms``, ``0.24 s``,
#: ``31 MB``, ``15%``)
_FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|us|MB|MiB|KiB|GiB|%)(?!\w)")
#: what can stand behind one: a command or file of the repo, or a recorded run's commit
_SOURCE = re.compile(r"bench/|docs/|tests/|scripts/|rdma_cni/|pytest|\bat [0-9a-f]{7,40}\b")


def _sentences(text: str) -> list[str]:
    """The changelog's sentences: each entry (bullet) joined onto one line, then split."""
    out = []
    for entry in re.split(r"\n(?=- |#)", text):
        out += re.split(r"(?<=\.)\s+(?=[A-Z(`])", " ".join(entry.split()))
    return out


def test_every_changelog_figure_names_where_it_comes_from() -> None:
    """A figure in CHANGELOG.md names, in its sentence, the command, file or code that
    produces it, or the commit of the recorded run; a figure nothing in the repo
    produces is not quoted."""
    bare = [s for s in _sentences((REPO / "CHANGELOG.md").read_text())
            if _FIGURE.search(s) and not _SOURCE.search(s)]
    assert bare == []
