//! The `retry` import (since 0.3.1): a handler marks its failure as one to retry.

use super::HostState;
use crate::plugin::bindings::wasmformer::plugin::retry;

impl retry::Host for HostState {
    fn request(&mut self) -> wasmtime::Result<()> {
        self.check_deadline()?;
        if !self.in_init {
            self.retry_requested = true;
        }
        Ok(())
    }
}
