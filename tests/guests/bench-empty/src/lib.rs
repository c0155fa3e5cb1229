//! Benchmark guest: every handler does nothing, so a call costs only the crossing (the object
//! lifted into the guest and dropped) and the host's per-call bookkeeping.

use wasmformer_guest::Plugin;

#[derive(Default)]
struct Empty;

impl Plugin for Empty {}

wasmformer_guest::export!(Empty);
