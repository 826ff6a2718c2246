#!/usr/bin/env bash
# The fleet action's steps (.github/actions/fleet/action.yml), runnable by hand or from the e2e against
# any cluster kubectl reaches: install the llmsim operator, apply LLMSimulator manifests, wait until
# each one is Ready, and print each one's endpoint.
#
#   hack/fleet-action.sh path/to/fleet.yaml [more files or directories ...]
#
# Env (the action's inputs):
#   FLEET_MANIFESTS        the manifests, whitespace-separated, when no argument is given.
#   FLEET_INSTALL          how to install the operator:
#                            release (default): deploy/llmsim-operator.yaml of this checkout, the
#                              install manifest a release ships;
#                            manifests: `llmsim-operator manifests --kube-version auto` with the images
#                              below (llmsim-operator from FLEET_LLMSIM_OPERATOR, else PATH);
#                            a URL or a path: that install manifest (e.g. a release's asset);
#                            none: the operator is already there.
#   FLEET_OPERATOR_IMAGE   operator image for FLEET_INSTALL=manifests (default: the release's).
#   FLEET_SIMULATOR_IMAGE  simulator image for FLEET_INSTALL=manifests (default: the release's).
#   FLEET_LLMSIM_OPERATOR  the llmsim-operator command (default: llmsim-operator).
#   FLEET_NAMESPACE        namespace of the LLMSimulators (default: kubectl's current one).
#   FLEET_TIMEOUT          how long to wait for the operator and for each LLMSimulator (default 300s).
#   GITHUB_OUTPUT          when set (in the action), `endpoints` (name=endpoint lines) is written to it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
INSTALL="${FLEET_INSTALL:-release}"
TIMEOUT="${FLEET_TIMEOUT:-300s}"
OPERATOR_NAMESPACE=llmsim-system

say() { echo "fleet: $*" >&2; }
die() {
    echo "fleet: $*" >&2
    exit 1
}

if [[ $# -eq 0 && -n "${FLEET_MANIFESTS:-}" ]]; then
    # Split on whitespace (newlines too) without expanding globs.
    read -r -d '' -a from_env <<<"$FLEET_MANIFESTS" || true
    set -- "${from_env[@]}"
fi
[[ $# -gt 0 ]] || die "usage: $0 MANIFEST [MANIFEST ...] (files or directories of LLMSimulators), or FLEET_MANIFESTS"
file_args=()
for manifest in "$@"; do
    [[ -e "$manifest" ]] || die "$manifest: no such file or directory"
    file_args+=(-f "$manifest")
done
command -v kubectl >/dev/null 2>&1 || die "kubectl not found on PATH"
ns_args=()
[[ -z "${FLEET_NAMESPACE:-}" ]] || ns_args=(--namespace "$FLEET_NAMESPACE")

# ---- 1. the operator
install_operator() {
    case "$INSTALL" in
        none)
            say "FLEET_INSTALL=none: using the operator already installed"
            return
            ;;
        release)
            say "installing the operator from $ROOT/deploy/llmsim-operator.yaml"
            kubectl apply --server-side --force-conflicts -f "$ROOT/deploy/llmsim-operator.yaml" >&2
            ;;
        manifests)
            local args=(manifests --kube-version auto)
            [[ -z "${FLEET_OPERATOR_IMAGE:-}" ]] || args+=(--image "$FLEET_OPERATOR_IMAGE")
            [[ -z "${FLEET_SIMULATOR_IMAGE:-}" ]] || args+=(--simulator-image "$FLEET_SIMULATOR_IMAGE")
            say "installing the operator with llmsim-operator ${args[*]}"
            "${FLEET_LLMSIM_OPERATOR:-llmsim-operator}" "${args[@]}" |
                kubectl apply --server-side --force-conflicts -f - >&2
            ;;
        *)
            say "installing the operator from $INSTALL"
            kubectl apply --server-side --force-conflicts -f "$INSTALL" >&2
            ;;
    esac
    kubectl wait --for condition=established --timeout=60s crd/llmsimulators.llmsim.io >&2
    kubectl -n "$OPERATOR_NAMESPACE" rollout status deploy/llmsim-operator --timeout="$TIMEOUT" >&2
}
install_operator

# ---- 2. the caller's LLMSimulators
applied="$(kubectl apply --server-side "${ns_args[@]}" -o name --recursive "${file_args[@]}")"
mapfile -t simulators < <(grep '^llmsimulator\.llmsim\.io/' <<<"$applied" || true)
[[ ${#simulators[@]} -gt 0 ]] || die "no LLMSimulator in $*"
say "applied ${simulators[*]}"

# ---- 3. Ready, one by one (the operator's Ready condition: every replica ready)
failed=0
for simulator in "${simulators[@]}"; do
    if ! kubectl wait "${ns_args[@]}" --for condition=Ready --timeout="$TIMEOUT" "$simulator" >&2; then
        failed=1
        say "$simulator is not Ready after $TIMEOUT:"
        kubectl get "${ns_args[@]}" "$simulator" -o yaml >&2 || true
    fi
done
[[ $failed == 0 ]] || die "not every LLMSimulator became Ready"

# ---- 4. the endpoints (status.endpoint), for the caller's gateway config
endpoints="$(for simulator in "${simulators[@]}"; do
    kubectl get "${ns_args[@]}" "$simulator" -o jsonpath='{.metadata.name}={.status.endpoint}{"\n"}'
done)"
echo "$endpoints"
if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
    {
        echo "endpoints<<LLMSIM_ENDPOINTS"
        echo "$endpoints"
        echo "LLMSIM_ENDPOINTS"
    } >>"$GITHUB_OUTPUT"
fi
