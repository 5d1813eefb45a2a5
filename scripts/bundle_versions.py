"""Record in a built bundle what it was built from: every Python distribution whose
modules it carries, with its version, the Python and the C library of the build.
Written as ``_internal/rdma_cni/BUILD_VERSIONS`` (JSON) of each bundle given;
``rdma-cni --version --verbose`` prints it (rdma_cni/cliargs.py).

    .venv/bin/python scripts/bundle_versions.py dist/rdma-cni dist/rdma-cni-host
"""

from __future__ import annotations

import glob
import importlib.metadata
import json
import os
import platform
import re
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
            "packages": dict(sorted(packages.items()))}


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
