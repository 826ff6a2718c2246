#!/usr/bin/env bash
# `make e2e`: the product as users run it, on a real cluster. Both images are built from our
# Dockerfiles (and vllm-router's, deploy/vllm-router, for the P/D test), the release's install.yaml
# and Helm chart are built by hack/release.sh (as `make release` builds them) and checked against
# its SHA256SUMS, the operator is installed from that install.yaml, then the e2e suite runs
# (operator, fleets, service traffic, the chart from its .tgz, a LiteLLM gateway, a Prometheus,
# P/D through vllm-router) and the operator-fleet bench.
#
# The cluster, in order of preference:
#   1. whatever KUBECONFIG (or ~/.kube/config) reaches;
#   2. with a Docker engine and kind: a kind cluster (e2e/kind-up.sh builds and loads the images);
#   3. else this machine's one-node Kubernetes from the shared k8s scripts (hack/k8s-scripts.sh finds
#      them), started with cluster-up.sh; images are built with its build-image.sh (buildah into the
#      node's containerd).
# On a reachable cluster the images go in the same way: kind-* contexts by docker build + kind load,
# the local cluster by build-image.sh; for any other cluster push them yourself and set
# E2E_SKIP_BUILD=1 E2E_SIMULATOR_IMAGE=... E2E_OPERATOR_IMAGE=... E2E_ROUTER_IMAGE=...
#
# Arguments go to pytest (make e2e PYTEST_ARGS="-k gateway").
# Env: E2E_TAG (e2e), E2E_SIMULATOR_IMAGE, E2E_OPERATOR_IMAGE, E2E_ROUTER_IMAGE, E2E_SKIP_BUILD=1,
#      E2E_BENCH=0 (no bench).
# Exports E2E_DIST, the release artifacts' directory (e2e/test_6b_helm_chart.py installs its chart).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BIN="${VENV_BIN:-$ROOT/.venv/bin}"
TAG="${E2E_TAG:-e2e}"
export E2E_SIMULATOR_IMAGE="${E2E_SIMULATOR_IMAGE:-llmsim:$TAG}"
export E2E_OPERATOR_IMAGE="${E2E_OPERATOR_IMAGE:-llmsim-operator:$TAG}"
# vllm-router (PyPI, pinned in its Dockerfile) in front of a disaggregated LLMSimulator (e2e/test_8b_pd_router.py).
export E2E_ROUTER_IMAGE="${E2E_ROUTER_IMAGE:-vllm-router:$TAG}"
LOCAL_KUBECONFIG=/tmp/k8s-run/kubeconfig
T0=$SECONDS
TIMES=()

say() { echo "[e2e +$((SECONDS - T0))s] $*" >&2; }
die() {
    echo "e2e: $*" >&2
    exit 1
}
# timed NAME CMD...: run CMD, remember how long it took.
timed() {
    local name="$1" start=$SECONDS rc=0
    shift
    "$@" || rc=$?
    TIMES+=("$name $((SECONDS - start))s")
    return "$rc"
}

[[ -x "$BIN/llmsim-operator" ]] || die "$BIN/llmsim-operator missing: run make .venv/.installed-dev first"

reachable() { command -v kubectl >/dev/null 2>&1 && kubectl get --raw /readyz >/dev/null 2>&1; }
docker_and_kind() { command -v kind >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }
local_cluster() { [[ "$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}' 2>/dev/null)" == https://127.0.0.1:6443 ]] && ctr -n k8s.io version >/dev/null 2>&1; }

# build_image DOCKERFILE TAG [CONTEXT]: build-image.sh, then check the import ourselves when it says it
# failed (exit 5): its check `ctr images ls -q | grep -q` under pipefail fails whenever grep exits before
# ctr is done writing (SIGPIPE), although the image is there.
build_image() {
    local rc=0 ref="$2"
    "$SCRIPTS/build-image.sh" "${3:-.}" "$1" "$2" >&2 || rc=$?
    [[ $ref == */* ]] || ref="docker.io/library/$ref"
    if [[ $rc == 5 ]] && ctr -n k8s.io images ls -q >"$TMPDIR_E2E/images" && grep -Fxq "$ref" "$TMPDIR_E2E/images"; then
        say "$ref is in containerd after all (build-image.sh's own check lost a SIGPIPE race)"
        rc=0
    fi
    return "$rc"
}
TMPDIR_E2E="$(mktemp -d)"
trap 'rm -rf "$TMPDIR_E2E"' EXIT

# ---- 1. a cluster
if reachable; then
    context="$(kubectl config current-context 2>/dev/null || true)"
    if [[ $context == kind-* ]]; then
        LOADER=kind
    elif local_cluster; then
        LOADER=local
    else
        LOADER=none
    fi
    say "using the cluster KUBECONFIG reaches (context ${context:-?}; images: $LOADER)"
elif docker_and_kind; then
    LOADER=kind
    say "no cluster reachable; Docker and kind found: a kind cluster"
else
    SCRIPTS="$(hack/k8s-scripts.sh)" || die "no reachable cluster (KUBECONFIG), no Docker engine with kind, and no shared k8s scripts to start one: set LLMSIM_K8S_SCRIPTS"
    say "no cluster reachable, no Docker engine: the local cluster ($SCRIPTS/cluster-up.sh)"
    # One Kubernetes build per machine, shared with make test's envtest (with its progress shown):
    # cluster-up.sh then finds its binaries and builds nothing.
    timed k8s-binaries env LLMSIM_K8S_CLUSTER=1 hack/envtest-assets.sh >/dev/null
    timed cluster timeout 1800 "$SCRIPTS/cluster-up.sh" >&2
    export KUBECONFIG="$LOCAL_KUBECONFIG"
    LOADER=local
fi

# (cluster-up.sh installs Debian's kubectl where none is; anything else needs one on PATH.)
command -v kubectl >/dev/null 2>&1 || die "kubectl not found on PATH"

# ---- 2. images
if [[ "${E2E_SKIP_BUILD:-0}" == 1 ]]; then
    say "E2E_SKIP_BUILD=1: using $E2E_SIMULATOR_IMAGE, $E2E_OPERATOR_IMAGE and $E2E_ROUTER_IMAGE as they are"
elif [[ $LOADER == kind ]]; then
    timed images e2e/kind-up.sh >&2
elif [[ $LOADER == local ]]; then
    SCRIPTS="${SCRIPTS:-$(hack/k8s-scripts.sh)}"
    say "building $E2E_SIMULATOR_IMAGE, $E2E_OPERATOR_IMAGE and $E2E_ROUTER_IMAGE with $SCRIPTS/build-image.sh"
    timed image-simulator build_image Dockerfile "$E2E_SIMULATOR_IMAGE"
    timed image-operator build_image Dockerfile.operator "$E2E_OPERATOR_IMAGE"
    # Its own context: nothing of the checkout goes in, so the pip-install layer stays cached across runs.
    timed image-router build_image deploy/vllm-router/Dockerfile "$E2E_ROUTER_IMAGE" deploy/vllm-router
else
    die "cannot load images into this cluster (neither kind nor the local cluster): push them and set E2E_SKIP_BUILD=1 E2E_SIMULATOR_IMAGE=... E2E_OPERATOR_IMAGE=... E2E_ROUTER_IMAGE=..."
fi

# ---- 3. the release's fast artifacts, and the operator from its install.yaml as users install it
# install.yaml, the chart's .tgz and SHA256SUMS, as `make release` builds them (not the images and
# Python packages: the images are the ones built above); RELEASE_ALLOW_DIRTY: e2e runs on work in
# progress too.
VERSION="$(hack/version.sh)"
export E2E_DIST="$TMPDIR_E2E/dist"
say "release artifacts of $VERSION: hack/release.sh with RELEASE_PARTS='install chart' into $E2E_DIST"
timed release env PYTHON="$BIN/python" RELEASE_PARTS="install chart" RELEASE_ALLOW_DIRTY=1 \
    hack/release.sh "$VERSION" "$E2E_DIST" 2>"$TMPDIR_E2E/release.log" || {
    cat "$TMPDIR_E2E/release.log" >&2
    die "hack/release.sh failed"
}
(cd "$E2E_DIST" && sha256sum --strict -c SHA256SUMS >&2) || die "$E2E_DIST does not match its SHA256SUMS"

install_operator() {
    # install.yaml names the release's images on ghcr.io; the e2e images were built just now into
    # the cluster's own image store (or kind's) and are not on any registry, so the two references
    # are the one thing swapped. Both must be there: a renamed image would otherwise install ghcr.io's.
    # (Each step returns on failure: `timed` runs this under ||, where set -e does not apply.)
    local released="$E2E_DIST/install.yaml" manifest="$TMPDIR_E2E/install.yaml" ref
    local operator_ref="ghcr.io/llmsim/llmsim-operator:$VERSION" simulator_ref="ghcr.io/llmsim/llmsim:$VERSION"
    for ref in "$operator_ref" "$simulator_ref"; do
        grep -Fq "$ref" "$released" || die "install.yaml does not name $ref"
    done
    sed -e "s#${operator_ref//./\\.}\$#$E2E_OPERATOR_IMAGE#" -e "s#${simulator_ref//./\\.}\$#$E2E_SIMULATOR_IMAGE#" \
        "$released" >"$manifest" || return
    # Before 1.25 the API server does not know the CRD's CEL rules (`llmsim-operator manifests
    # --kube-version auto` leaves them out there, asking the cluster the same way): install.yaml
    # has them, so it goes in as a user of such a cluster applies it, client-side with
    # --validate=false (the server drops the unknown field; the operator checks the rules itself).
    local cel
    cel="$("$BIN/python" -c 'from llmsim_operator.kube_version import detect_cel; print(detect_cel()[0])')" || return
    if [[ $cel == True ]]; then
        kubectl apply --server-side --force-conflicts -f "$manifest" >&2 || return
    else
        say "the cluster predates CEL rules in CRDs: kubectl apply --validate=false (client-side)"
        kubectl apply --validate=false -f "$manifest" >&2 || return
    fi
    kubectl wait --for condition=established --timeout=60s crd/llmsimulators.llmsim.io >&2 || return
    # Same tag, maybe a new image: start a fresh pod on it (a no-op rollout would keep the old one).
    kubectl -n llmsim-system rollout restart deploy/llmsim-operator >&2 || return
    kubectl -n llmsim-system rollout status deploy/llmsim-operator --timeout=180s >&2
}
say "installing the operator from the release's install.yaml"
timed install install_operator

# ---- 4. the suite, the gateway it needs, the bench
timed gateway-venv hack/gateway-venv.sh >/dev/null
LITELLM="$(hack/gateway-venv.sh 2>/dev/null)"
export E2E=1 E2E_LITELLM="$LITELLM"
say "pytest e2e"
status=0
timed tests "$BIN/pytest" e2e -p no:cacheprovider "$@" || status=$?
if [[ $status == 0 && "${E2E_BENCH:-1}" != 0 ]]; then
    say "operator-fleet bench: 100 LLMSimulators with 0 replicas"
    timed bench-operator-fleet "$BIN/python" bench/bench_operator_fleet.py || status=$?
fi
say "timings: ${TIMES[*]} total $((SECONDS - T0))s"
exit "$status"
