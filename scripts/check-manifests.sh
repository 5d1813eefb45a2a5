#!/bin/sh
# Check the Kubernetes manifests under conf/k8s/ offline:
# - strict schema validation (unknown fields are errors) with kubernetes-validate against
#   the oldest and the newest Kubernetes release it ships schemas for;
# - the security lint checkov, where every accepted finding carries a skip annotation
#   with its reason (conf/k8s/daemonset.yaml); any other finding fails.
# The Prometheus Operator objects (ServiceMonitor, PrometheusRule) are CRDs without a
# schema in kubernetes-validate: it reports them as not validated.
set -eu
cd "$(dirname "$0")/.."
versions=$(.venv/bin/python -c '
import kubernetes_validate.utils as u
v = sorted({u.major_minor(x) for x in u.all_versions()}, key=lambda s: tuple(map(int, s.split("."))))
print(v[0], v[-1])')
for v in $versions; do
    echo "check-manifests: kubernetes-validate --strict, Kubernetes $v"
    .venv/bin/kubernetes-validate --strict --quiet -k "$v.0" conf/k8s/*.yaml
done
echo "check-manifests: checkov (kubernetes framework, offline)"
.venv/checkov/bin/checkov -d conf/k8s --framework kubernetes --compact --quiet \
    --skip-download --output cli
