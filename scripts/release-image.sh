#!/bin/sh
# The node image of an earlier revision (the release before this one, for the node test's
# upgrade and rollback), built by that revision's own ./scripts/build.sh and
# ./scripts/image.sh in a temporary git worktree, tagged localhost/rdma-cni-release:<rev>.
# Cached: the image archive is kept as .work/release-images/<rev>.oci.tar and loaded from
# there when the local container storage lacks the image, so CI builds it once.
#
#   ./scripts/release-image.sh REV     (as root; prints the image reference)
set -eu
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "release-image: usage: release-image.sh REV" >&2; exit 2; }
rev=$(git rev-parse --short=12 "$1^{commit}" 2>/dev/null) || {
    echo "release-image: $1 is not a commit of this repository" >&2; exit 1; }
name=localhost/rdma-cni-release
ref="$name:$rev"
cache=.work/release-images
archive="$cache/$rev.oci.tar"
if podman image exists "$ref"; then echo "$ref"; exit 0; fi
if [ -s "$archive" ]; then
    podman load --quiet --input "$archive" >/dev/null
    podman image exists "$ref" || { echo "release-image: $archive does not hold $ref" >&2; exit 1; }
    echo "$ref"; exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d /tmp/rdma-cni-release.XXXXXX)
src="$tmp/src"
cleanup() {
    git worktree remove --force "$src" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
git worktree add --quiet --detach "$src" "$rev"
ln -s "$PWD/.venv" "$src/.venv"            # the same tools (pyinstaller) as this tree
mkdir -p "$src/.work"
ln -s "$(cd .work/image 2>/dev/null && pwd || echo "$PWD/.work/image")" "$src/.work/image"  # the rootfs cache
echo "release-image: building $rev with its own scripts (once; cached in $archive)" >&2
(cd "$src" && PYTHONPATH="$src" ./scripts/build.sh >"$tmp/build.log" 2>&1 &&
    RDMA_CNI_IMAGE_NAME="$name" ./scripts/image.sh "$rev" >>"$tmp/build.log" 2>&1) || {
    tail -30 "$tmp/build.log" >&2; echo "release-image: building $rev failed" >&2; exit 1; }
# the archive's name: rdma-cni-image.oci.tar in earlier revisions, rdma-cni-image.tar since
built=$(ls "$src/dist/rdma-cni-image.oci.tar" "$src/dist/rdma-cni-image.tar" 2>/dev/null | head -1)
cp "$built" "$archive.tmp"
mv "$archive.tmp" "$archive"
echo "$ref"
