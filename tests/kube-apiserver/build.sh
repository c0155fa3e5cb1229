#!/usr/bin/env bash
# Builds the kube-apiserver harness binaries (apiserver, informer), cached by
# content: the cache key hashes go.mod, go.sum, every *.go file outside bench/
# and the Go version. A hit costs a few milliseconds; a cold build of
# k8s.io/kubernetes takes many minutes (see README.md).
#
# With --bench it builds the benchmark programs of bench/ (watchserver,
# handlers) instead, under a key of their own (go.mod, go.sum, bench/*.go), so
# that a change to them never rebuilds the API server the tests use.
#
# Usage: dir=$(tests/kube-apiserver/build.sh)           # last stdout line = bin dir
#        dir=$(tests/kube-apiserver/build.sh --bench)   # the bench programs' dir
# Env:   WASMFORMER_CACHE_DIR (default ~/.cache/wasmformer)
#        HARNESS_GO_BUILD_FLAGS (extra `go build` flags, e.g. "-p 1")
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${WASMFORMER_CACHE_DIR:-$HOME/.cache/wasmformer}/kube-apiserver"
if [[ "${1:-}" == --bench ]]; then
  # name:package of each binary; sources: what the key hashes besides go.mod/go.sum.
  bins=(watchserver:./bench/watchserver handlers:./bench/handlers)
  sources=(./bench -name '*.go')
  prefix=bench-
else
  bins=(apiserver:./cmd/apiserver informer:./cmd/informer)
  sources=(. -path ./bench -prune -o -path ./vendor -prune -o -name '*.go' -print)
  prefix=
fi

log() { printf 'kube-apiserver/build.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not installed (needed to build the harness)"
cd "$here"
[[ -f go.sum ]] || die "go.sum missing in $here"

# Stripped binaries (-s -w: no symbol table/DWARF; panics still show stacks)
# keep the apiserver at ~120 MB instead of ~180 MB.
build_flags=(-trimpath "-ldflags=-s -w")
# shellcheck disable=SC2206  # intentional word splitting of extra flags
build_flags+=(${HARNESS_GO_BUILD_FLAGS:-})

# Cache key: Go version + build flags + go.mod + go.sum + all Go sources.
go_version="$(go env GOVERSION)" || die "go env GOVERSION failed"
key="$(
  {
    printf 'go=%s\nflags=%s\n' "$go_version" "${build_flags[*]}"
    for f in go.mod go.sum $(find "${sources[@]}" | LC_ALL=C sort); do
      printf '== %s\n' "$f"
      cat "$f"
    done
  } | sha256sum | cut -c1-16
)"
key="$prefix$key"
out="$cache_root/$key"

have_all() {
  local b
  for b in "${bins[@]}"; do [[ -x "$out/${b%%:*}" ]] || return 1; done
}

if have_all; then
  log "cached: $out"
else
  log "building into $out (cold builds of k8s.io/kubernetes take a long time)"
  mkdir -p "$cache_root"
  tmp="$(mktemp -d "$cache_root/.build-$key.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  start=$SECONDS
  for b in "${bins[@]}"; do
    if ! GOFLAGS="${GOFLAGS:-} -mod=readonly" go build "${build_flags[@]}" -o "$tmp/${b%%:*}" "${b#*:}" >&2; then
      die "go build ${b#*:} failed (see the compiler output above)"
    fi
  done
  printf 'key=%s\n%s\nflags=%s\nbuilt=%s\n' "$key" "$go_version" "${build_flags[*]}" "$(date -u +%FT%TZ)" >"$tmp/BUILD-INFO"
  chmod 755 "$tmp"
  # Publish atomically: another concurrent build may have won the race.
  # An incomplete leftover (binary deleted by hand) is replaced.
  if [[ -d "$out" ]] && ! have_all; then rm -rf "$out"; fi
  if ! mv -T "$tmp" "$out" 2>/dev/null; then
    have_all || die "could not publish $out"
    rm -rf "$tmp"
  fi
  trap - EXIT
  log "built in $((SECONDS - start))s"
  # Keep the three newest builds of this kind (harness ~160 MB, bench programs ~65 MB); drop
  # older ones.
  find "$cache_root" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended \
    -regex ".*/${prefix}[0-9a-f]{16}" -printf '%T@ %p\n' | sort -rn | tail -n +4 | cut -d' ' -f2- |
    while read -r old; do log "pruning old build $old"; rm -rf "$old"; done
fi

# Stable pointer to the newest harness build: $cache_root/current -> <key>.
if [[ -z "$prefix" ]]; then
  ln -sfn "$key" "$cache_root/current.tmp.$$" && mv -Tf "$cache_root/current.tmp.$$" "$cache_root/current"
fi
echo "$out"
