#!/bin/sh
# Check, up front and in seconds, that everything the test tiers need is here
# (after ./scripts/setup.sh and, for the VM tier, ./scripts/vm-prepare.sh).
# One line per prerequisite: "ok" or "MISSING ... (how to get it; who needs it)";
# exits 1 when anything is missing, so a missing tool fails the run in its first
# minute instead of as a skip or an odd failure half an hour in.
#   RDMA_CNI_SKIP_VM=1   leave out the VM tier's prerequisites (as test.sh does)
set -u
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PATH="$PWD/.venv/tools/bin:$PATH"   # promtool (setup.sh)
VM_DIR=${RDMA_CNI_VM_DIR:-$PWD/.work/vm}
missing=0

ok() { printf 'prereq: ok       %-30s %s\n' "$1" "$2"; }
miss() { printf 'prereq: MISSING  %-30s %s\n' "$1" "$2"; missing=$((missing + 1)); }

# need_cmd COMMAND "how to install" "who needs it"
need_cmd() {
    if command -v "$1" >/dev/null 2>&1; then ok "$1" "$3"; else miss "$1" "$2; $3"; fi
}
# need_file PATH "how" "who"
need_file() {
    if [ -e "$1" ]; then ok "$1" "$3"; else miss "$1" "$2; $3"; fi
}
# need_py MODULE "how" "who"
need_py() {
    if [ -x "$PY" ] && "$PY" -c "import $1" >/dev/null 2>&1; then ok "python: $1" "$3"
    else miss "python: $1" "$2; $3"; fi
}

SETUP="run ./scripts/setup.sh"
need_file .work/roots/bullseye/.complete "run ./scripts/old-userland.sh" \
    "the host plugin's older-userland test (tests/integration/test_host_tree.py)"
if [ "$(id -u)" = 0 ]; then ok "root" "integration, e2e, hardening tiers"
else miss "root" "run as root; integration, e2e, hardening tiers"; fi
need_file "$PY" "$SETUP" "every tier (.venv)"
for m in pytest hypothesis yaml grpc_tools kubernetes kubernetes_validate inotify_simple atheris h2 pydantic; do
    need_py "$m" "$SETUP (pip install -e '.[dev]')" "the test suite"
done
for t in ruff mypy pyinstaller kubernetes-validate; do
    need_file ".venv/bin/$t" "$SETUP" "lint, types, build, manifest checks"
done
need_file ".venv/checkov/bin/checkov" "$SETUP (own venv: its pins clash with the project's)" \
    "manifest security lint"
need_cmd ip "apt-get install iproute2" "netns, veth, macvlan in every root tier"
need_cmd nsenter "apt-get install util-linux" "containerd e2e"
need_cmd modprobe "apt-get install kmod" "integration (macvlan, veth)"
need_cmd musl-gcc "apt-get install musl-tools" "the build of the static front (scripts/build.sh)"
need_cmd strace "apt-get install strace" "security faults (serve's socket window)"
need_cmd unshare "apt-get install util-linux" "security faults (serve in a private mount namespace)"
need_cmd setpriv "apt-get install util-linux" "security faults (a client of another user)"
need_cmd prlimit "apt-get install util-linux" "security faults (serve out of descriptors)"
need_cmd dash "apt-get install dash" "nccl_env.sh tests"
need_cmd containerd "apt-get install containerd" "containerd e2e"
need_cmd ctr "apt-get install containerd" "containerd e2e"
need_cmd runc "apt-get install runc" "containerd e2e"
need_cmd podman "apt-get install podman" "agent against a real CRI (tests/e2e, tests/faults)"
need_cmd openssl "apt-get install openssl" "the fake Kubernetes API server's TLS certificate"
need_file /usr/lib/cni/bridge "apt-get install containernetworking-plugins" \
    "containerd e2e (stand-in primary)"
need_file /usr/lib/cni/loopback "apt-get install containernetworking-plugins" \
    "cnitool doc test (the test list's first plugin)"
need_cmd promtool "$SETUP (from Debian's prometheus package)" \
    "alert rules test; the node test's documented queries"
# kubectl with kustomize v5 inside: renders the manifests (no cluster is contacted)
if kubectl version --client 2>/dev/null | grep -q "Kustomize Version: v[5-9]"; then
    ok kubectl "manifest checks, node tier (kubectl kustomize, kustomize v5)"
else
    miss kubectl "$SETUP (it unpacks Debian 13's kubectl into .venv/tools/bin); manifest checks, node tier"
fi
need_cmd git "apt-get install git" "the node tier's previous release image (scripts/release-image.sh)"
need_cmd go "$SETUP (golang-go)" "cnitool doc test: builds tests/tools/cnitool"
need_file /usr/share/gocode/src/github.com/containernetworking/cni/libcni \
    "$SETUP (golang-github-appc-cni-dev)" "cnitool doc test: Debian's libcni"
if [ "${RDMA_CNI_SKIP_VM:-0}" != 1 ]; then
    VMP="run ./scripts/vm-prepare.sh"
    need_file .venv/bin/vng "$SETUP (virtme-ng)" "VM tier"
    need_cmd qemu-system-x86_64 "$VMP (qemu-system-x86)" "VM tier"
    need_cmd file "$VMP (file)" "VM tier: virtme-ng runs file on the kernel and busybox"
    need_cmd busybox "$VMP (busybox-static)" "VM tier: the guest's init"
    need_cmd udevadm "$VMP (udev)" "VM tier"
    need_cmd depmod "$VMP (kmod)" "VM tier"
    need_cmd rdma "$VMP (iproute2)" "VM tier: Soft-RoCE links"
    need_cmd ibv_devices "$VMP (ibverbs-utils)" "VM tier"
    # The stamp vm-prepare.sh writes: kernel-<release> for the pinned
    # trixie-backports kernel, kernel when RDMA_CNI_VM_KERNEL picks another.
    if [ -n "${RDMA_CNI_VM_KERNEL:-}" ]; then
        kstamp=$VM_DIR/kernel
    else
        kstamp=$VM_DIR/kernel-$(sed -n 's/^NEXT_RELEASE=//p' scripts/vm-prepare.sh)
    fi
    if [ -s "$kstamp" ] && [ -f "$(cat "$kstamp")" ]; then
        ok "VM kernel" "$(cat "$kstamp")"
    else
        miss "VM kernel" "$VMP (unpacks Debian's kernel into $VM_DIR); VM tier"
    fi
fi
if [ "$missing" -gt 0 ]; then
    echo "prereq: $missing missing: install them (see each line) and run again" >&2
    exit 1
fi
echo "prereq: all present"
