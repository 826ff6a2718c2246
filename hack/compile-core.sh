#!/usr/bin/env bash
# A copy of the simulator with the planner core compiled by mypyc (setup.py, LLMSIM_COMPILE=1),
# for PYTHONPATH=<printed path>: the planner bench against pure Python, and the test that the
# compiled core gives the same results. Prints the copy's simulator/ directory.
#
# Rebuilt only when a simulator source, setup.py, pyproject.toml, mypy or Python changed (~75 s on
# two cores); a lock keeps two callers from building into one directory at once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
dest=${1:-$root/build/compiled}
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
cd "$root"
key=$( {
  cat setup.py pyproject.toml
  find simulator -name '*.py' -not -path '*/__pycache__/*' | LC_ALL=C sort | xargs cat
  "$python" -c 'import sys, mypy.version; print(mypy.version.__version__, sys.version)'
} | sha256sum | cut -d' ' -f1)
if [[ -f $dest/.key && $(cat "$dest/.key") == "$key" ]]; then
  echo "$dest/simulator"
  exit 0
fi
rm -rf "$dest"
mkdir -p "$dest"
cp setup.py pyproject.toml README.md "$dest/"
tar -C "$root" --exclude=__pycache__ --exclude='*.so' -cf - simulator | tar -C "$dest" -xf -
if ! (cd "$dest" && LLMSIM_COMPILE=1 "$python" setup.py -q build_ext --inplace >build.log 2>&1); then
  tail -n 40 "$dest/build.log" >&2
  echo "compile-core: mypyc failed (full log: $dest/build.log)" >&2
  exit 1
fi
# The modules' shared runtime is a top-level module (site-packages in a wheel): beside llmsim here.
mv "$dest"/*__mypyc*.so "$dest/simulator/"
echo "$key" >"$dest/.key"
echo "$dest/simulator"
