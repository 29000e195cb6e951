#!/usr/bin/env bash
# Build the local control plane's binaries from published Go modules and cache them:
#   kube-apiserver  (k8s.io/kubernetes, a wrapper go.mod pinning every k8s.io staging module)
#   etcd            (go.etcd.io/etcd/server/v3, a wrapper go.mod: etcd's own go.mod has replaces)
#   kwok            (sigs.k8s.io/kwok, go install)
# into ${FLOWPLAN_BIN_DIR:-~/.cache/flowplan/bin}/<name>-<version>. A binary already there is kept,
# so a second run costs nothing. Versions: adapters/kubernetes/versions.env.
# Needs Go (>= the toolchain k8s.io/kubernetes asks for) and the Go module proxy; nothing else.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck disable=SC1091
. "$here/../../adapters/kubernetes/versions.env"

export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null 2>&1 || { echo "build: go not found (install Go 1.25+ or put it on PATH)" >&2; exit 1; }
bin_dir="${FLOWPLAN_BIN_DIR:-$HOME/.cache/flowplan/bin}"
work="${FLOWPLAN_BUILD_DIR:-$HOME/.cache/flowplan/build}"
mkdir -p "$bin_dir" "$work"
export GOFLAGS="-trimpath"
export CGO_ENABLED=0
jobs="${FLOWPLAN_BUILD_JOBS:-2}"   # -p: the machines this runs on have 2 cores, shared
ldflags="-s -w"

stamp() { date +%s; }
report() { echo "build: $1 in $(( $(stamp) - $2 )) s"; }

# kube-apiserver -----------------------------------------------------------------------------------
target="$bin_dir/kube-apiserver-$KUBERNETES_VERSION"
if [ ! -x "$target" ]; then
  t0=$(stamp)
  staging="v0.${KUBERNETES_VERSION#v1.}"   # k8s.io/api etc. publish v0.X.Y for Kubernetes v1.X.Y
  d="$work/kube-apiserver-$KUBERNETES_VERSION"
  rm -rf "$d" && mkdir -p "$d" && cd "$d"
  modfile="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  gover="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$modfile")"
  {
    echo "module flowplan.local/kube-apiserver-build"
    echo
    echo "go $gover"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    # every `k8s.io/x => ./staging/src/k8s.io/x` of kubernetes' go.mod, pointed at the published x
    sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*$|\t\1 => \1 '"$staging"'|p' "$modfile"
    echo ")"
  } > go.mod
  go mod download k8s.io/kubernetes
  go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBERNETES_VERSION"
  minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  vpkg="k8s.io/component-base/version"
  go build -p "$jobs" -ldflags "$ldflags -X $vpkg.gitVersion=$KUBERNETES_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean" \
    -o "$target.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  mv "$target.tmp" "$target"
  report "kube-apiserver $KUBERNETES_VERSION" "$t0"
else
  echo "build: kube-apiserver $KUBERNETES_VERSION cached ($target)"
fi

# etcd ---------------------------------------------------------------------------------------------
target="$bin_dir/etcd-$ETCD_VERSION"
if [ ! -x "$target" ]; then
  t0=$(stamp)
  d="$work/etcd-$ETCD_VERSION"
  rm -rf "$d" && mkdir -p "$d" && cd "$d"
  printf 'module flowplan.local/etcd-build\n\ngo 1.24\n' > go.mod
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  go build -p "$jobs" -ldflags "$ldflags" -o "$target.tmp" go.etcd.io/etcd/server/v3
  mv "$target.tmp" "$target"
  report "etcd $ETCD_VERSION" "$t0"
else
  echo "build: etcd $ETCD_VERSION cached ($target)"
fi

# kwok ---------------------------------------------------------------------------------------------
target="$bin_dir/kwok-$KWOK_VERSION"
if [ ! -x "$target" ]; then
  t0=$(stamp)
  d="$work/kwok-$KWOK_VERSION"
  rm -rf "$d" && mkdir -p "$d"
  GOBIN="$d" go install -p "$jobs" -ldflags "$ldflags" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$d/kwok" "$target"
  report "kwok $KWOK_VERSION" "$t0"
else
  echo "build: kwok $KWOK_VERSION cached ($target)"
fi
echo "build: binaries in $bin_dir"
