#!/usr/bin/env bash
# Regenerates kubernetes.fds.gz: the protobuf descriptors of every Kubernetes API type, compiled
# by protoc from the generated.proto files of the k8s.io modules the kube-apiserver harness
# (tests/kube-apiserver) builds against, so that wasmformer-protobuf reads exactly the wire
# format of the version the harness runs and the dev cluster reports. And json-fields.json.gz:
# how the API server writes each of those fields as JSON (inline, omitempty, pointer…), read from
# the same modules' Go types by json_fields.go. Needs go and protoc (apt-get install protobuf-compiler).
#
# Usage: protobuf/proto/generate.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
harness="$here/../../tests/kube-apiserver"
root="$(mktemp -d)"
# json_fields.go imports the harness's modules, so it runs as a package inside its module.
gen="$(mktemp -d "$harness/.json-fields.XXXXXX")"
trap 'rm -rf "$root" "$gen"' EXIT

mkdir -p "$root/k8s.io"
for module in k8s.io/api k8s.io/apimachinery k8s.io/apiextensions-apiserver; do
  dir="$(cd "$harness" && go list -m -f '{{.Dir}}' "$module")"
  [[ -d "$dir" ]] || { echo "module $module not downloaded: run tests/kube-apiserver/build.sh" >&2; exit 1; }
  ln -s "$dir" "$root/$module"
done
cd "$root"
mapfile -t protos < <(find -L k8s.io -name generated.proto | LC_ALL=C sort)
protoc --include_imports --descriptor_set_out="$root/kubernetes.fds" -I "$root" "${protos[@]}"
gzip -9n <"$root/kubernetes.fds" >"$here/kubernetes.fds.gz"
echo "wrote $here/kubernetes.fds.gz from ${#protos[@]} files" >&2
cp "$here/json_fields.go" "$gen/main.go"
(cd "$harness" && go run "./$(basename "$gen")") | gzip -9n >"$here/json-fields.json.gz"
echo "wrote $here/json-fields.json.gz" >&2
