#!/bin/sh
# Set up a fresh Debian 12 machine (as root) for building and testing rdma-cni:
# system packages (podman, buildah, catatonit, debootstrap and openssl: the node image
# and the node test), then a virtualenv in .venv (with system site packages, so
# Debian's python3-pyverbs is visible) holding the project and its dev tools, and
# checkov (the manifest security lint) in its own venv .venv/checkov, because its
# pins (packaging, python-dateutil) clash with the project's.
# The VM tier's packages and kernel come from ./scripts/vm-prepare.sh (test.sh runs it).
set -eu
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
PKGS="python3 python3-venv python3-pip python3-dev gcc libc6-dev iproute2 procps kmod
      containernetworking-plugins rdma-core ibverbs-utils python3-pyverbs containerd runc
      podman buildah catatonit debootstrap openssl strace util-linux curl
      golang-go golang-github-appc-cni-dev musl-tools"
# musl-tools: musl-gcc, which builds the static front (scripts/build.sh)
# strace: the security tests widen serve's socket window with a delayed listen(2);
# util-linux: unshare, setpriv and prlimit (serve in a private mount namespace, a
# client of another user, a descriptor limit)
# golang-go + golang-github-appc-cni-dev (libcni's sources): the cnitool the docs'
# cnitool section is tested with (Debian does not package cnitool itself)
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    apt-get -o DPkg::Lock::Timeout=900 update -qq
    # shellcheck disable=SC2086
    apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends $missing >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    /usr/bin/python3 -m venv --system-site-packages .venv
fi
stamp=.venv/.rdma-cni-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements/bundle.txt -nt "$stamp" ]; then
    echo "setup: installing Python dependencies into .venv"
    .venv/bin/pip install -q --upgrade pip >/dev/null
    # What the bundles are built from: exactly the locked versions, each checked against
    # its hashes (requirements/bundle.txt, pip-compile --generate-hashes; README "Packaging").
    .venv/bin/pip install -q --require-hashes -r requirements/bundle.txt
    # The project and its dev tools, which may not move a locked version.
    grep -E '^[A-Za-z0-9_.-]+==' requirements/bundle.txt | sed 's/ *\\$//' > .venv/locked.txt
    .venv/bin/pip install -q -c .venv/locked.txt -e '.[dev]'
    touch "$stamp"
fi
# promtool (tests/unit/test_alert_rules.py checks the alert rules with it), taken out
# of Debian's prometheus package into .venv/tools/bin; installing the package would
# start a Prometheus server on the machine. test.sh puts .venv/tools/bin on PATH.
if [ ! -x .venv/tools/bin/promtool ]; then
    echo "setup: unpacking promtool from Debian's prometheus package into .venv/tools/bin"
    d=$(mktemp -d)
    (cd "$d" && apt-get download -q prometheus >/dev/null 2>&1) \
        || { apt-get -o DPkg::Lock::Timeout=900 update -qq; (cd "$d" && apt-get download -q prometheus >/dev/null 2>&1); }
    dpkg-deb -x "$d"/prometheus_*.deb "$d/x"
    mkdir -p .venv/tools/bin
    cp "$d/x/usr/bin/promtool" .venv/tools/bin/promtool
    rm -rf "$d"
fi
# kubectl (kustomize v5 inside) renders the manifests (scripts/check-manifests.sh, the node
# tier); Debian 12 packages none recent enough, so Debian 13's is unpacked from the
# mirror's pool (statically linked Go, libc6 >= 2.34) into .venv/tools/bin, its SHA-256
# checked; nothing is installed system-wide.
KUBECTL_DEB=pool/main/k/kubernetes/kubectl_1.32.3+ds-2_amd64.deb
KUBECTL_SHA256=9825aaf4c14913027aae04af8688e580459f781c829bd5de00cc4dc2cc5a867f
if ! .venv/tools/bin/kubectl version --client 2>/dev/null | grep -q "Kustomize Version: v[5-9]"; then
    echo "setup: unpacking Debian 13's kubectl (kustomize v5) into .venv/tools/bin"
    d=$(mktemp -d)
    curl -fsS --retry 3 -o "$d/kubectl.deb" "${RDMA_CNI_DEBIAN_MIRROR:-http://deb.debian.org/debian}/$KUBECTL_DEB"
    echo "$KUBECTL_SHA256  $d/kubectl.deb" | sha256sum -c --quiet
    dpkg-deb -x "$d/kubectl.deb" "$d/x"
    mkdir -p .venv/tools/bin
    cp "$d/x/usr/bin/kubectl" .venv/tools/bin/kubectl
    rm -rf "$d"
fi
CHECKOV_SPEC='checkov>=3.2,<4'
if [ ! -x .venv/checkov/bin/checkov ]; then
    echo "setup: installing $CHECKOV_SPEC into .venv/checkov"
    /usr/bin/python3 -m venv .venv/checkov
    .venv/checkov/bin/pip install -q "$CHECKOV_SPEC"
fi
echo "setup: ready (.venv)"
