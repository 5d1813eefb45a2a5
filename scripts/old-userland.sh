#!/bin/sh
# An older userland for tests/integration/test_host_tree.py: Debian 11 (bullseye, glibc
# 2.31, older than the 2.36 the host plugin is built with), debootstrap'd (minbase) into
# .work/roots/bullseye once (about 30 s, 215 MB) and reused. The installed host plugin
# must run in it through chroot. Needs root and debootstrap (scripts/setup.sh).
set -eu
cd "$(dirname "$0")/.."
root=.work/roots/bullseye
if [ -f "$root/.complete" ]; then echo "old-userland: $root ready"; exit 0; fi
mirror=${RDMA_CNI_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p .work/roots
rm -rf "$root.tmp"
echo "old-userland: debootstrap --variant=minbase bullseye (once; cached in $root)"
debootstrap --variant=minbase bullseye "$root.tmp" "$mirror" >.work/roots/bullseye.log 2>&1 || {
    tail -20 .work/roots/bullseye.log >&2
    echo "old-userland: debootstrap failed (.work/roots/bullseye.log)" >&2
    rm -rf "$root.tmp"; exit 1; }
rm -rf "$root.tmp/var/cache/apt/"* "$root.tmp/var/lib/apt/lists/"*
rm -rf "$root"
mv "$root.tmp" "$root"
touch "$root/.complete"
echo "old-userland: $root ready"
