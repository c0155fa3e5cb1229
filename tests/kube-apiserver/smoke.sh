#!/usr/bin/env bash
# End-to-end check of the harness: start the apiserver, use it with kubectl as
# admin and as the restricted user, run the informer program, restart over the
# kept etcd data, stop with SIGTERM. Exits non-zero on the first failure.
#
# Env: HARNESS_BIN_DIR  use these binaries instead of running build.sh
#      KUBECTL          kubectl to use (default: kubectl on PATH)
#      KEEP_TMP=1       keep the temp dir (logs, data) for inspection
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${HARNESS_BIN_DIR:-$("$here/build.sh")}"
kubectl="${KUBECTL:-kubectl}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/kube-apiserver-smoke.XXXXXX")"
data="$tmp/data"
api_pid=""
inf_pid=""

log() { printf 'smoke: %s\n' "$*" >&2; }
fail() {
  log "FAIL: $*"
  if [[ -f "$tmp/apiserver.err" ]]; then
    log "--- last apiserver stderr lines ---"
    tail -n 30 "$tmp/apiserver.err" >&2 || true
  fi
  exit 1
}
cleanup() {
  local rc=$?
  [[ -n "$inf_pid" ]] && kill "$inf_pid" 2>/dev/null || true
  [[ -n "$api_pid" ]] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null || true
  if [[ "${KEEP_TMP:-0}" == 1 || $rc -ne 0 ]]; then
    log "kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

# start_apiserver [extra harness flags]: start in the background, wait for the
# READY line (and the ready file), at most 120 s.
start_apiserver() {
  local t0=$SECONDS
  "$bin/apiserver" --data-dir "$data" "$@" >"$tmp/apiserver.out" 2>>"$tmp/apiserver.err" &
  api_pid=$!
  for _ in $(seq 1 1200); do
    if grep -q '^READY https://127.0.0.1:[0-9]*$' "$tmp/apiserver.out" 2>/dev/null; then
      [[ -s "$data/ready" ]] || fail "READY printed but $data/ready missing"
      log "apiserver ready in $((SECONDS - t0))s at $(cat "$tmp/apiserver.out")"
      return 0
    fi
    kill -0 "$api_pid" 2>/dev/null || fail "apiserver exited before ready"
    sleep 0.1
  done
  fail "apiserver not ready within 120s"
}

# stop_apiserver: SIGTERM, expect exit code 0 within 60 s.
stop_apiserver() {
  kill -TERM "$api_pid"
  local rc=0
  for _ in $(seq 1 600); do
    kill -0 "$api_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$api_pid" 2>/dev/null && fail "apiserver still running 60s after SIGTERM"
  wait "$api_pid" || rc=$?
  api_pid=""
  [[ $rc -eq 0 ]] || fail "apiserver exited with $rc after SIGTERM"
  [[ ! -e "$data/ready" ]] || fail "ready file left behind after stop"
  log "apiserver stopped cleanly (exit 0)"
}

admin() { "$kubectl" --kubeconfig "$data/admin.kubeconfig" "$@"; }
restricted() { "$kubectl" --kubeconfig "$data/restricted.kubeconfig" "$@"; }

# wait_for_line FILE REGEX [seconds]
wait_for_line() {
  local file=$1 re=$2 secs=${3:-30}
  for _ in $(seq 1 $((secs * 10))); do
    grep -qE "$re" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  log "--- $file ---"; cat "$file" >&2 || true
  fail "no line matching /$re/ in $file within ${secs}s"
}

log "binaries: $bin, temp dir: $tmp"
start_apiserver

# --- admin -----------------------------------------------------------------
admin get ns >/dev/null || fail "admin: get ns"
admin create namespace smoke >/dev/null || fail "admin: create namespace"
admin -n smoke create configmap cm1 --from-literal=k=v >/dev/null || fail "admin: create configmap"
# Pods must be creatable without a controller-manager (no default SA needed).
admin -n smoke apply -f - >/dev/null <<'EOF' || fail "admin: create pod"
apiVersion: v1
kind: Pod
metadata: {name: p1, labels: {app: smoke}}
spec:
  containers: [{name: c, image: example.invalid/none:1}]
EOF
phase="$(admin -n smoke get pod p1 -o jsonpath='{.status.phase}')"
[[ "$phase" == Pending ]] || fail "pod phase is '$phase', want Pending"
log "admin: namespace, configmap and pod created"

# --- restricted user ---------------------------------------------------------
restricted get pods -A >/dev/null || fail "restricted: get pods -A should be allowed"
if restricted get secrets -A >"$tmp/secrets.out" 2>&1; then
  fail "restricted: get secrets -A should be forbidden"
fi
grep -q Forbidden "$tmp/secrets.out" || { cat "$tmp/secrets.out" >&2; fail "restricted: expected Forbidden for secrets"; }
log "restricted: pods allowed, secrets Forbidden"

# --- informer ----------------------------------------------------------------
"$bin/informer" --kubeconfig "$data/restricted.kubeconfig" --resource configmaps --namespace smoke \
  --stats-every 500ms >"$tmp/informer.out" 2>"$tmp/informer.err" &
inf_pid=$!
wait_for_line "$tmp/informer.out" '"event":"synced"'
grep -qE '"event":"add","namespace":"smoke","name":"cm1",.*"initial":true' "$tmp/informer.out" \
  || { cat "$tmp/informer.out" >&2; fail "informer: no initial add for cm1"; }
admin -n smoke create configmap cm2 --from-literal=k=v >/dev/null || fail "admin: create cm2"
wait_for_line "$tmp/informer.out" '"event":"add","namespace":"smoke","name":"cm2",.*"initial":false'
admin -n smoke patch configmap cm2 -p '{"data":{"k":"v2"}}' >/dev/null || fail "admin: patch cm2"
wait_for_line "$tmp/informer.out" '"event":"update","namespace":"smoke","name":"cm2"'
admin -n smoke delete configmap cm2 >/dev/null || fail "admin: delete cm2"
wait_for_line "$tmp/informer.out" '"event":"delete","namespace":"smoke","name":"cm2",.*"finalStateUnknown":false'
wait_for_line "$tmp/informer.out" '"event":"stats","rssBytes":[1-9][0-9]*,"objects":[0-9]+'
kill -TERM "$inf_pid"
rc=0; wait "$inf_pid" || rc=$?
inf_pid=""
[[ $rc -eq 0 ]] || fail "informer exited with $rc after SIGTERM"
log "informer: initial add, synced, add/update/delete and stats seen; clean exit"

# --- restart over kept etcd data --------------------------------------------
stop_apiserver
start_apiserver --keep-etcd-data
[[ "$(admin -n smoke get configmap cm1 -o jsonpath='{.data.k}')" == v ]] || fail "cm1 lost across restart"
restricted get pods -A >/dev/null || fail "restricted: get pods -A after restart"
log "restart with --keep-etcd-data: cm1 still there"
stop_apiserver

# A fresh start (no --keep-etcd-data) must begin from an empty store.
start_apiserver
if admin -n smoke get configmap cm1 >/dev/null 2>&1; then fail "cm1 survived a start without --keep-etcd-data"; fi
stop_apiserver

log "PASS"
