#!/usr/bin/env bash
# Builds kube-apiserver, etcd and kubectl from the Go modules pinned in this folder and
# prints the folder that holds them on stdout. The folder is a per-machine cache keyed by
# the pins (~/.cache/kubectl-vap/kubeenv/<version>-<hash>/bin, or $KUBEENV_BIN), so a fresh
# clone on the same machine reuses the binaries instead of relinking them.
#
# - If KUBEBUILDER_ASSETS already holds the three binaries (setup-envtest), they are used
#   and nothing is built.
# - When the three binaries for these pins exist, nothing is run at all (a warm check costs
#   milliseconds, not a go build).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
names=(kube-apiserver etcd kubectl)

log() { printf 'kubeenv: %s\n' "$*" >&2; }

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  missing=0
  for n in "${names[@]}"; do [ -x "$KUBEBUILDER_ASSETS/$n" ] || missing=1; done
  if [ "$missing" = 0 ]; then
    log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
    printf '%s\n' "$KUBEBUILDER_ASSETS"
    exit 0
  fi
  log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks one of ${names[*]}; building instead"
fi

k8s_version=$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")
stamp_want=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
cache=${KUBEENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubectl-vap/kubeenv}
bin=${KUBEENV_BIN:-$cache/$k8s_version-$stamp_want/bin}
stamp_file=$bin/.stamp
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp_want" ]; then
  ok=1
  for n in "${names[@]}"; do [ -x "$bin/$n" ] || ok=0; done
  if [ "$ok" = 1 ]; then
    log "up to date in $bin ($k8s_version)"
    printf '%s\n' "$bin"
    exit 0
  fi
fi

command -v go >/dev/null || { log "go is not on PATH; install Go >= 1.26 or set KUBEBUILDER_ASSETS"; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
minor=$(echo "$k8s_version" | cut -d. -f2)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean"
mkdir -p "$bin"
cd "$here"
start=$(date +%s)
for pkg in k8s.io/kubernetes/cmd/kube-apiserver go.etcd.io/etcd/server/v3 k8s.io/kubernetes/cmd/kubectl; do
  case $pkg in
    */kube-apiserver) out=kube-apiserver ;;
    */kubectl) out=kubectl ;;
    *) out=etcd ;;
  esac
  log "building $out ($pkg)"
  go build -trimpath -ldflags "$ldflags" -o "$bin/$out.tmp" "$pkg"
  mv "$bin/$out.tmp" "$bin/$out"
done
printf '%s\n' "$stamp_want" >"$stamp_file"
log "built in $(( $(date +%s) - start ))s into $bin"
printf '%s\n' "$bin"
