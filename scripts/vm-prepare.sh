#!/bin/sh
# Prepare the VM test tier (tests/vm): host packages, the guest kernel unpacked under
# .work/vm/, and a minimal udev rules folder for the guest.
# Idempotent and cached: a second run does nothing and says so.
#
# The kernel: by default trixie-backports' 7.3.4 (its rxe has per-network-namespace
# sockets, so pods in their own netns exchange RDMA; Debian 12's 6.1 rxe routes and
# listens in the initial netns only). Its three packages come from the Debian mirror's
# pool (linux-binary, linux-modules, linux-base of one version), checked against the
# SHA-256 sums below; the modules are decompressed (virtme-ng's initramfs takes plain
# or .zst modules, not .xz) and depmod'ed. Stamp: .work/vm/kernel-<release>.
#
# Environment:
#   RDMA_CNI_VM_DIR      work folder        (default: <repo>/.work/vm)
#   RDMA_CNI_VM_KERNEL   `bookworm`: Debian 12's current kernel (what linux-image-amd64
#                        depends on), or a linux-image-6.1.* package name; stamp
#                        .work/vm/kernel (default: unset, the 7.3.4 kernel)
#   RDMA_CNI_DEBIAN_MIRROR  (default: http://deb.debian.org/debian)
set -eu

REPO=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
WORK=${RDMA_CNI_VM_DIR:-$REPO/.work/vm}
# file: virtme-ng runs `file` on the kernel image and on busybox
APT_PKGS="qemu-system-x86 kmod udev busybox-static file iproute2 rdma-core ibverbs-providers ibverbs-utils python3-pyverbs curl xz-utils"
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

# trixie-backports' kernel: release, Debian version, and the pool files with their sums
NEXT_RELEASE=7.3.4+deb13-amd64
NEXT_VERSION=7.3.4-1~bpo13+1
NEXT_DEBS="linux-signed-amd64/linux-binary:7e3248d03a84dcdda88c567aa8c4038f2e7795d2dd167b112c56f8901b6f513f
linux/linux-modules:b3ea01922c9f133767a83cf6891c19b3693858ded617bf22d1e34f95382c08ea
linux/linux-base:5663505495b5c90be94af42105c7b28629802516779102dac48d5a00cc00fccf"
MIRROR=${RDMA_CNI_DEBIAN_MIRROR:-http://deb.debian.org/debian}

fetch_next() {
    stamp=$WORK/kernel-$NEXT_RELEASE
    if [ -s "$stamp" ] && [ -f "$(cat "$stamp")" ]; then
        say "kernel cached: $(cat "$stamp")"
        return
    fi
    root=$WORK/root-$NEXT_RELEASE
    debs=$WORK/deb-$NEXT_RELEASE
    rm -rf "$debs" "$root"
    mkdir -p "$debs" "$root"
    for entry in $NEXT_DEBS; do
        src=${entry%%:*}; sum=${entry#*:}
        file="${src#*/}-${NEXT_RELEASE}_${NEXT_VERSION}_amd64.deb"
        url="$MIRROR/pool/main/l/${src%%/*}/$(printf %s "$file" | sed 's/+/%2b/g; s/~/%7e/g')"
        say "downloading $file"
        curl -fsS --retry 3 -o "$debs/$file" "$url" || die "cannot download $url"
        echo "$sum  $debs/$file" | sha256sum -c --quiet - || die "$file: SHA-256 mismatch"
        dpkg -x "$debs/$file" "$root"
    done
    rm -rf "$debs"
    mods=$root/usr/lib/modules/$NEXT_RELEASE
    [ -f "$mods/vmlinuz" ] || die "no vmlinuz in $mods"
    find "$mods" -name '*.ko.xz' -print0 | xargs -0 -r -n 200 xz -d
    depmod -a -b "$root/usr" "$NEXT_RELEASE" || die "depmod for $NEXT_RELEASE failed"
    echo "$mods/vmlinuz" > "$stamp"
    say "kernel $NEXT_RELEASE unpacked into $root"
}

kernel_pkg() {
    if [ "${RDMA_CNI_VM_KERNEL:-}" = bookworm ]; then
        :
    elif [ -n "${RDMA_CNI_VM_KERNEL:-}" ]; then
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
WORK=$(cd "$WORK" && pwd -P)  # stamps name real paths (.work/vm may be a link)
install_pkgs
if [ -n "${RDMA_CNI_VM_KERNEL:-}" ]; then
    unpack_kernel
    stamp=$WORK/kernel
else
    fetch_next
    stamp=$WORK/kernel-$NEXT_RELEASE
fi
udev_rules
say "ready: $(cat "$stamp")"
