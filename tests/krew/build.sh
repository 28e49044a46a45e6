#!/usr/bin/env bash
# Builds krew and krew-index's manifest validator (`validate-krew-manifest`, in the krew module)
# from the module pinned in this folder and prints the folder that holds them on stdout: a
# per-machine cache keyed by the pins, ~/.cache/kubectl-vap/krew/<version>-<hash>/ (or
# $KREW_DIR; the hash covers this script too, so a change of its flags rebuilds).
# tests/krew_install.rs installs the release archive with them.
#
# - If KREW_ASSETS already holds `krew` and `validate-krew-manifest`, it is used and nothing is
#   built.
# - When the folder for these pins is complete, nothing is run at all (milliseconds).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module=sigs.k8s.io/krew
tools=(krew validate-krew-manifest)

log() { printf 'krew: %s\n' "$*" >&2; }

complete() {
  local t
  for t in "${tools[@]}"; do [ -x "$1/$t" ] || return 1; done
}

if [ -n "${KREW_ASSETS:-}" ]; then
  if complete "$KREW_ASSETS"; then
    log "using KREW_ASSETS=$KREW_ASSETS"
    printf '%s\n' "$KREW_ASSETS"
    exit 0
  fi
  log "KREW_ASSETS=$KREW_ASSETS lacks one of ${tools[*]}; building instead"
fi

version=$(awk -v m="$module" '$1==m {print $2; exit}' "$here/go.mod")
[ -n "$version" ] || { log "no $module in $here/go.mod"; exit 1; }
stamp_want=$(cat "$here/go.mod" "$here/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
cache=${KREW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubectl-vap/krew}
dir=${KREW_DIR:-$cache/$version-$stamp_want}
stamp_file=$dir/.stamp
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp_want" ] && complete "$dir"; then
  log "up to date in $dir ($version)"
  printf '%s\n' "$dir"
  exit 0
fi

command -v go >/dev/null || { log "go is not on PATH; install Go >= 1.26 or set KREW_ASSETS"; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
cd "$here"
start=$(date +%s)
# The stamp is written last: a folder without it (or with another) is rebuilt whole.
rm -f "$stamp_file"
mkdir -p "$dir"
for t in "${tools[@]}"; do
  log "building $t ($module/cmd/$t $version)"
  # The tag krew reports (`krew version`); krew skips its upgrade check for untagged builds,
  # and the test turns it off (KREW_NO_UPGRADE_CHECK) for tagged ones.
  go build -trimpath -ldflags "-s -w -X $module/internal/version.gitTag=$version" \
    -o "$dir/$t.tmp" "$module/cmd/$t"
  mv "$dir/$t.tmp" "$dir/$t"
done
printf '%s\n' "$stamp_want" >"$stamp_file"
log "built in $(( $(date +%s) - start ))s into $dir"
printf '%s\n' "$dir"
