//! restart-alert: records a Warning Event on a Pod when one of its containers restarted, seen as
//! a container status whose `restartCount` grew between the old and new Pod of an update. Repeats
//! aggregate into one Event with a growing count (the host's recorder does what client-go's does).

use serde::Deserialize;
use wasmformer_guest::writer::{self, EventType};
use wasmformer_guest::{Object, Plugin, Result, warn};

#[derive(Default)]
pub struct RestartAlert;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PodStatus {
    #[serde(default)]
    status: Status,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Status {
    #[serde(default)]
    container_statuses: Vec<ContainerStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerStatus {
    name: String,
    #[serde(default)]
    restart_count: u32,
}

impl Plugin for RestartAlert {
    fn on_update(&mut self, old: &Object, new: &Object) -> Result<()> {
        if old.resource_version() == new.resource_version() {
            return Ok(()); // a resync: nothing changed
        }
        let (before, after): (PodStatus, PodStatus) = (old.decode()?, new.decode()?);
        for container in &after.status.container_statuses {
            let was = before
                .status
                .container_statuses
                .iter()
                .find(|c| c.name == container.name)
                .map_or(0, |c| c.restart_count);
            if container.restart_count > was {
                let note = format!(
                    "container {} restarted (restart count {}, was {was})",
                    container.name, container.restart_count
                );
                warn!("pod {}/{}: {note}", new.namespace(), new.name());
                writer::event(
                    new,
                    EventType::Warning,
                    "ContainerRestarted",
                    "Alert",
                    &note,
                )?;
            }
        }
        Ok(())
    }
}

wasmformer_guest::export!(RestartAlert);
