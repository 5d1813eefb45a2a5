#!/bin/sh
# Build the rdma-cni node image here, pulling nothing from any container registry:
# the runtime stage of the Containerfile, made with Debian's buildah from scratch over
# a debootstrap'd (minbase) Debian 12 root filesystem and the bundle ./scripts/build.sh
# made. Commits localhost/rdma-cni:<tag> into the local container storage (podman sees
# it) and writes dist/rdma-cni-image.oci.tar.
#
#   ./scripts/image.sh [TAG]     (as root; TAG defaults to the package version)
#
# Cached: the rootfs tarball is kept in .work/image/ and reused; an image whose
# bundle digest label matches the current bundle is not rebuilt. RDMA_CNI_IMAGE_NAME
# overrides the name (default localhost/rdma-cni).
set -eu
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
for tool in buildah podman debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "image: $tool is missing: run ./scripts/setup.sh (apt-get install buildah podman debootstrap)" >&2
        exit 1; }
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
tag=${1:-$version}
name=${RDMA_CNI_IMAGE_NAME:-localhost/rdma-cni}
ref="$name:$tag"
mirror=${RDMA_CNI_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=.work/image
# ibverbs-providers: libibverbs (in the bundle) dlopens the RDMA providers (librxe,
# libmlx5, ...) listed in /etc/libibverbs.d for `rdma-cni verify`
packages=ibverbs-providers
rootfs="$cache/rootfs-bookworm-minbase-verbs.tar"
archive=dist/rdma-cni-image.oci.tar
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

[ -x dist/rdma-cni/rdma-cni ] && [ -x dist/rdma-cni-host/rdma-cni-front ] || {
    echo "image: dist/rdma-cni or dist/rdma-cni-host is missing: run ./scripts/build.sh" >&2; exit 1; }
digest=$( (cd dist && find rdma-cni rdma-cni-host -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-64)
have=$(podman image inspect --format '{{ index .Labels "io.rdma-cni.bundle-digest" }}' "$ref" 2>/dev/null || true)
if [ "$have" = "$digest" ] && [ -s "$archive" ] && [ "$(cat "$archive.ref" 2>/dev/null)" = "$ref $digest" ]; then
    echo "image: $ref is up to date ($archive)"; exit 0
fi

ctr=$(buildah from --quiet scratch)
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
mnt=$(buildah mount "$ctr")
tar -C "$mnt" --numeric-owner -xf "$rootfs"
# the same layout as the Containerfile's runtime stage: the image's bundle at /opt/rdma-cni,
# the host's plugin at /opt/rdma-cni-host, which `rdma-cni install` lays out on the host
# (nccl_env.sh is in it, _internal/rdma_cni/data/; pods get it from the device plugin's
# mount of the host's copy, not from this image)
cp -a dist/rdma-cni "$mnt/opt/rdma-cni"
cp -a dist/rdma-cni-host "$mnt/opt/rdma-cni-host"
ln -sf /opt/rdma-cni/rdma-cni "$mnt/usr/local/bin/rdma-cni"
buildah umount "$ctr" >/dev/null
buildah config \
    --label "org.opencontainers.image.title=rdma-cni" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.source=https://github.com/rdma-cni/rdma-cni" \
    --label "io.rdma-cni.bundle-digest=$digest" \
    --env PATH=/opt/rdma-cni:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --workingdir / --cmd '["rdma-cni", "--help"]' "$ctr"
old=$(podman image inspect --format '{{.Id}}' "$ref" 2>/dev/null || true)
buildah commit --quiet --rm --format oci "$ctr" "$ref" >/dev/null
trap - EXIT
new=$(podman image inspect --format '{{.Id}}' "$ref")
# the image this tag named before is no longer needed (kept if a container uses it)
[ -z "$old" ] || [ "$old" = "$new" ] || buildah rmi "$old" >/dev/null 2>&1 || true
rm -f "$archive"
buildah push --quiet "$ref" "oci-archive:$archive:$ref" >/dev/null
echo "$ref $digest" >"$archive.ref"
echo "image: $ref ($(echo "$new" | cut -c1-12)), $archive"
