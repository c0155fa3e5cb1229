# Shared by the scripts in this folder. Source it; it only defines functions.

# Installs the wasm32-wasip2 target for the active toolchain if it is missing.
ensure_wasm_target() {
  if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "installing the Rust target wasm32-wasip2 (once per machine)" >&2
    rustup target add wasm32-wasip2 >&2
  fi
}
