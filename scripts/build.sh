#!/bin/sh
# Build the one-dir PyInstaller bundle dist/rdma-cni/ (binary: dist/rdma-cni/rdma-cni).
set -eu
cd "$(dirname "$0")/.."
if [ -x dist/rdma-cni/rdma-cni ] && [ -z "$(find rdma_cni build.spec scripts/nccl_env.sh -newer dist/rdma-cni/rdma-cni 2>/dev/null | head -1)" ]; then
    echo "build: dist/rdma-cni is up to date"; exit 0
fi
.venv/bin/pyinstaller --noconfirm --log-level WARN build.spec >/dev/null
echo "build: dist/rdma-cni/rdma-cni"
