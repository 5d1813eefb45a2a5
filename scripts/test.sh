#!/bin/sh
# The whole test suite, from a fresh Debian 12 machine (as root): setup (and the VM
# tier's packages and kernel), a check of every prerequisite (one line each; stops
# here when one is missing), lint, type check, manifest checks, unit and native
# integration tests, then the VM tier (ipvlan, dummy, Soft-RoCE in a Debian kernel
# under qemu). RDMA_CNI_SKIP_VM=1 leaves the VM tier out.
set -eu
cd "$(dirname "$0")/.."
./scripts/setup.sh
export PATH="$PWD/.venv/tools/bin:$PATH"   # promtool (setup.sh)
if [ "${RDMA_CNI_SKIP_VM:-0}" != 1 ]; then ./scripts/vm-prepare.sh; fi
./scripts/old-userland.sh   # a Debian 11 root: the host plugin must run in it
echo "== prerequisites"; ./scripts/check-prereqs.sh
echo "== ruff"; .venv/bin/ruff check rdma_cni tests bench scripts
echo "== mypy"; .venv/bin/mypy rdma_cni
echo "== manifests (kubernetes-validate, checkov)"; ./scripts/check-manifests.sh
echo "== build"; ./scripts/build.sh
echo "== pytest (unit, native integration, containerd end to end, hardening)"
# the full-size load test (64 pods x 10 rounds on each path, in-process and through
# serve: 405 s in the run docs/reliability.md records) is part of CI
export RDMA_CNI_SLOW="${RDMA_CNI_SLOW:-1}"
.venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"
if [ -x scripts/vm-run.sh ] && [ "${RDMA_CNI_SKIP_VM:-0}" != 1 ]; then
    echo "== pytest (VM tier)"
    ./scripts/vm-run.sh -q
fi
