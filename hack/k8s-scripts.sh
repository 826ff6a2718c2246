#!/usr/bin/env bash
# Print the directory of the shared local-cluster scripts (cluster-up.sh, build-image.sh, ...), or fail
# with one line. Looked for, in order: $LLMSIM_K8S_SCRIPTS; ../shared/k8s beside this checkout (CI
# clones main with a copy of shared/ next to it); /work/shared/k8s (the developers' machines).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
for dir in "${LLMSIM_K8S_SCRIPTS:-}" "$ROOT/../shared/k8s" /work/shared/k8s; do
    if [[ -n "$dir" && -x "$dir/cluster-up.sh" && -x "$dir/build-image.sh" ]]; then
        (cd "$dir" && pwd -P)
        exit 0
    fi
done
echo "k8s-scripts: no shared k8s scripts (cluster-up.sh, build-image.sh) in \$LLMSIM_K8S_SCRIPTS (${LLMSIM_K8S_SCRIPTS:-unset}), $ROOT/../shared/k8s or /work/shared/k8s" >&2
exit 1
