#!/usr/bin/env bash
# Print the path of a `litellm` executable for the e2e gateway, installing it when missing: the
# `gateway` extra of pyproject.toml, in its own venv under ${LLMSIM_CACHE_DIR:-~/.cache/llmsim}/gateway/
# (one venv per requirement set; a later run reuses it). Logs go to stderr, the path to stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
mapfile -t REQS < <("$PYTHON" - "$ROOT/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["gateway"]))
PY
)
((${#REQS[@]})) || { echo "gateway-venv: no 'gateway' extra in pyproject.toml" >&2; exit 1; }
KEY="$(printf '%s\n' "${REQS[@]}" | sha256sum | cut -c1-12)"
VENV="${LLMSIM_CACHE_DIR:-${HOME:-/root}/.cache/llmsim}/gateway/$KEY"
if [[ ! -x "$VENV/bin/litellm" || ! -f "$VENV/.complete" ]]; then
    echo "[gateway-venv] installing ${REQS[*]} into $VENV (a few minutes, once)" >&2
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON" -m venv "$VENV" >&2
    "$VENV/bin/pip" install -q --disable-pip-version-check "${REQS[@]}" >&2
    touch "$VENV/.complete"
fi
echo "$VENV/bin/litellm"
