#!/bin/sh
# The main job, end to end on a machine without RDMA hardware: build the plugin,
# make a throwaway "node" netns whose veth end stands in for an RDMA NIC
# (198.51.100.1/28, with an HPC route), a throwaway pod netns with a primary eth0,
# then run ADD, CHECK and DEL through the built binary the way libcni does
# (chained after the primary, prevResult in, cached result on DEL).
# Uses IPVLAN (mode shared) where the kernel has it, else macvlan (shared-multi).
set -eu
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
BIN="$PWD/dist/rdma-cni/rdma-cni"
tag="demo$$"
NODE="rdma-$tag-node" POD="rdma-$tag-pod" PEER="rdma-$tag-peer"
DATA="$(mktemp -d /tmp/rdma-cni-demo.XXXXXX)"
cleanup() {
    for ns in "$POD" "$NODE" "$PEER"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$DATA"
}
[ "${RDMA_CNI_DEMO_KEEP:-0}" = 1 ] || trap cleanup EXIT INT TERM
for ns in "$NODE" "$POD" "$PEER"; do ip netns add "$ns"; done
ip -n "$NODE" link add rdma0 type veth peer name fabric0 netns "$PEER"
ip -n "$NODE" addr add 198.51.100.1/28 dev rdma0
ip -n "$NODE" link set rdma0 up
ip -n "$PEER" addr add 198.51.100.14/28 dev fabric0
ip -n "$PEER" link set fabric0 up
ip -n "$NODE" route add 203.0.113.0/24 via 198.51.100.14 dev rdma0
# the primary CNI's eth0 in the pod
ip -n "$POD" link add eth0 type veth peer name hostside netns "$NODE"
ip -n "$POD" addr add 198.18.0.2/24 dev eth0
ip -n "$POD" link set eth0 up
ip -n "$NODE" link set hostside up
MODE=shared-multi
if ip netns exec "$NODE" sh -c 'modprobe ipvlan 2>/dev/null; ip link add probe0 link rdma0 type ipvlan mode l2 2>/dev/null && ip link del probe0'; then
    MODE=shared
fi
ANN='[{\"cniConf\":{\"name\":\"rdma\"}},{\"cniConf\":{\"name\":\"rdma\"}}]'
[ "$MODE" = shared ] && ANN='[{\"cniConf\":{\"name\":\"rdma\"}}]'
PREV='{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/'"$POD"'"}],"ips":[{"version":"4","address":"198.18.0.2/24","interface":0}]}'
conf() {  # $1: prevResult JSON
    printf '{"cniVersion":"0.4.0","name":"vpc-cni","type":"rdma-cni","mode":"%s","devices":["rdma0"],"dataDir":"%s","logFile":"%s/rdma-cni.log","capabilities":{"io.kubernetes.cri.pod-annotations":true},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"k8s.volcengine.com/pod-networks":"%s"}},"prevResult":%s}' \
        "$MODE" "$DATA/state" "$DATA" "$ANN" "$1"
}
run() {  # $1: command, $2: prevResult
    conf "$2" | ip netns exec "$NODE" env CNI_COMMAND="$1" CNI_CONTAINERID="$tag" \
        CNI_NETNS="/var/run/netns/$POD" CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin \
        CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=rdma-test" "$BIN"
}
echo "== mode $MODE: ADD (chained after the primary, prevResult at cniVersion 0.4.0)"
RESULT=$(run ADD "$PREV")
echo "$RESULT" | python3 -m json.tool
echo "== the pod's interfaces, rules and RDMA routing tables"
ip -n "$POD" -br addr
ip -n "$POD" rule show priority 20000
ip -n "$POD" route show table 100
echo "== CHECK"
run CHECK "$RESULT" && echo "CHECK ok"
echo "== DEL (with the cached result)"
run DEL "$RESULT" && echo "DEL ok"
ip -n "$POD" -br addr
echo "== DEL again (runtimes repeat it): still ok"
run DEL "$RESULT" && echo "DEL ok"
echo "== state left in the data dir:"
find "$DATA/state" -type f ! -name lock | sed 's/^/  /'
echo "(none above means clean)"
