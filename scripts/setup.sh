#!/bin/sh
# Set up a fresh Debian 12 machine (as root) for building and testing rdma-cni:
# system packages, then a virtualenv in .venv (with system site packages, so
# Debian's python3-pyverbs is visible) holding the project and its dev tools.
set -eu
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
PKGS="python3 python3-venv python3-pip python3-dev gcc libc6-dev iproute2 procps kmod
      containernetworking-plugins rdma-core ibverbs-utils python3-pyverbs containerd runc"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv --system-site-packages .venv
fi
stamp=.venv/.rdma-cni-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "setup: installing Python dependencies into .venv"
    .venv/bin/pip install -q --upgrade pip >/dev/null
    .venv/bin/pip install -q -e '.[dev]'
    touch "$stamp"
fi
echo "setup: ready (.venv)"
