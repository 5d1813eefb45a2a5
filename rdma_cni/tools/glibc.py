"""The glibc a bundle needs and the glibc a host has, from ELF symbol versions.

The one-dir bundle is copied to the host and exec'd by the host's runtime, so the
host's libc must define every ``GLIBC_x.y`` version the bundle's executable and
libraries ask for (``.gnu.version_r``, what the dynamic loader checks). The host's
libc (found under the host root the installer writes to) defines its versions in
``.gnu.version_d``. Both are read with pyelftools; nothing is executed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from rdma_cni.errors import ConfigError

Version = tuple[int, ...]
_NAME = re.compile(r"^GLIBC_(\d+(?:\.\d+)+)$")
#: where distributions keep libc.so.6, relative to the root
LIBC_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu",
             "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib")


def parse(name: str) -> Version | None:
    """``GLIBC_2.34`` -> (2, 34); None for anything else (``GLIBC_PRIVATE``, other libs)."""
    m = _NAME.match(name)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def show(v: Version) -> str:
    return ".".join(map(str, v))


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _versions(path: str, section: str) -> Iterator[str]:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            sec: Any = ELFFile(f).get_section_by_name(section)
            if sec is None:
                return
            # version_r: (needed file, its versions); version_d: (definition, names)
            for _head, auxes in sec.iter_versions():
                yield from (aux.name for aux in auxes)
    except (ELFError, OSError, ValueError) as e:
        raise ConfigError(f"failed to read the ELF versions of {path}: {e}") from e


def required(bundle: str) -> tuple[Version, str] | None:
    """The newest glibc version any ELF file of ``bundle`` needs, and that file."""
    best: tuple[Version, str] | None = None
    for d, _dirs, files in os.walk(bundle):
        for name in files:
            path = os.path.join(d, name)
            if os.path.islink(path) or not _is_elf(path):
                continue
            for v in filter(None, map(parse, _versions(path, ".gnu.version_r"))):
                if best is None or v > best[0]:
                    best = (v, os.path.relpath(path, bundle))
    return best


def _resolve(root: str, rel: str) -> str | None:
    """``rel`` under ``root``, following symlinks as if ``root`` were /."""
    path = os.path.join(root, rel)
    for _ in range(16):
        if not os.path.islink(path):
            return path if os.path.isfile(path) else None
        target = os.readlink(path)
        if target.startswith("/"):
            path = os.path.join(root, target.lstrip("/"))
        else:
            path = os.path.join(os.path.dirname(path), target)
    return None


def host_libc(root: str) -> str | None:
    for d in LIBC_DIRS:
        path = _resolve(root, f"{d}/libc.so.6")
        if path and _is_elf(path):
            return path
    return None


def provided(libc: str) -> Version | None:
    """The newest ``GLIBC_x.y`` version ``libc`` defines."""
    return max(filter(None, map(parse, _versions(libc, ".gnu.version_d"))), default=None)


def check(bundle: str, host_root: str) -> str:
    """A one-line verdict; ConfigError naming both versions when the host's is too old.
    No libc under ``host_root`` (a musl or unusual host) is reported, not refused."""
    need = required(bundle)
    if need is None:
        return f"{bundle} needs no particular glibc version"
    libc = host_libc(host_root)
    if libc is None:
        return (f"no libc.so.6 under {host_root}: cannot check the host's glibc "
                f"(the bundle needs glibc {show(need[0])} or newer)")
    have = provided(libc)
    if have is None or have < need[0]:
        have_s = show(have) if have else "unknown"
        raise ConfigError(f"refusing to install: the host's glibc {have_s} ({libc}) is older "
                          f"than glibc {show(need[0])}, which the bundle needs ({need[1]}); "
                          "use a build made on an older distribution")
    return f"host glibc {show(have)} ({libc}) >= {show(need[0])} needed by the bundle"
