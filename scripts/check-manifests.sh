#!/bin/sh
# Check the Kubernetes manifests offline, as a cluster gets them: `kubectl kustomize` of
# conf/k8s/base and of every overlay under conf/k8s/overlays/ (kustomize v5 ships in
# kubectl), then for each rendering
# - strict schema validation (unknown fields are errors) with kubernetes-validate against
#   the oldest and the newest Kubernetes release it ships schemas for;
# - the security lint checkov, where every accepted finding carries a skip annotation
#   with its reason (conf/k8s/base/daemonset.yaml); any other finding fails.
# The Prometheus Operator objects (ServiceMonitor, PrometheusRule) are CRDs without a
# schema in kubernetes-validate: it reports them as not validated.
set -eu
cd "$(dirname "$0")/.."
command -v kubectl >/dev/null 2>&1 || { echo "check-manifests: kubectl is missing" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for target in conf/k8s/base conf/k8s/overlays/*/; do
    name=$(basename "$target")
    kubectl kustomize "$target" >"$out/$name.yaml"
    echo "check-manifests: rendered $target"
done
versions=$(.venv/bin/python -c '
import kubernetes_validate.utils as u
v = sorted({u.major_minor(x) for x in u.all_versions()}, key=lambda s: tuple(map(int, s.split("."))))
print(v[0], v[-1])')
for v in $versions; do
    echo "check-manifests: kubernetes-validate --strict, Kubernetes $v"
    .venv/bin/kubernetes-validate --strict --quiet -k "$v.0" "$out"/*.yaml
done
echo "check-manifests: checkov (kubernetes framework, offline)"
.venv/checkov/bin/checkov -d "$out" --framework kubernetes --compact --quiet \
    --skip-download --output cli
