//! The classic informer example: logs every Pod added, updated and deleted.

use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default)]
pub struct PodLogger;

impl Plugin for PodLogger {
    fn on_add(&mut self, pod: &Object, _initial: bool) -> Result<()> {
        info!("New Pod Added to Store: {}", pod.name());
        Ok(())
    }

    fn on_update(&mut self, old: &Object, new: &Object) -> Result<()> {
        info!("{} Pod Updated to {}", old.name(), new.name());
        Ok(())
    }

    fn on_delete(&mut self, pod: &Object, _final_state_unknown: bool) -> Result<()> {
        info!("Pod Deleted from Store: {}", pod.name());
        Ok(())
    }
}

wasmformer_guest::export!(PodLogger);
