#!/usr/bin/env bash
# With Docker and kind: create a kind cluster (once), build the images and load them into it: the
# simulator's, the operator's and vllm-router's (deploy/vllm-router, for the P/D test).
# e2e/run.sh (make e2e) calls it when no cluster is reachable and Docker and kind are there; it then
# installs the operator from the release's install.yaml and runs the suite.
#
# Needs docker (with a running engine), kind and kubectl on PATH.
# Env: KIND_CLUSTER (llmsim-e2e), E2E_SIMULATOR_IMAGE (llmsim:e2e), E2E_OPERATOR_IMAGE (llmsim-operator:e2e),
#      E2E_ROUTER_IMAGE (vllm-router:e2e).
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${KIND_CLUSTER:-llmsim-e2e}"
SIM_IMAGE="${E2E_SIMULATOR_IMAGE:-llmsim:e2e}"
OP_IMAGE="${E2E_OPERATOR_IMAGE:-llmsim-operator:e2e}"
ROUTER_IMAGE="${E2E_ROUTER_IMAGE:-vllm-router:e2e}"

for tool in docker kind kubectl; do
    command -v "$tool" >/dev/null 2>&1 || { echo "kind-up: $tool not found on PATH" >&2; exit 1; }
done

if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    kind create cluster --name "$CLUSTER" --wait 120s
fi
kubectl config use-context "kind-$CLUSTER" >/dev/null

# A non-"latest" tag keeps imagePullPolicy at IfNotPresent, so the loaded images are used.
VERSION="$(hack/version.sh)"
docker build --build-arg VERSION="$VERSION" -t "$SIM_IMAGE" -f Dockerfile .
docker build --build-arg VERSION="$VERSION" -t "$OP_IMAGE" -f Dockerfile.operator .
docker build -t "$ROUTER_IMAGE" deploy/vllm-router
kind load docker-image --name "$CLUSTER" "$SIM_IMAGE" "$OP_IMAGE" "$ROUTER_IMAGE"
