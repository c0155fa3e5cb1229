#!/usr/bin/env bash
# Builds the CNCF distribution registry (github.com/distribution/distribution/v3, cmd/registry)
# from the Go module proxy for the OCI plugin tests, cached by content: the cache key hashes
# go.mod, go.sum, the build flags and the Go version. A hit costs a few milliseconds; a cold build
# takes a few minutes on 2 cores.
#
# Usage: bin=$(tests/oci-registry/build.sh)   # last stdout line = the registry binary
# Env:   WASMFORMER_CACHE_DIR (default ~/.cache/wasmformer)
#        HARNESS_GO_BUILD_FLAGS (extra `go build` flags, e.g. "-p 1")
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${WASMFORMER_CACHE_DIR:-$HOME/.cache/wasmformer}/oci-registry"

log() { printf 'oci-registry/build.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not installed (needed to build the registry)"
cd "$here"
[[ -f go.sum ]] || die "go.sum missing in $here"

build_flags=(-trimpath "-ldflags=-s -w")
# shellcheck disable=SC2206  # intentional word splitting of extra flags
build_flags+=(${HARNESS_GO_BUILD_FLAGS:-})

go_version="$(go env GOVERSION)" || die "go env GOVERSION failed"
key="$(
  {
    printf 'go=%s\nflags=%s\n' "$go_version" "${build_flags[*]}"
    for f in go.mod go.sum; do
      printf '== %s\n' "$f"
      cat "$f"
    done
  } | sha256sum | cut -c1-16
)"
out="$cache_root/$key"

if [[ -x "$out/registry" ]]; then
  log "cached: $out"
else
  log "building into $out"
  mkdir -p "$cache_root"
  tmp="$(mktemp -d "$cache_root/.build-$key.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  start=$SECONDS
  if ! GOFLAGS="${GOFLAGS:-} -mod=readonly" go build "${build_flags[@]}" -o "$tmp/registry" \
    github.com/distribution/distribution/v3/cmd/registry >&2; then
    die "go build of the registry failed (see the compiler output above)"
  fi
  printf 'key=%s\n%s\nflags=%s\nbuilt=%s\n' "$key" "$go_version" "${build_flags[*]}" "$(date -u +%FT%TZ)" >"$tmp/BUILD-INFO"
  chmod 755 "$tmp"
  # Publish atomically: a concurrent build may have won the race.
  if [[ -d "$out" && ! -x "$out/registry" ]]; then rm -rf "$out"; fi
  if ! mv -T "$tmp" "$out" 2>/dev/null; then
    [[ -x "$out/registry" ]] || die "could not publish $out"
    rm -rf "$tmp"
  fi
  trap - EXIT
  log "built in $((SECONDS - start))s"
  # Keep the two newest builds; drop older ones.
  find "$cache_root" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended \
    -regex '.*/[0-9a-f]{16}' -printf '%T@ %p\n' | sort -rn | tail -n +3 | cut -d' ' -f2- |
    while read -r old; do log "pruning old build $old"; rm -rf "$old"; done
fi
echo "$out/registry"
