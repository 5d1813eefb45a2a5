"""Record in a built bundle what it was built from: every Python distribution whose
modules it carries, with its version, the Python and the C library of the build, and
the Debian packages its other files come from (the shared libraries, and Python
modules Debian ships without a distribution record, as ``python3-pyverbs``), with
their versions as dpkg has them.
Written as ``_internal/rdma_cni/BUILD_VERSIONS`` (JSON) of each bundle given;
``rdma-cni --version --verbose`` prints it (rdma_cni/cliargs.py).

    .venv/bin/python scripts/bundle_versions.py dist/rdma-cni dist/rdma-cni-host
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys

NAME = "BUILD_VERSIONS"


def carried(internal: str, top: str) -> bool:
    """Whether the bundle's ``_internal/`` holds the top-level module ``top``."""
    return (os.path.isdir(os.path.join(internal, top)) or
            os.path.exists(os.path.join(internal, f"{top}.pyc")) or
            bool(glob.glob(os.path.join(internal, f"{top}.*.so"))))


def versions(bundle: str) -> dict[str, object]:
    internal = os.path.join(bundle, "_internal")
    packages: dict[str, str] = {}
    for top, dists in importlib.metadata.packages_distributions().items():
        if (top.startswith("_") and top != "_cffi_backend") or not carried(internal, top):
            continue
        for dist in dists:
            packages[re.sub(r"[-_.]+", "-", dist).lower()] = importlib.metadata.version(dist)
    libc = os.confstr("CS_GNU_LIBC_VERSION") or "unknown"
    carries_libc = os.path.exists(os.path.join(internal, "libc.so.6"))
    return {"python": platform.python_version(),
            "c_library": f"{libc} ({'in the bundle' if carries_libc else 'the host'})",
            "packages": dict(sorted(packages.items())),
            "debian": debian_packages(sources(internal))}


LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib", "/lib")


def sources(internal: str) -> list[str]:
    """Where the build took the bundle's files no Python distribution records: each
    shared library at the top of ``_internal/``, each module dir no distribution owns."""
    owned = set(importlib.metadata.packages_distributions())
    out = []
    for name in sorted(os.listdir(internal)):
        if re.match(r"lib.*\.so(\.|$)", name):
            # every name it has: with /lib merged into /usr/lib, dpkg knows one of them
            out += [os.path.join(d, name) for d in LIB_DIRS
                    if os.path.exists(os.path.join(d, name))]
        elif os.path.isdir(os.path.join(internal, name)) and name not in owned \
                and name.isidentifier():
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.submodule_search_locations:
                out.append(next(iter(spec.submodule_search_locations)))
    return out


def debian_packages(paths: list[str]) -> dict[str, str]:
    """Debian package -> version for the packages ``paths`` come from (dpkg's record);
    empty where dpkg is not."""
    if not paths or shutil.which("dpkg-query") is None:
        return {}
    found = subprocess.run(["dpkg-query", "-S", *paths], capture_output=True, text=True,
                           timeout=120).stdout
    names = sorted({line.split(":", 1)[0] for line in found.splitlines() if ": " in line
                    and "," not in line.split(": ", 1)[0]})
    if not names:
        return {}
    listed = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\n", *names],
                            capture_output=True, text=True, timeout=120).stdout
    return dict(sorted(line.split(" ", 1) for line in listed.splitlines() if " " in line))


def main(argv: list[str]) -> int:
    for bundle in argv:
        out = os.path.join(bundle, "_internal", "rdma_cni", NAME)
        with open(out + ".tmp", "w", encoding="utf-8") as f:
            json.dump(versions(bundle), f, indent=1)
            f.write("\n")
        os.replace(out + ".tmp", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
