"""Tiny ELF files with chosen glibc symbol versions, built with gcc: a stand-in host
libc that defines ``GLIBC_2.2.5 .. GLIBC_<version>`` and a library needing one."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _gcc(out: Path, *args: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-nostdlib", "-o", str(out), *args],
                   check=True, capture_output=True, timeout=60)
    return out


def make_libc(out: Path, version: str) -> Path:
    """``out`` (a libc.so.6) defining GLIBC_2.2.5 and GLIBC_<version>."""
    src, script = out.parent / "fake_libc.c", out.parent / "fake_libc.map"
    out.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("int glibc_old(void) { return 1; }\nint glibc_new(void) { return 2; }\n")
    script.write_text("GLIBC_2.2.5 { global: glibc_old; local: *; };\n"
                      f"GLIBC_{version} {{ global: glibc_new; }} GLIBC_2.2.5;\n")
    _gcc(out, f"-Wl,--version-script={script}", "-Wl,-soname,libc.so.6", str(src))
    src.unlink()
    script.unlink()
    return out


def make_needing(out: Path, version: str, work: Path) -> Path:
    """``out``, a library that needs GLIBC_<version> (linked against a fake libc)."""
    make_libc(work / "libc.so.6", version)
    src = work / "need.c"
    src.write_text("extern int glibc_new(void);\nint use(void) { return glibc_new(); }\n")
    return _gcc(out, str(src), f"-L{work}", "-l:libc.so.6")
