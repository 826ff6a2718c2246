#!/usr/bin/env bash
# Delete the kind cluster made by kind-up.sh.
set -euo pipefail
kind delete cluster --name "${KIND_CLUSTER:-llmsim-e2e}"
