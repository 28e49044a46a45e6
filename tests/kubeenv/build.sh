#!/usr/bin/env bash
# Builds kube-apiserver, etcd, kubectl and kube-controller-manager from the Go modules pinned
# in this folder and prints the folder that holds them on stdout. The folder is a per-machine
# cache keyed by the pins (~/.cache/kubectl-vap/kubeenv/<version>-<hash>/bin, or $KUBEENV_BIN),
# so a fresh clone on the same machine reuses the binaries instead of relinking them.
#
# KUBEENV_VERSION picks the Kubernetes minor (`1.30`): the main one is go.mod's here (1.36),
# the others each have a module of their own in ./<minor>/ (1.30, 1.37), which pins only
# kube-apiserver. Their folder holds that kube-apiserver plus the main folder's etcd and
# kubectl (hard links; built first if missing): one etcd (3.6.8) serves every version.
#
# - If KUBEBUILDER_ASSETS already holds kube-apiserver, etcd and kubectl (setup-envtest), they
#   are used and nothing is built. setup-envtest ships no kube-controller-manager: the tests
#   that need one fail with instructions unless TEST_ASSET_KUBE_CONTROLLER_MANAGER is set.
# - When every binary for these pins exists, nothing is run at all (a warm check costs
#   milliseconds, not a go build).
# - Only missing binaries are built. A binary from another cache folder (older pins) is
#   reused when `go version -m` shows it was built by this Go, with these flags, from exactly
#   the modules these pins select for it: adding a binary to go.mod relinks nothing else.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# name:package, in build order (kube-controller-manager last: the others are needed more often).
targets=(
  kube-apiserver:k8s.io/kubernetes/cmd/kube-apiserver
  etcd:go.etcd.io/etcd/server/v3
  kubectl:k8s.io/kubernetes/cmd/kubectl
  kube-controller-manager:k8s.io/kubernetes/cmd/kube-controller-manager
)
envtest_names=(kube-apiserver etcd kubectl)

log() { printf 'kubeenv: %s\n' "$*" >&2; }

main_minor=$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$here/go.mod" | cut -d. -f1-2 | tr -d v)
want=${KUBEENV_VERSION:-$main_minor}
if [ "$want" = "$main_minor" ]; then
  module=$here
elif [[ "$want" =~ ^1\.[0-9]+$ ]] && [ -f "$here/$want/go.mod" ]; then
  module=$here/$want
else
  known=$(cd "$here" && ls -d 1.*/ 2>/dev/null | tr -d / | tr '\n' ' ')
  log "KUBEENV_VERSION=$want: no module for it (known: $main_minor ${known% })"
  exit 1
fi

# Whether $1/kube-apiserver is Kubernetes $want (a folder from elsewhere may hold another).
is_wanted_version() {
  [ -z "${KUBEENV_VERSION:-}" ] && return 0
  "$1/kube-apiserver" --version 2>/dev/null | grep -q "^Kubernetes v$want\."
}

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  missing=0
  for n in "${envtest_names[@]}"; do [ -x "$KUBEBUILDER_ASSETS/$n" ] || missing=1; done
  if [ "$missing" = 0 ] && ! is_wanted_version "$KUBEBUILDER_ASSETS"; then
    log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS holds another version than KUBEENV_VERSION=$want; building instead"
  elif [ "$missing" = 0 ]; then
    log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
    # (Only the main version's tests start one: a matrix folder never has it.)
    if [ "$module" = "$here" ] && [ ! -x "$KUBEBUILDER_ASSETS/kube-controller-manager" ] &&
      [ -z "${TEST_ASSET_KUBE_CONTROLLER_MANAGER:-}" ]; then
      log "it has no kube-controller-manager: tests that need one will fail (unset KUBEBUILDER_ASSETS to build it, or set TEST_ASSET_KUBE_CONTROLLER_MANAGER)"
    fi
    printf '%s\n' "$KUBEBUILDER_ASSETS"
    exit 0
  fi
  [ "$missing" = 0 ] || log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks one of ${envtest_names[*]}; building instead"
fi

# Another version: the main folder first (its etcd and kubectl are linked, not rebuilt).
linked=()
if [ "$module" != "$here" ]; then
  main_bin=$(KUBEENV_VERSION= KUBEENV_BIN= KUBEBUILDER_ASSETS= bash "$here/build.sh")
  targets=(kube-apiserver:k8s.io/kubernetes/cmd/kube-apiserver)
  linked=(etcd kubectl)
fi

k8s_version=$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$module/go.mod")
stamp_want=$(cat "$module/go.mod" "$module/go.sum" | sha256sum | cut -c1-16)
if [ ${#linked[@]} -gt 0 ]; then
  # The linked binaries come from the main pins: they are part of this folder's key.
  stamp_want=$( (printf '%s\n' "$stamp_want"; cat "$main_bin/.stamp") | sha256sum | cut -c1-16)
fi
cache=${KUBEENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubectl-vap/kubeenv}
bin=${KUBEENV_BIN:-$cache/$k8s_version-$stamp_want/bin}
minor=$(echo "$k8s_version" | cut -d. -f2)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean"
# How this script builds (flags `go version -m` cannot show: -trimpath hides -ldflags), kept
# beside the binaries. Folders from before .recipe existed were built with the one recipe
# build.sh had then, spelled out here so that changing the flags stops their reuse.
recipe="go build -trimpath -ldflags=$ldflags CGO_ENABLED=0"
legacy_recipe="go build -trimpath -ldflags=-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean CGO_ENABLED=0"
# .stamp holds the hash of the pins, .recipe the way, every binary in $bin was built with (or
# verified against).
stamp_file=$bin/.stamp
stamp_ok=0
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp_want" ] &&
  [ "$(cat "$bin/.recipe" 2>/dev/null || printf '%s\n' "$legacy_recipe")" = "$recipe" ]; then
  stamp_ok=1
  ok=1
  for t in "${targets[@]}"; do [ -x "$bin/${t%%:*}" ] || ok=0; done
  for n in "${linked[@]}"; do [ -x "$bin/$n" ] || ok=0; done
  if [ "$ok" = 1 ]; then
    log "up to date in $bin ($k8s_version)"
    printf '%s\n' "$bin"
    exit 0
  fi
fi

command -v go >/dev/null || { log "go is not on PATH; install Go >= 1.26 or set KUBEBUILDER_ASSETS"; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
mkdir -p "$bin"
cd "$module"
if [ "$stamp_ok" = 0 ]; then
  # Binaries from other pins or flags (a reused $KUBEENV_BIN) must not pass for these.
  for t in "${targets[@]}"; do rm -f "$bin/${t%%:*}"; done
  for n in "${linked[@]}"; do rm -f "$bin/$n"; done
  printf '%s\n' "$stamp_want" >"$stamp_file"
  printf '%s\n' "$recipe" >"$bin/.recipe"
fi

# The modules (path version, after replacements) a binary embeds, and those these pins select
# for its package: equal sets, same Go, same recipe = the binary a build would produce
# (the build is reproducible: byte-identical binaries).
embedded_modules() {
  go version -m "$1" | awk -F'\t' '
    $2=="mod" || $2=="dep" { if (p != "") print p; p = $3 " " $4 }
    $2=="=>"               { p = $3 " " $4 }
    END                    { if (p != "") print p }' | sort -u
}
selected_modules() {
  go list -deps -f '{{with .Module}}{{if not .Main}}{{with .Replace}}{{.Path}} {{.Version}}{{else}}{{.Path}} {{.Version}}{{end}}{{end}}{{end}}' "$1" | awk NF | sort -u
}
reusable() { # <binary> <package>
  local info old_recipe
  old_recipe=$(cat "$(dirname "$1")/.recipe" 2>/dev/null || printf '%s\n' "$legacy_recipe")
  [ "$old_recipe" = "$recipe" ] || return 1
  info=$(go version -m "$1" 2>/dev/null) || return 1
  [ "$(head -1 <<<"$info" | awk '{print $2}')" = "$(go env GOVERSION)" ] || return 1
  grep -qxF "$(printf '\tbuild\tGOOS=%s' "$(go env GOOS)")" <<<"$info" || return 1
  grep -qxF "$(printf '\tbuild\tGOARCH=%s' "$(go env GOARCH)")" <<<"$info" || return 1
  [ "$(embedded_modules "$1")" = "$(selected_modules "$2")" ]
}

start=$(date +%s)
built=()
for t in "${targets[@]}"; do
  out=${t%%:*} pkg=${t#*:}
  [ -x "$bin/$out" ] && continue
  reused=
  for old in "$cache"/*/bin/"$out"; do
    [ -x "$old" ] && [ "$old" != "$bin/$out" ] || continue
    if reusable "$old" "$pkg"; then
      # A hard link where possible: removing the old folder later leaves this one intact.
      ln -f "$old" "$bin/$out.tmp" 2>/dev/null || cp "$old" "$bin/$out.tmp"
      mv "$bin/$out.tmp" "$bin/$out"
      log "reused $out from $old (same Go, flags and modules)"
      reused=1
      break
    fi
  done
  [ -n "$reused" ] && continue
  log "building $out ($pkg)"
  t0=$(date +%s)
  go build -trimpath -ldflags "$ldflags" -o "$bin/$out.tmp" "$pkg"
  mv "$bin/$out.tmp" "$bin/$out"
  log "built $out in $(( $(date +%s) - t0 ))s"
  built+=("$out")
done
for n in "${linked[@]}"; do
  [ -x "$bin/$n" ] && continue
  ln -f "$main_bin/$n" "$bin/$n.tmp" 2>/dev/null || cp "$main_bin/$n" "$bin/$n.tmp"
  mv "$bin/$n.tmp" "$bin/$n"
  log "linked $n from $main_bin"
done
log "built in $(( $(date +%s) - start ))s into $bin (${built[*]:-nothing: all reused})"
printf '%s\n' "$bin"
