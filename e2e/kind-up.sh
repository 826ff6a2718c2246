#!/usr/bin/env bash
# Create a kind cluster, build and load the simulator and operator images, install the CRD and
# the operator, and wait until it runs. Then:  E2E=1 pytest e2e   (KUBECONFIG from kind).
#
# Needs docker, kind and kubectl on PATH, and the project's venv (make .venv/.installed-dev).
# Env: KIND_CLUSTER (llmsim-e2e), TAG (dev), KUBECTL (kubectl).
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${KIND_CLUSTER:-llmsim-e2e}"
TAG="${TAG:-dev}"
KUBECTL="${KUBECTL:-kubectl}"
OPERATOR_CLI="${OPERATOR_CLI:-.venv/bin/llmsim-operator}"

for tool in docker kind "$KUBECTL"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "kind-up: $tool not found on PATH" >&2; exit 1; }
done
[[ -x "$OPERATOR_CLI" ]] || OPERATOR_CLI="$(command -v llmsim-operator || true)"
[[ -n "$OPERATOR_CLI" ]] || { echo "kind-up: llmsim-operator not found (run make .venv/.installed-dev)" >&2; exit 1; }

if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    kind create cluster --name "$CLUSTER" --wait 120s
fi
"$KUBECTL" config use-context "kind-$CLUSTER" >/dev/null

docker build -t "llmsim:$TAG" -f Dockerfile .
docker build -t "llmsim-operator:$TAG" -f Dockerfile.operator .
kind load docker-image --name "$CLUSTER" "llmsim:$TAG" "llmsim-operator:$TAG"

# A non-"latest" tag keeps imagePullPolicy at IfNotPresent, so the loaded images are used.
"$OPERATOR_CLI" manifests --image "llmsim-operator:$TAG" --simulator-image "llmsim:$TAG" |
    "$KUBECTL" apply --server-side --force-conflicts -f -
"$KUBECTL" wait --for condition=established --timeout=60s crd/llmsimulators.llmsim.io
"$KUBECTL" -n llmsim-system rollout status deploy/llmsim-operator --timeout=180s
echo "kind-up: ready. Run: E2E=1 .venv/bin/pytest e2e" >&2
