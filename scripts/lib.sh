# Shared by the scripts in this folder. Source it; it only defines functions.

# The toolchain rust-toolchain.toml pins, with its components and targets (rustup does not
# install it on its own when RUSTUP_AUTO_INSTALL=0). Every ensure_* below starts with it.
ensure_toolchain() {
  local channel
  channel=$(sed -n 's/^channel = "\(.*\)"$/\1/p' rust-toolchain.toml)
  if ! rustup toolchain list 2>/dev/null | grep -q "^$channel-"; then
    echo "installing Rust $channel, which rust-toolchain.toml pins (once per machine)" >&2
    rustup toolchain install --no-self-update >&2
  fi
}

# rustfmt and clippy gate style in scripts/test; rustup's default profile has them, a minimal
# one does not.
ensure_lint_tools() {
  ensure_toolchain
  local installed
  installed=$(rustup component list --installed 2>/dev/null)
  for c in rustfmt clippy; do
    if ! grep -q "^$c" <<<"$installed"; then
      echo "installing the Rust component $c (once per machine)" >&2
      rustup component add "$c" >&2
    fi
  done
}

# Installs the wasm32-wasip2 target for the active toolchain if it is missing.
ensure_wasm_target() {
  ensure_toolchain
  if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "installing the Rust target wasm32-wasip2 (once per machine)" >&2
    rustup target add wasm32-wasip2 >&2
  fi
}

# The static binary (scripts/build-static): the musl target for the active toolchain, and musl-gcc
# (Debian's musl-tools) for the C code of ring, blake3 and psm.
ensure_musl_target() {
  ensure_toolchain
  if ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
    echo "installing the Rust target x86_64-unknown-linux-musl (once per machine)" >&2
    rustup target add x86_64-unknown-linux-musl >&2
  fi
  if ! command -v musl-gcc >/dev/null 2>&1; then
    echo "installing musl-tools (Debian package)" >&2
    if command -v apt-get >/dev/null 2>&1; then
      (apt-get update -qq && apt-get install -y -qq musl-tools) >&2 || true
    fi
    command -v musl-gcc >/dev/null 2>&1 || { echo "musl-gcc is required for the static binary: install it (apt-get install musl-tools)" >&2; exit 1; }
  fi
}

# kubectl drives the dev cluster in its tests; Debian packages it.
# Headless Chromium renders the admin status page in tests/tests/status_page.rs.
ensure_chromium() {
  if ! command -v chromium >/dev/null 2>&1; then
    echo "installing chromium (Debian package)" >&2
    if command -v apt-get >/dev/null 2>&1; then
      (apt-get update -qq && apt-get install -y -qq chromium) >&2 || true
    fi
    command -v chromium >/dev/null 2>&1 || { echo "chromium is required for the status page test: install it (apt-get install chromium)" >&2; exit 1; }
  fi
}

ensure_kubectl() {
  if ! command -v kubectl >/dev/null 2>&1; then
    echo "installing kubectl (Debian package)" >&2
    if command -v apt-get >/dev/null 2>&1; then
      (apt-get update -qq && (apt-get install -y -qq kubectl || apt-get install -y -qq kubernetes-client)) >&2 || true
    fi
    command -v kubectl >/dev/null 2>&1 || { echo "kubectl is required: install it (e.g. apt-get install kubernetes-client)" >&2; exit 1; }
  fi
}

# Python 3 (with venv and pip) and Node.js (with npm) build Python and JavaScript plugins; Debian
# packages them.
ensure_interpreters() {
  local missing=()
  command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3 python3-venv python3-pip)
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
  if ((${#missing[@]})); then
    echo "installing ${missing[*]} (Debian packages)" >&2
    if command -v apt-get >/dev/null 2>&1; then
      (apt-get update -qq && apt-get install -y -qq "${missing[@]}") >&2 || true
    fi
  fi
  command -v python3 >/dev/null 2>&1 || { echo "python3 (3.10+, with venv and pip) is required for Python plugins" >&2; exit 1; }
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo "node (18+) and npm are required for JavaScript plugins" >&2; exit 1; }
}

# Builds the kube-rs peer of the informer benchmarks (the `kube-informer` bench target, with the
# release profile like the host) and exports its path as WASMFORMER_KUBE_INFORMER.
build_kube_informer_peer() {
  local peer=(cargo bench --locked -p wasmformer-tests --bench kube-informer)
  nice "${peer[@]}" --no-run >&2
  WASMFORMER_KUBE_INFORMER=$("${peer[@]}" --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
  [[ -x "$WASMFORMER_KUBE_INFORMER" ]] || { echo "the kube-informer bench target was not built" >&2; exit 1; }
  export WASMFORMER_KUBE_INFORMER
}

# Removes the kube-apiserver harness's data directories (about 60 MB of etcd files each) that
# test runs left in the temporary directory: runs killed midway, and every run before the
# fixture removed its shared instance's at exit. Run before the build, which is when a full disk
# fails a run. A directory is the harness's if it holds the tokens.csv and etcd/ it writes; it
# is kept while a running process names it with --data-dir, and for ten minutes after its last
# change (another run may be setting it up).
remove_stale_apiserver_dirs() {
  local tmp=${1:-${TMPDIR:-/tmp}} running dir removed=0
  running=$(for f in /proc/[0-9]*/cmdline; do
    { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -A1 -x -e --data-dir | tail -n +2 || true
  done)
  while IFS= read -r -d '' dir; do
    [[ -f $dir/tokens.csv && -d $dir/etcd ]] || continue
    grep -qxF -e "$dir" <<<"$running" && continue
    rm -rf -- "$dir" && removed=$((removed + 1))
  done < <(find "$tmp" -mindepth 1 -maxdepth 1 -type d \
    \( -name '.tmp*' -o -name 'wasmformer-apiserver-*' \) -mmin +10 -print0)
  if ((removed > 0)); then
    echo "removed $removed kube-apiserver data directories earlier test runs left in $tmp" >&2
  fi
}
