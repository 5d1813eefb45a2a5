#!/bin/sh
# Prepare the VM test tier (tests/vm): host packages, Debian 12's generic
# kernel (it has ipvlan, macvlan, dummy, rdma_rxe as modules) unpacked under
# .work/vm/, and a minimal udev rules folder for the guest.
# Idempotent and cached: a second run does nothing and says so.
#
# Environment:
#   RDMA_CNI_VM_DIR      work folder        (default: <repo>/.work/vm)
#   RDMA_CNI_VM_KERNEL   kernel package     (default: what linux-image-amd64 depends on)
set -eu

REPO=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
WORK=${RDMA_CNI_VM_DIR:-$REPO/.work/vm}
# file: virtme-ng runs `file` on the kernel image and on busybox
APT_PKGS="qemu-system-x86 kmod udev busybox-static file iproute2 rdma-core ibverbs-providers ibverbs-utils"
APT="apt-get -o DPkg::Lock::Timeout=900"
export DEBIAN_FRONTEND=noninteractive

say() { printf 'vm-prepare: %s\n' "$*"; }
die() { printf 'vm-prepare: error: %s\n' "$*" >&2; exit 1; }

missing_pkgs() {
    for p in $APT_PKGS; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' \
            || printf '%s ' "$p"
    done
}

install_pkgs() {
    miss=$(missing_pkgs)
    if [ -z "$miss" ]; then
        say "apt packages present"
        return
    fi
    say "installing: $miss"
    # shellcheck disable=SC2086
    if ! $APT install -y -q --no-install-recommends $miss >/dev/null 2>&1; then
        $APT update -q >/dev/null 2>&1 || die "apt-get update failed"
        # shellcheck disable=SC2086
        $APT install -y -q --no-install-recommends $miss >/dev/null \
            || die "apt-get install $miss failed"
    fi
}

kernel_pkg() {
    if [ -n "${RDMA_CNI_VM_KERNEL:-}" ]; then
        echo "$RDMA_CNI_VM_KERNEL"; return
    fi
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null \
          | sed -n 's/^ *Depends: \(linux-image-6\.1\.[^ ]*-amd64\)$/\1/p' | head -n1)
    if [ -z "$pkg" ]; then
        $APT update -q >/dev/null 2>&1 || die "apt-get update failed"
        pkg=$(apt-cache depends linux-image-amd64 2>/dev/null \
              | sed -n 's/^ *Depends: \(linux-image-6\.1\.[^ ]*-amd64\)$/\1/p' | head -n1)
    fi
    [ -n "$pkg" ] || die "cannot find the Debian 12 linux-image-6.1.*-amd64 package"
    echo "$pkg"
}

unpack_kernel() {
    if [ -s "$WORK/kernel" ] && [ -f "$(cat "$WORK/kernel")" ]; then
        say "kernel cached: $(cat "$WORK/kernel")"
        return
    fi
    pkg=$(kernel_pkg)
    kver=${pkg#linux-image-}
    kver=${kver%-unsigned}
    root=$WORK/root
    say "downloading $pkg"
    mkdir -p "$WORK/deb"
    # apt warns on stderr when _apt cannot write here: keep it for errors only.
    if ! (cd "$WORK/deb" && rm -f ./*.deb && apt-get download -q "$pkg" >/dev/null 2>log); then
        cat "$WORK/deb/log" >&2
        die "apt-get download $pkg failed"
    fi
    rm -rf "$root"
    mkdir -p "$root"
    dpkg -x "$WORK"/deb/*.deb "$root"
    rm -f "$WORK"/deb/*.deb
    [ -d "$root/lib/modules/$kver" ] || die "no $root/lib/modules/$kver after unpacking"
    depmod -a -b "$root" "$kver" || die "depmod for $kver failed"
    [ -f "$root/boot/vmlinuz-$kver" ] || die "no vmlinuz-$kver in $pkg"
    echo "$root/boot/vmlinuz-$kver" > "$WORK/kernel"
    say "kernel $kver unpacked into $root"
}

udev_rules() {
    rules=$WORK/udev-rules
    mkdir -p "$rules"
    # Only the rule virtme-ng's init waits for (/dev/virtio-ports/virtme.*);
    # the full set costs seconds and rewrites MACs of new veth/macvlan devices.
    printf '%s\n' 'SUBSYSTEM=="virtio-ports", KERNEL=="vport*", ATTR{name}=="?*", SYMLINK+="virtio-ports/$attr{name}"' \
        > "$rules/50-virtme-ports.rules"
}

[ "$(id -u)" = 0 ] || die "needs root (apt-get, depmod)"
mkdir -p "$WORK"
install_pkgs
unpack_kernel
udev_rules
say "ready: $(cat "$WORK/kernel")"
