//! {{name}}: a wasmformer plugin. Logs every object added, updated and deleted.

use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default)]
pub struct {{class}};

impl Plugin for {{class}} {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        info!("New Pod Added to Store: {}", obj.name());
        Ok(())
    }

    fn on_update(&mut self, old: &Object, new: &Object) -> Result<()> {
        info!("{} Pod Updated to {}", old.name(), new.name());
        Ok(())
    }

    fn on_delete(&mut self, obj: &Object, _final_state_unknown: bool) -> Result<()> {
        info!("Pod Deleted from Store: {}", obj.name());
        Ok(())
    }
}

wasmformer_guest::export!({{class}});
