#!/bin/sh
# Print the git commit a build of DIR (default: this checkout) is made from, as
# `rdma-cni --version` reports it: 12 hex digits, `-dirty` when tracked files have
# changes, `unknown` outside a git checkout.
set -eu
dir=${1:-$(dirname "$0")/..}
commit=$(git -C "$dir" rev-parse --short=12 HEAD 2>/dev/null) || { echo unknown; exit 0; }
if [ -n "$(git -C "$dir" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit-dirty"
fi
echo "$commit"
