#!/usr/bin/env bash
# `make release VERSION=x.y.z`: every artifact of a release into one directory (docs/releasing.md).
#
#   hack/release.sh VERSION [DIST]       DIST defaults to dist/ and must be empty or absent
#
# Writes, for VERSION (which must be llmsim.__version__, hack/version.sh):
#   llmsim-VERSION.oci.tar, llmsim-operator-VERSION.oci.tar   both images (OCI archives), tagged
#       ghcr.io/llmsim/llmsim[-operator]:VERSION, the names install.yaml and the chart use;
#   llmsim-VERSION.tar.gz, llmsim-VERSION-py3-none-any.whl       sdist and wheel (python -m build);
#   llmsim-VERSION-cpXY-cpXY-PLATFORM.whl                        the same wheel with the planner core
#       compiled by mypyc (setup.py, LLMSIM_COMPILE=1), built from the sdist;
#   install.yaml                                                 `llmsim-operator manifests`, CRD included;
#   llmsim-operator-VERSION.tgz                                  the Helm chart, packaged by Helm's engine;
#   SHA256SUMS                                                   `sha256sum -c SHA256SUMS` checks all of them.
#
# Refuses a VERSION that is not the code's, and a work tree with uncommitted changes (the artifacts
# would not be the tagged commit's); RELEASE_ALLOW_DIRTY=1 lets a dry run through.
#
# Env:
#   RELEASE_PARTS           the artifacts to build, of: images wheels compiled install chart (default
#                           all; empty: none); SHA256SUMS covers what DIST holds. make test builds
#                           "install chart" (tests/test_release.py).
#   RELEASE_IMAGE_BUILDER   docker or buildah (default: docker when a Docker engine answers, else buildah).
#   RELEASE_ALLOW_DIRTY=1   build from a tree with uncommitted changes.
#   PYTHON                  the Python with the dev extra (default .venv/bin/python).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
PARTS=" ${RELEASE_PARTS-images wheels compiled install chart} "
REGISTRY=ghcr.io/llmsim
T0=$SECONDS

say() { echo "[release +$((SECONDS - T0))s] $*" >&2; }
die() {
    echo "release: $*" >&2
    exit 1
}
part() { [[ $PARTS == *" $1 "* ]]; }

[[ $# -ge 1 && $# -le 2 ]] || die "usage: $0 VERSION [DIST]"
VERSION="$1"
DIST="${2:-$ROOT/dist}"
for name in $PARTS; do
    case "$name" in
        images | wheels | compiled | install | chart) ;;
        *) die "unknown part $name in RELEASE_PARTS (images wheels compiled install chart)" ;;
    esac
done

# ---- 0. the tree is the release
code_version="$(hack/version.sh)"
[[ $VERSION == "$code_version" ]] ||
    die "VERSION=$VERSION but the code says $code_version (simulator/llmsim/__init__.py): bump it there first (docs/releasing.md)"
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+.][0-9A-Za-z.+-]+)?$ ]] || die "VERSION=$VERSION is not a semantic version"
if [[ "${RELEASE_ALLOW_DIRTY:-0}" != 1 ]]; then
    dirty="$(git status --porcelain 2>/dev/null)" || die "$ROOT is not a git work tree"
    [[ -z $dirty ]] || die "uncommitted changes (commit them, or RELEASE_ALLOW_DIRTY=1 for a dry run):
$dirty"
fi
if [[ -e $DIST ]]; then
    [[ -d $DIST && -z "$(ls -A "$DIST")" ]] || die "$DIST is not empty (make release starts from an empty dist/)"
fi
mkdir -p "$DIST"
DIST="$(cd "$DIST" && pwd)"
say "llmsim $VERSION into $DIST: $PARTS"

# ---- 1. the operator's install manifest
if part install; then
    say "install.yaml: llmsim-operator manifests"
    "$PYTHON" -m llmsim_operator.cli manifests \
        --image "$REGISTRY/llmsim-operator:$VERSION" --simulator-image "$REGISTRY/llmsim:$VERSION" >"$DIST/install.yaml"
fi

# ---- 2. the Helm chart (Helm's own engine: helm-python-sdk, no helm binary)
if part chart; then
    say "the chart: helm package"
    "$PYTHON" - "$DIST" "$VERSION" <<'EOF'
import sys

import helm_python as helm

dist, version = sys.argv[1:]
print(helm.package("charts/llmsim-operator", destination=dist, version=version, app_version=version), file=sys.stderr)
EOF
fi

# ---- 3. sdist and wheel, then the compiled wheel from the sdist
if part wheels || part compiled; then
    say "sdist and wheel: python -m build"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    "$PYTHON" -m build --outdir "$work" . >"$work/build.log" 2>&1 || {
        tail -n 40 "$work/build.log" >&2
        die "python -m build failed"
    }
    sdist="$work/llmsim-$VERSION.tar.gz"
    [[ -f $sdist ]] || die "python -m build made no $(basename "$sdist")"
    if part wheels; then
        cp "$sdist" "$work/llmsim-$VERSION-py3-none-any.whl" "$DIST/"
    fi
    if part compiled; then
        # From the sdist, as a user's `pip install --no-binary` would, in this environment: mypyc
        # needs mypy (the dev extra) and a C compiler; about 2 minutes on two cores.
        say "the compiled wheel: LLMSIM_COMPILE=1 python -m build --wheel --no-isolation (mypyc)"
        tar -C "$work" -xzf "$sdist"
        mkdir "$work/compiled"
        (cd "$work/llmsim-$VERSION" && LLMSIM_COMPILE=1 "$PYTHON" -m build --wheel --no-isolation \
            --outdir "$work/compiled" . >"$work/compiled.log" 2>&1) || {
            tail -n 40 "$work/compiled.log" >&2
            die "the mypyc build failed"
        }
        compiled=("$work"/compiled/llmsim-"$VERSION"-cp*.whl)
        [[ -f ${compiled[0]} ]] || die "the mypyc build made no platform wheel: $(ls "$work/compiled")"
        cp "${compiled[@]}" "$DIST/"
    fi
fi

# ---- 4. both images as OCI archives
docker_engine() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }
if part images; then
    builder="${RELEASE_IMAGE_BUILDER:-}"
    if [[ -z $builder ]]; then
        if docker_engine; then
            builder=docker
        elif command -v buildah >/dev/null 2>&1; then
            builder=buildah
        else
            die "no image builder: neither a Docker engine (docker info) nor buildah"
        fi
    fi
    for image in llmsim:Dockerfile llmsim-operator:Dockerfile.operator; do
        name="${image%%:*}" dockerfile="${image#*:}"
        ref="$REGISTRY/$name:$VERSION" archive="$DIST/$name-$VERSION.oci.tar"
        say "$ref from $dockerfile with $builder"
        case "$builder" in
            docker)
                # `docker save` writes an OCI image layout since Docker 25 (with the docker
                # driver, buildx's own OCI exporter is not available).
                docker build --build-arg VERSION="$VERSION" -t "$ref" -f "$dockerfile" . >&2
                docker save -o "$archive" "$ref"
                ;;
            buildah)
                # --pull=missing: a base image already in the local store (as on a machine without a
                # registry) is used as it is.
                buildah bud --pull=missing --format oci --layers --build-arg VERSION="$VERSION" \
                    -t "$ref" -f "$dockerfile" . >&2
                buildah push --quiet "$ref" "oci-archive:$archive:$ref" >&2
                ;;
            *) die "RELEASE_IMAGE_BUILDER=$builder: docker or buildah" ;;
        esac
    done
fi

# ---- 5. checksums of everything in DIST
sums="$(cd "$DIST" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs -r sha256sum --)"
if [[ -n $sums ]]; then echo "$sums"; fi >"$DIST/SHA256SUMS"
say "done: $(cd "$DIST" && find . -maxdepth 1 -type f -printf '%f ' | tr -s ' ')"
