#!/usr/bin/env bash
# Print the project's one version, llmsim.__version__ (simulator/llmsim/__init__.py), without
# importing anything: the Makefile's VERSION and e2e/kind-up.sh's image builds read it.
set -euo pipefail
cd "$(dirname "$0")/.."
version="$(sed -n 's/^__version__ = "\([^"]*\)"$/\1/p' simulator/llmsim/__init__.py)"
[[ -n $version ]] || { echo "version.sh: no __version__ = \"...\" line in simulator/llmsim/__init__.py" >&2; exit 1; }
echo "$version"
