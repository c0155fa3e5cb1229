//! Benchmark guest: a reconciler whose `reconcile` does nothing (it reads no object), so a call
//! costs only the crossing (the key lifted into the guest) and the host's per-call bookkeeping;
//! the handlers do nothing either, like `bench-empty`.

use wasmformer_guest::{Action, ObjectRef, Plugin, Reconciler, Result};

#[derive(Default)]
struct Noop;

impl Plugin for Noop {}

impl Reconciler for Noop {
    fn reconcile(&mut self, _key: &ObjectRef) -> Result<Action> {
        Ok(Action::done())
    }
}

wasmformer_guest::export!(Noop, reconciler);
