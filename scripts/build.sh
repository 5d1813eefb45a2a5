#!/bin/sh
# Build, from one recipe (build.spec):
#   dist/rdma-cni/        the image's one-dir bundle, every subcommand (binary: dist/rdma-cni/rdma-cni)
#   dist/rdma-cni-host/   the host's CNI-only plugin: the static front rdma-cni-front, the bundle
#                         rdma-cni, and in _internal/ the C library and loader it was built with
#                         (scripts/host_tree.py), which `rdma-cni install` lays out as
#                         /opt/cni/bin/rdma-cni.versions/<version>-<digest>/ and links /opt/cni/bin/rdma-cni to
# Skipped when nothing it is built from changed since the last build.
set -eu
cd "$(dirname "$0")/.."
# The commit `rdma-cni --version` reports (rdma_cni/cliargs.py): rewritten only when it
# changes, so a new commit alone rebuilds the bundle; "unknown" outside a git checkout.
commit=$(./scripts/commit-id.sh .)
[ "$(cat rdma_cni/BUILD_COMMIT 2>/dev/null)" = "$commit" ] || echo "$commit" > rdma_cni/BUILD_COMMIT
stamp=dist/.built
if [ -f "$stamp" ] && [ -x dist/rdma-cni/rdma-cni ] && [ -x dist/rdma-cni-host/rdma-cni-front ] && \
   [ -z "$(find rdma_cni front build.spec scripts/nccl_env.sh scripts/host_tree.py \
           scripts/bundle_versions.py pyproject.toml requirements/bundle.txt \
           -newer "$stamp" 2>/dev/null | head -1)" ]; then
    echo "build: dist/rdma-cni and dist/rdma-cni-host are up to date"; exit 0
fi
rm -f "$stamp"
# PYTHONPATH: the spec's collect_submodules/collect_data_files import rdma_cni in a
# subprocess; this tree's, not whatever checkout the venv's editable install points at
PYTHONPATH="$PWD" .venv/bin/pyinstaller --noconfirm --log-level WARN build.spec >/dev/null \
    2>.build.log || { cat .build.log >&2; exit 1; }
rm -f .build.log
# the front against musl, static: no glibc start-up (CPUID probes) in every CNI call
command -v musl-gcc >/dev/null || { echo "build: musl-gcc is missing (./scripts/setup.sh installs musl-tools)" >&2; exit 1; }
musl-gcc -O2 -Wall -Wextra -Werror -static -s -o dist/rdma-cni-front front/rdma-cni-front.c
.venv/bin/python scripts/host_tree.py dist/rdma-cni-host --front dist/rdma-cni-front
rm -f dist/rdma-cni-front
.venv/bin/python scripts/bundle_versions.py dist/rdma-cni dist/rdma-cni-host
touch "$stamp"
echo "build: dist/rdma-cni/rdma-cni, dist/rdma-cni-host/rdma-cni-front"
