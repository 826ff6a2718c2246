#!/usr/bin/env bash
# Provide a Kubernetes control plane for integration tests, following the
# envtest convention: a directory (KUBEBUILDER_ASSETS) holding the binaries
# etcd, kube-apiserver, kube-controller-manager and kubectl.
#
# Prints on stdout ONLY the absolute path of the assets directory; every log
# line goes to stderr. Idempotent: a second run reuses the cache.
#
# Order of preference:
#   1. $KUBEBUILDER_ASSETS, when it already holds working binaries;
#   2. `setup-envtest use -p path 1.20.x`, when setup-envtest is on PATH
#      (needs the internet; failures fall through);
#   3. a build of Debian's `kubernetes` source package (1.20.2) with
#      golang-1.19-go, cached in
#      ${LLMSIM_CACHE_DIR:-$HOME/.cache/llmsim}/envtest/1.20.2-debian-r2/;
#      but when the local cluster's binaries (the shared k8s scripts' build of
#      the same source, in ${K8S_BIN:-/tmp/k8s-bin}) are already there, copies of
#      its kube-apiserver and kube-controller-manager instead.
#
# Kubernetes is built once per machine: when this script builds and the shared
# k8s scripts exist (hack/k8s-scripts.sh finds them: `make e2e` will start the
# local cluster), the same `go build` also makes kube-scheduler, kubelet and
# kube-proxy and installs the cluster's five binaries into K8S_BIN, so
# cluster-up.sh finds them and builds nothing.
#
# Usage: export KUBEBUILDER_ASSETS="$(hack/envtest-assets.sh)"
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

K8S_VERSION=1.20.2
GO_PKG=golang-1.19-go
GO_ROOT=/usr/lib/go-1.19
CACHE_ROOT="${LLMSIM_CACHE_DIR:-${HOME:-/root}/.cache/llmsim}"
# The suffix names the build recipe: change it when the recipe changes, so old caches are rebuilt.
ASSETS_DIR="${CACHE_ROOT}/envtest/${K8S_VERSION}-debian-r2"
BINARIES=(etcd kube-apiserver kube-controller-manager kubectl)
REQUIRED=(etcd kube-apiserver kube-controller-manager)
# The local cluster's binaries (shared k8s scripts: cluster-up.sh checks these five in K8S_BIN).
K8S_BIN="${K8S_BIN:-/tmp/k8s-bin}"
CLUSTER_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

# e2e/run.sh sets LLMSIM_K8S_CLUSTER=1: it needs the local cluster's binaries in K8S_BIN afterwards, from
# this one build (the shared scripts' cluster-up.sh then finds them and builds nothing).
cluster_missing() {
    local b
    [[ "${LLMSIM_K8S_CLUSTER:-0}" == 1 ]] || return 1
    for b in "${CLUSTER_BINARIES[@]}"; do
        [[ -x "$K8S_BIN/$b" ]] || return 0
    done
    return 1
}

log() { printf '[envtest-assets] %s\n' "$*" >&2; }
die() {
    printf '[envtest-assets] ERROR: %s\n' "$*" >&2
    exit 1
}

# True when $1 holds every required binary and each one runs --version.
assets_ok() {
    local dir="$1" b
    [[ -n "$dir" && -d "$dir" ]] || return 1
    for b in "${REQUIRED[@]}"; do
        [[ -x "$dir/$b" ]] || return 1
        "$dir/$b" --version >/dev/null 2>&1 || return 1
    done
    return 0
}

emit() {
    local dir
    dir="$(cd "$1" && pwd -P)"
    log "assets: $dir"
    printf '%s\n' "$dir"
    exit 0
}

# --- 1. an existing KUBEBUILDER_ASSETS ---------------------------------------
if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
    if assets_ok "$KUBEBUILDER_ASSETS" && ! cluster_missing; then
        emit "$KUBEBUILDER_ASSETS"
    fi
    log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS does not hold working ${REQUIRED[*]}; looking elsewhere"
fi

# --- 2. setup-envtest --------------------------------------------------------
if command -v setup-envtest >/dev/null 2>&1; then
    log "trying setup-envtest use -p path 1.20.x"
    if ! cluster_missing && dir="$(timeout 120 setup-envtest use -p path 1.20.x 2>/dev/null)" && assets_ok "$dir"; then
        emit "$dir"
    fi
    log "setup-envtest could not provide the assets; building from Debian source"
fi

# --- 3. cache or build from Debian source ------------------------------------
if assets_ok "$ASSETS_DIR" && ! cluster_missing; then
    emit "$ASSETS_DIR"
fi

# True when K8S_BIN holds the local cluster's kube-apiserver and kube-controller-manager, and they run.
cluster_build_ok() {
    local b
    for b in kube-apiserver kube-controller-manager; do
        [[ -x "$K8S_BIN/$b" ]] && "$K8S_BIN/$b" --version >/dev/null 2>&1 || return 1
    done
}

mkdir -p "$ASSETS_DIR"
# Serialise concurrent runs on the same cache.
exec 9>"${ASSETS_DIR}/.lock"
if command -v flock >/dev/null 2>&1; then
    log "waiting for lock ${ASSETS_DIR}/.lock"
    flock 9
    if assets_ok "$ASSETS_DIR" && ! cluster_missing; then
        emit "$ASSETS_DIR"
    fi
fi

# The local cluster's build of the same source (with the same reflect2 fix): copy, don't build again.
if [[ -x /usr/bin/etcd ]] && cluster_build_ok; then
    log "reusing the local cluster's build in $K8S_BIN"
    for b in kube-apiserver kube-controller-manager; do
        install -m 0755 "$K8S_BIN/$b" "$ASSETS_DIR/$b.tmp"
        mv -f "$ASSETS_DIR/$b.tmp" "$ASSETS_DIR/$b"
    done
    ln -sfn /usr/bin/etcd "$ASSETS_DIR/etcd"
    assets_ok "$ASSETS_DIR" && emit "$ASSETS_DIR"
    log "the copies do not run; building"
fi

# Build the cluster's binaries too when this machine will run the local cluster and lacks them.
EXTRA_CMDS=()
if [[ "${LLMSIM_ENVTEST_ONLY:-0}" != 1 ]] && "$HERE/k8s-scripts.sh" >/dev/null 2>&1; then
    for b in "${CLUSTER_BINARIES[@]}"; do
        if [[ ! -x "$K8S_BIN/$b" ]]; then
            EXTRA_CMDS=(k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
            log "the shared k8s scripts are here and $K8S_BIN lacks $b: building the local cluster's binaries too"
            break
        fi
    done
fi

START=$SECONDS
SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to apt-get install build dependencies"
    SUDO=(sudo)
fi

apt_install() {
    log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y --no-install-recommends "$@" >&2 ||
        die "apt-get install $* failed"
}

apt_updated=0
apt_update() {
    if [[ $apt_updated == 0 ]]; then
        log "apt-get update"
        "${SUDO[@]}" apt-get update -q >&2 || die "apt-get update failed"
        apt_updated=1
    fi
}

# Build/run dependencies.
missing=()
[[ -x /usr/bin/etcd ]] || missing+=(etcd-server)
[[ -x "$GO_ROOT/bin/go" ]] || missing+=("$GO_PKG")
command -v dpkg-source >/dev/null 2>&1 || missing+=(dpkg-dev)
command -v xz >/dev/null 2>&1 || missing+=(xz-utils)
command -v patch >/dev/null 2>&1 || missing+=(patch)
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
[[ -f $REFLECT2/go_above_118.go ]] || missing+=(golang-github-modern-go-reflect2-dev)
if ((${#missing[@]})); then
    if ! apt-cache show "${missing[0]}" >/dev/null 2>&1; then
        apt_update
    fi
    apt_install "${missing[@]}"
fi
[[ -x /usr/bin/etcd ]] || die "/usr/bin/etcd missing after installing etcd-server"
[[ -x "$GO_ROOT/bin/go" ]] || die "$GO_ROOT/bin/go missing after installing $GO_PKG"

# deb-src entries, needed by `apt-get source`.
if ! apt-cache showsrc kubernetes 2>/dev/null | grep -q '^Package: kubernetes'; then
    log "adding deb-src entries"
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
            "${SUDO[@]}" tee /etc/apt/sources.list.d/debian-src.sources >/dev/null
    elif [[ -f /etc/apt/sources.list ]]; then
        sed -n 's/^deb /deb-src /p' /etc/apt/sources.list |
            "${SUDO[@]}" tee /etc/apt/sources.list.d/debian-src.list >/dev/null
    else
        die "no apt sources found to derive deb-src entries from"
    fi
    apt_updated=0
    apt_update
    apt-cache showsrc kubernetes 2>/dev/null | grep -q '^Package: kubernetes' ||
        die "apt-cache showsrc kubernetes finds nothing even with deb-src entries"
fi

WORK="${ASSETS_DIR}/work"
rm -rf "$WORK"
mkdir -p "$WORK/dl" "$WORK/gopath/src/k8s.io" "$WORK/bin"
cleanup_work() {
    local rc=$?
    if [[ $rc != 0 ]]; then
        log "FAILED (exit $rc) after $((SECONDS - START))s; work dir removed: $WORK"
    fi
    rm -rf "$WORK"
}
trap cleanup_work EXIT

# Fetch and unpack the source (with Debian's patches applied).
log "fetching Debian source package kubernetes"
(cd "$WORK/dl" && apt-get source --download-only kubernetes >&2) || die "apt-get source kubernetes failed"
dsc="$(ls "$WORK"/dl/kubernetes_*.dsc | head -n1)"
[[ -n "$dsc" ]] || die "no .dsc downloaded"
src_version="$(sed -n 's/^Version: //p' "$dsc")"
log "source version: $src_version"
case "$src_version" in
*"$K8S_VERSION"-*) ;;
*) die "Debian's kubernetes source is $src_version, expected upstream $K8S_VERSION" ;;
esac
SRC="$WORK/gopath/src/k8s.io/kubernetes"
dpkg-source --no-check -x "$dsc" "$SRC" >&2 || die "dpkg-source -x failed"
# reflect2 1.0.1, vendored by 1.20, faults under Go >= 1.18 (kube-apiserver dies with SIGSEGV on the
# first custom-resource write): swap in Debian's reflect2 1.0.2.
[[ -f $REFLECT2/go_above_118.go ]] || die "reflect2 1.0.2 missing: install golang-github-modern-go-reflect2-dev"
rm -rf "$SRC/vendor/github.com/modern-go/reflect2"
cp -r "$REFLECT2" "$SRC/vendor/github.com/modern-go/reflect2"
rm -f "$SRC/vendor/github.com/modern-go/reflect2/go.mod"
rm -rf "$WORK/dl"

export GOPATH="$WORK/gopath"
export GOCACHE="$WORK/gocache"
export GO111MODULE=off
export CGO_ENABLED=0
export GOFLAGS=
export GOTOOLCHAIN=local
export PATH="$GO_ROOT/bin:$PATH"
unset GOROOT GOBIN
log "$(go version)"

# Generate pkg/generated/openapi/zz_generated.openapi.go (not shipped).
cd "$SRC"
log "building openapi-gen"
go build -o "$WORK/bin/openapi-gen" k8s.io/kubernetes/vendor/k8s.io/kube-openapi/cmd/openapi-gen >&2 ||
    die "go build openapi-gen failed"

# Same selection as build/root/Makefile.generated_files (KUBE target):
# every Go dir tagged +k8s:openapi-gen=, staging/src named as vendor/,
# excluding code-generator and sample-apiserver.
input_dirs="$(
    set +o pipefail
    grep -rl --include='*.go' --exclude-dir=vendor --exclude-dir=_output --exclude-dir=.git --exclude-dir=.go \
        '+k8s:openapi-gen=' . |
        xargs grep -l '^// *+k8s:' |
        sed -e 's|^\./||' -e 's|^staging/src/|vendor/|' |
        grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' |
        xargs -n1 dirname | LC_ALL=C sort -u |
        sed 's|^|k8s.io/kubernetes/|' | paste -sd, -
)"
[[ -n "$input_dirs" ]] || die "found no +k8s:openapi-gen= packages"
log "openapi-gen over $(tr ',' '\n' <<<"$input_dirs" | wc -l) packages"
"$WORK/bin/openapi-gen" \
    --logtostderr \
    -i "$input_dirs" \
    -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi \
    -h hack/boilerplate/boilerplate.generatego.txt \
    -r "$WORK/openapi-violations.report" \
    -o "$GOPATH/src" >&2 || die "openapi-gen failed"
[[ -s pkg/generated/openapi/zz_generated.openapi.go ]] || die "openapi-gen produced no zz_generated.openapi.go"

# Build the binaries.
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    for prefix in "" "k8s.io/kubernetes/vendor/"; do
        ldflags+=" -X ${prefix}${p}.gitVersion=v${K8S_VERSION}"
        ldflags+=" -X ${prefix}${p}.gitMajor=${K8S_VERSION%%.*}"
        minor="${K8S_VERSION#*.}"
        ldflags+=" -X ${prefix}${p}.gitMinor=${minor%%.*}"
        ldflags+=" -X ${prefix}${p}.gitTreeState=archive"
        ldflags+=" -X ${prefix}${p}.buildDate=${build_date}"
    done
done
log "go build kube-apiserver kube-controller-manager kubectl ${EXTRA_CMDS[*]##*/} (once per machine; 6-15 min on 2 cores)"
# go build -v names each package as it compiles it: a line every 30 s says how far the build is.
go build -v -ldflags "$ldflags" -o "$WORK/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl "${EXTRA_CMDS[@]}" 2>"$WORK/build.log" &
build_pid=$!
build_start=$SECONDS
while kill -0 "$build_pid" 2>/dev/null; do
    sleep 5
    if (((SECONDS - build_start) % 30 < 5)); then
        log "go build: $(wc -l <"$WORK/build.log") packages compiled, $((SECONDS - build_start)) s"
    fi
done
if ! wait "$build_pid"; then
    grep -v '^k8s.io/' "$WORK/build.log" | tail -n 40 >&2
    die "go build of the Kubernetes binaries failed"
fi
log "go build: $(wc -l <"$WORK/build.log") packages in $((SECONDS - build_start)) s"
cd /

for b in kube-apiserver kube-controller-manager kubectl; do
    install -m 0755 "$WORK/bin/$b" "$ASSETS_DIR/$b.tmp"
    mv -f "$ASSETS_DIR/$b.tmp" "$ASSETS_DIR/$b"
done
ln -sfn /usr/bin/etcd "$ASSETS_DIR/etcd"
if ((${#EXTRA_CMDS[@]})); then
    mkdir -p "$K8S_BIN"
    for b in "${CLUSTER_BINARIES[@]}"; do
        [[ -x "$K8S_BIN/$b" ]] && continue
        install -m 0755 "$WORK/bin/$b" "$K8S_BIN/$b.tmp"
        mv -f "$K8S_BIN/$b.tmp" "$K8S_BIN/$b"
    done
    log "installed the local cluster's binaries into $K8S_BIN (cluster-up.sh will not build them)"
fi

assets_ok "$ASSETS_DIR" || die "built binaries in $ASSETS_DIR do not run --version"
for b in "${BINARIES[@]}"; do
    if [[ "$b" == kubectl ]]; then
        log "$b: $("$ASSETS_DIR/$b" version --client --short 2>/dev/null || true)"
    else
        log "$b: $("$ASSETS_DIR/$b" --version 2>&1 | head -n1)"
    fi
done
log "built in $((SECONDS - START))s"
emit "$ASSETS_DIR"
