# Shared by the scripts in this folder. Source it; it only defines functions.

# Installs the wasm32-wasip2 target for the active toolchain if it is missing.
ensure_wasm_target() {
  if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "installing the Rust target wasm32-wasip2 (once per machine)" >&2
    rustup target add wasm32-wasip2 >&2
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
