"""Make dist/rdma-cni-host/ a tree that needs nothing from the host's userland.

PyInstaller collects the shared libraries the bundle needs except the C library's own
(libc, libm, libdl, libpthread, librt, the loader): it expects the host to have them, and
a host whose glibc is older than the build's cannot run the bundle. This step copies
them, as this build machine has them, into ``_internal/`` (the loader as
``_internal/ld-linux-x86-64.so.2``), and the front execs the plugin through that loader
with ``--library-path`` set to ``_internal/`` (front/rdma-cni-front.c, ``exec_bundle``).

Then it checks the promise: every ``DT_NEEDED`` of every ELF file in the tree is found
in ``_internal/``, and no file names a loader other than the bundled one's name. Prints
the footprint and what fills it. Exit 1, one line per problem, when the check fails.

    .venv/bin/python scripts/host_tree.py dist/rdma-cni-host [--front FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Iterator

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

LOADER = "ld-linux-x86-64.so.2"
LIB = "_internal"
#: where this build machine's loader finds the C library (Debian's multiarch layout first)
SEARCH = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
          "/lib", "/usr/lib")


def elf_files(root: str) -> Iterator[str]:
    for d, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(d, name)
            if os.path.islink(path):
                continue
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    yield path


def needs(path: str) -> tuple[list[str], str | None]:
    """(DT_NEEDED sonames, PT_INTERP) of one ELF file."""
    with open(path, "rb") as f:
        try:
            elf = ELFFile(f)
        except ELFError:
            return [], None
        interp = None
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_INTERP":
                interp = seg.get_interp_name()
        names: list[str] = []
        for sec in elf.iter_sections():
            if isinstance(sec, DynamicSection):
                names += [t.needed for t in sec.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        return names, interp


def locate(soname: str) -> str | None:
    for d in SEARCH:
        path = os.path.join(d, soname)
        if os.path.exists(path):
            return os.path.realpath(path)
    return None


def complete(tree: str) -> list[str]:
    """Copy every missing library (and the loader) into ``tree/_internal``; the names added."""
    lib = os.path.join(tree, LIB)
    added: list[str] = []
    pending = True
    while pending:
        pending = False
        for path in list(elf_files(tree)):
            sonames, interp = needs(path)
            if interp and not os.path.exists(os.path.join(lib, LOADER)):
                shutil.copy2(os.path.realpath(interp), os.path.join(lib, LOADER))
                added.append(LOADER)
            for soname in sonames:
                if os.path.exists(os.path.join(lib, soname)):
                    continue
                src = locate(soname)
                if src is None:
                    continue  # reported by verify()
                shutil.copy2(src, os.path.join(lib, soname))
                added.append(soname)
                pending = True
    return added


def verify(tree: str) -> list[str]:
    """What would still come from the host: one line per problem."""
    lib = os.path.join(tree, LIB)
    problems = []
    for path in elf_files(tree):
        sonames, interp = needs(path)
        rel = os.path.relpath(path, tree)
        problems += [f"{rel} needs {s}, which is not in {LIB}/" for s in sonames
                     if not os.path.exists(os.path.join(lib, s))]
        if interp and os.path.basename(interp) != LOADER:
            problems.append(f"{rel} names the loader {interp}, not {LOADER}")
    if not os.path.exists(os.path.join(lib, LOADER)):
        problems.append(f"no {LIB}/{LOADER}")
    return problems


def footprint(tree: str) -> tuple[int, int, list[tuple[int, str]]]:
    """(bytes, files, the largest top-level entries of _internal/ with their bytes)."""
    total = files = 0
    parts: dict[str, int] = {}
    for d, _dirs, names in os.walk(tree):
        for name in names:
            path = os.path.join(d, name)
            size = os.lstat(path).st_size
            total += size
            files += 1
            rel = os.path.relpath(path, os.path.join(tree, LIB))
            key = rel.split(os.sep)[0] if not rel.startswith("..") else os.path.relpath(path, tree)
            parts[key] = parts.get(key, 0) + size
    return total, files, sorted(((v, k) for k, v in parts.items()), reverse=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tree")
    p.add_argument("--front", help="the static front to place in the tree")
    args = p.parse_args(argv)
    if args.front:
        shutil.copy2(args.front, os.path.join(args.tree, "rdma-cni-front"))
    added = complete(args.tree)
    problems = verify(args.tree)
    for line in problems:
        sys.stderr.write(f"host_tree: {line}\n")
    if problems:
        return 1
    total, files, parts = footprint(args.tree)
    top = ", ".join(f"{name} {size / 1e6:.1f}" for size, name in parts[:8])
    sys.stdout.write(f"host tree: {total / 1e6:.1f} MB in {files} files (MB: {top}); "
          f"added {' '.join(sorted(set(added))) or 'nothing'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
