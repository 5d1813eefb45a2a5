#!/bin/sh
# Build the rdma-cni node image here from the Containerfile (the one recipe), pulling
# nothing from any container registry: its base is a debootstrap'd (minbase) Debian 12
# root filesystem imported as a local image, and its bundles are the dist/rdma-cni and
# dist/rdma-cni-host ./scripts/build.sh made (BUNDLE=context). Tags the image
#   localhost/rdma-cni:<version>            (the version of rdma_cni/__init__.py)
#   localhost/rdma-cni:<version>-<commit>   (scripts/commit-id.sh: every build its own tag)
# in the local container storage (podman sees it) and writes dist/rdma-cni-image.tar, an
# archive of the image under both tags (docker-archive: `ctr images import` and
# `podman load` take each tag from it; an OCI archive names one image once, and podman
# loads none of two), with dist/rdma-cni-image.tar.ref: "<version>-<commit> reference,
# bundle digest".
#
#   ./scripts/image.sh     (as root)
#
# Cached: the rootfs tarball is kept in .work/image/ and reused; an image whose bundle
# digest label matches the current bundles is not rebuilt. RDMA_CNI_IMAGE_NAME overrides
# the name (default localhost/rdma-cni).
set -eu
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
for tool in buildah podman debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "image: $tool is missing: run ./scripts/setup.sh (apt-get install buildah podman debootstrap)" >&2
        exit 1; }
done
[ $# -eq 0 ] || { echo "image: no arguments (the tags are <version> and <version>-<commit>)" >&2; exit 2; }
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' rdma_cni/__init__.py)
commit=$(./scripts/commit-id.sh .)
name=${RDMA_CNI_IMAGE_NAME:-localhost/rdma-cni}
ref="$name:$version-$commit"
mirror=${RDMA_CNI_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=.work/image
# ibverbs-providers: libibverbs (in the bundle) dlopens the RDMA providers (librxe,
# libmlx5, ...) listed in /etc/libibverbs.d for `rdma-cni verify`
packages=ibverbs-providers
rootfs="$cache/rootfs-bookworm-minbase-verbs.tar"
base=localhost/rdma-cni-base:bookworm-minbase-verbs
archive=dist/rdma-cni-image.tar
rm -f dist/rdma-cni-image.oci.tar dist/rdma-cni-image.oci.tar.ref  # earlier builds' name
mkdir -p "$cache" dist

if [ ! -s "$rootfs" ]; then
    echo "image: debootstrap --variant=minbase --include=$packages bookworm (once; cached in $rootfs)"
    tmp=$(mktemp -d "$cache/rootfs.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    debootstrap --variant=minbase --include="$packages" bookworm "$tmp/root" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
        tail -20 "$cache/debootstrap.log" >&2; echo "image: debootstrap failed ($cache/debootstrap.log)" >&2
        exit 1; }
    # a runtime image: no package caches, lists, docs, man pages or locales
    rm -rf "$tmp/root/var/cache/apt/"* "$tmp/root/var/lib/apt/lists/"* "$tmp/root/usr/share/doc" \
           "$tmp/root/usr/share/man" "$tmp/root/usr/share/info" "$tmp/root/usr/share/locale" \
           "$tmp/root/var/log/"* "$tmp/root/debootstrap"
    tar -C "$tmp/root" --numeric-owner -cf "$tmp/rootfs.tar" .
    mv "$tmp/rootfs.tar" "$rootfs"
    rm -rf "$tmp"
    trap - EXIT
fi
# the base image: the rootfs tarball as an image (its digest names the tarball it came from)
rootfs_sum=$(sha256sum "$rootfs" | cut -c1-64)
if [ "$(podman image inspect --format '{{ index .Labels "io.rdma-cni.rootfs" }}' "$base" 2>/dev/null)" != "$rootfs_sum" ]; then
    ctr=$(buildah from --quiet scratch)
    mnt=$(buildah mount "$ctr")
    tar -C "$mnt" --numeric-owner -xf "$rootfs"
    buildah umount "$ctr" >/dev/null
    buildah config --label "io.rdma-cni.rootfs=$rootfs_sum" "$ctr"
    buildah commit --quiet --rm --format oci "$ctr" "$base" >/dev/null
fi

[ -x dist/rdma-cni/rdma-cni ] && [ -x dist/rdma-cni-host/rdma-cni-front ] || {
    echo "image: dist/rdma-cni or dist/rdma-cni-host is missing: run ./scripts/build.sh" >&2; exit 1; }
digest=$( (cd dist && find rdma-cni rdma-cni-host -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-64)
have=$(podman image inspect --format '{{ index .Labels "io.rdma-cni.bundle-digest" }}' "$ref" 2>/dev/null || true)
if [ "$have" = "$digest" ] && [ -s "$archive" ] && [ "$(cat "$archive.ref" 2>/dev/null)" = "$ref $digest" ]; then
    echo "image: $ref is up to date ($archive)"; exit 0
fi

old=$(podman image inspect --format '{{.Id}}' "$name:$version" 2>/dev/null || true)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
buildah bud --isolation chroot --layers=false -f Containerfile \
    --build-arg "DEBIAN=$base" --build-arg BUNDLE=context --build-arg "VERSION=$version" \
    --label "io.rdma-cni.bundle-digest=$digest" --label "io.rdma-cni.commit=$commit" \
    -t "$ref" -t "$name:$version" . >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
new=$(podman image inspect --format '{{.Id}}' "$ref")
# the intermediate stage this build committed (the bundles of the context, untagged) and
# the working container buildah 1.28 leaves on it for the `FROM ${BUNDLE} AS bundle` alias
for id in $(sed -n 's/^--> \([0-9a-f]\{8,\}\)$/\1/p' "$log"); do
    case "$new" in "$id"*) continue ;; esac
    for c in $(buildah containers --quiet --filter "ancestor=$id" 2>/dev/null); do
        buildah rm "$c" >/dev/null 2>&1 || true
    done
    buildah rmi "$id" >/dev/null 2>&1 || true
done
# the build this version's tag named before is no longer needed (kept if a container uses it)
if [ -n "$old" ] && [ "$old" != "$new" ]; then
    for t in $(podman image inspect --format '{{range .RepoTags}}{{.}} {{end}}' "$old" 2>/dev/null); do
        case "$t" in "$name:$version-"*) podman untag "$old" "$t" 2>/dev/null || true ;; esac
    done
    buildah rmi "$old" >/dev/null 2>&1 || true
fi
rm -f "$archive"
podman save --quiet -m --format docker-archive -o "$archive" "$name:$version" "$ref"
echo "$ref $digest" >"$archive.ref"
echo "image: $ref and $name:$version ($(echo "$new" | cut -c1-12)), $archive"
