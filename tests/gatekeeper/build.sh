#!/usr/bin/env bash
# Builds Gatekeeper's manager from the module pinned in this folder, copies Gatekeeper's own
# CRDs (its Helm chart's crds/ folder, from the same module) beside it, and prints the folder
# on stdout: a per-machine cache keyed by the pins,
# ~/.cache/kubectl-vap/gatekeeper/<version>-<hash>/ (or $GATEKEEPER_DIR), holding `manager`
# and `crds/*.yaml`.
#
# - If GATEKEEPER_ASSETS already holds `manager` and `crds/`, it is used and nothing is built.
# - When the folder for these pins is complete, nothing is run at all (milliseconds).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module=github.com/open-policy-agent/gatekeeper/v3

log() { printf 'gatekeeper: %s\n' "$*" >&2; }

complete() { [ -x "$1/manager" ] && compgen -G "$1/crds/*.yaml" >/dev/null; }

if [ -n "${GATEKEEPER_ASSETS:-}" ]; then
  if complete "$GATEKEEPER_ASSETS"; then
    log "using GATEKEEPER_ASSETS=$GATEKEEPER_ASSETS"
    printf '%s\n' "$GATEKEEPER_ASSETS"
    exit 0
  fi
  log "GATEKEEPER_ASSETS=$GATEKEEPER_ASSETS lacks manager or crds/*.yaml; building instead"
fi

version=$(awk -v m="$module" '$1==m {print $2; exit}' "$here/go.mod")
[ -n "$version" ] || { log "no $module in $here/go.mod"; exit 1; }
stamp_want=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
cache=${GATEKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubectl-vap/gatekeeper}
dir=${GATEKEEPER_DIR:-$cache/$version-$stamp_want}
stamp_file=$dir/.stamp
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp_want" ] && complete "$dir"; then
  log "up to date in $dir ($version)"
  printf '%s\n' "$dir"
  exit 0
fi

command -v go >/dev/null || { log "go is not on PATH; install Go >= 1.26 or set GATEKEEPER_ASSETS"; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
cd "$here"
start=$(date +%s)
# The stamp is written last: a folder without it (or with another) is rebuilt whole.
rm -f "$stamp_file"
mkdir -p "$dir"

src=$(go mod download -json "$module@$version" | awk -F'"' '$2=="Dir" {print $4}')
crds=
for c in "$src/charts/gatekeeper/crds" "$src/manifest_staging/charts/gatekeeper/crds"; do
  if compgen -G "$c/*.yaml" >/dev/null; then crds=$c; break; fi
done
[ -n "$crds" ] || { log "no charts/gatekeeper/crds in $src"; exit 1; }
rm -rf "$dir/crds.tmp"
mkdir "$dir/crds.tmp"
cp "$crds"/*.yaml "$dir/crds.tmp/"
chmod -R u+w "$dir/crds.tmp" # the module cache is read-only
rm -rf "$dir/crds"
mv "$dir/crds.tmp" "$dir/crds"
log "copied $(ls "$dir/crds" | wc -l) CRDs from $crds"

log "building manager ($module $version)"
go build -trimpath -ldflags "-s -w -X $module/pkg/version.Version=$version" \
  -o "$dir/manager.tmp" "$module"
mv "$dir/manager.tmp" "$dir/manager"
printf '%s\n' "$stamp_want" >"$stamp_file"
log "built in $(( $(date +%s) - start ))s into $dir"
printf '%s\n' "$dir"
