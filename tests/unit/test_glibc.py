"""The glibc check of `rdma-cni install`: ELF version needs of a bundle against the
version definitions of the host's libc (tiny ELF files built with gcc)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fakelibc

from fakelibc import make_libc, make_needing

from rdma_cni.errors import ConfigError
from rdma_cni.tools import glibc, install

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Built once: a bundle needing GLIBC_2.34, hosts whose libc has 2.36, 2.17, 2.28."""
    tmp = tmp_path_factory.mktemp("glibc")
    bundle = tmp / "bundle"
    exe = bundle / "rdma-cni"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    make_needing(bundle / "_internal" / "libneed.so", "2.34", tmp / "work")
    (bundle / "_internal" / "data.txt").write_text("not an ELF file")
    return {"bundle": bundle, "new": _host(tmp / "new", "2.36"), "old": _host(tmp / "old", "2.17"),
            "lib64": _host(tmp / "lib64", "2.28", "lib64")}


def _host(root: Path, version: str, libdir: str = "usr/lib/x86_64-linux-gnu") -> Path:
    make_libc(root / libdir / "libc-real.so", version)
    (root / libdir / "libc.so.6").symlink_to("libc-real.so")
    return root


def test_parse_and_show() -> None:
    assert glibc.parse("GLIBC_2.34") == (2, 34) and glibc.parse("GLIBC_2.2.5") == (2, 2, 5)
    assert glibc.parse("GLIBC_PRIVATE") is None and glibc.parse("GCC_3.0") is None
    assert glibc.show((2, 2, 5)) == "2.2.5"


def test_required_is_the_newest_need_and_names_the_file(made: dict[str, Path]) -> None:
    assert glibc.required(str(made["bundle"])) == ((2, 34), "_internal/libneed.so")


def test_host_libc_found_through_symlinks_under_the_root(made: dict[str, Path]) -> None:
    root = made["lib64"]
    (root / "lib").mkdir()
    (root / "lib" / "libc.so.6").symlink_to("/lib64/libc.so.6")  # absolute: under root
    libc = glibc.host_libc(str(root))
    assert libc is not None and glibc.provided(libc) == (2, 28)


def test_check_passes_a_new_enough_host(made: dict[str, Path]) -> None:
    msg = glibc.check(str(made["bundle"]), str(made["new"]))
    assert msg.startswith("host glibc 2.36 (") and msg.endswith(">= 2.34 needed by the bundle")


def test_check_refuses_an_older_host_naming_both_versions(made: dict[str, Path]) -> None:
    with pytest.raises(ConfigError) as err:
        glibc.check(str(made["bundle"]), str(made["old"]))
    assert "glibc 2.17" in err.value.msg and "glibc 2.34" in err.value.msg
    assert "_internal/libneed.so" in err.value.msg and "\n" not in err.value.msg


def test_no_libc_under_the_root_is_reported_not_refused(made: dict[str, Path],
                                                       tmp_path: Path) -> None:
    msg = glibc.check(str(made["bundle"]), str(tmp_path / "empty"))
    assert "cannot check" in msg and "2.34" in msg


def test_install_refuses_and_leaves_nothing(made: dict[str, Path], tmp_path: Path,
                                            capsys: Any) -> None:
    bundle, root = made["bundle"], made["old"]
    conf = tmp_path / "net.d"
    conf.mkdir()
    before = json.dumps({"cniVersion": "0.4.0", "name": "p", "plugins": [{"type": "bridge"}]})
    (conf / "10-p.conflist").write_text(before)
    bin_dir = root / "opt" / "cni" / "bin"
    rc = install.main(["--bundle", str(bundle), "--cni-bin-dir", str(bin_dir),
                       "--cni-conf-dir", str(conf), "--mode", "shared"], lambda: None)
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1, err
    assert "glibc 2.17" in err and "glibc 2.34" in err  # host root derived from bin dir
    assert not bin_dir.exists() and (conf / "10-p.conflist").read_text() == before
