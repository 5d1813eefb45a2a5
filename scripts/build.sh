#!/bin/sh
# Build the one-dir PyInstaller bundle dist/rdma-cni/ (binary: dist/rdma-cni/rdma-cni)
# and the native front dist/rdma-cni/rdma-cni-front (static, libc only), which
# `rdma-cni install` links as /opt/cni/bin/rdma-cni.
# Skipped when nothing it is built from changed since the last build.
set -eu
cd "$(dirname "$0")/.."
# The commit `rdma-cni --version` reports (rdma_cni/cliargs.py): rewritten only when it
# changes, so a new commit alone rebuilds the bundle; "unknown" outside a git checkout.
commit=$(./scripts/commit-id.sh .)
[ "$(cat rdma_cni/BUILD_COMMIT 2>/dev/null)" = "$commit" ] || echo "$commit" > rdma_cni/BUILD_COMMIT
stamp=dist/rdma-cni/.built
if [ -f "$stamp" ] && [ -x dist/rdma-cni/rdma-cni ] && \
   [ -z "$(find rdma_cni front build.spec scripts/nccl_env.sh pyproject.toml -newer "$stamp" 2>/dev/null | head -1)" ]; then
    echo "build: dist/rdma-cni is up to date"; exit 0
fi
.venv/bin/pyinstaller --noconfirm --log-level WARN build.spec >/dev/null 2>.build.log || { cat .build.log >&2; exit 1; }
rm -f .build.log
gcc -O2 -Wall -Wextra -Werror -static -s -o dist/rdma-cni/rdma-cni-front front/rdma-cni-front.c
touch "$stamp"
echo "build: dist/rdma-cni/rdma-cni"
