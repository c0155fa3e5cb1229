//! Wiring plugins' writes: one [`ApiSender`] for the host, one [`PluginWriter`] per plugin name
//! (kept across versions, so a hot swap keeps the plugin's rate limit), and each version's
//! [`WriteAccess`] built from its config.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::PluginConfig;
use crate::metrics::Metrics;
use crate::plugin::{Grants, WriteAccess};
use crate::writer::{ApiSender, PluginWriter, Sink, WriteSettings};

/// The host's writers.
pub(super) struct Writes {
    sender: Arc<ApiSender>,
    runtime: tokio::runtime::Handle,
    writers: Mutex<HashMap<String, Arc<PluginWriter>>>,
}

impl Writes {
    /// Writes through `client` (with `dryRun=All` if `dry_run`), on the current tokio runtime.
    pub fn new(client: kube::Client, dry_run: bool) -> Self {
        Self {
            sender: Arc::new(ApiSender::new(client, dry_run)),
            runtime: tokio::runtime::Handle::current(),
            writers: Default::default(),
        }
    }

    /// `grants` plus what `plugin`'s config lets it write; its writes are counted in `metrics`.
    pub fn grant(&self, plugin: &PluginConfig, mut grants: Grants, metrics: &Metrics) -> Grants {
        let limits = &plugin.limits;
        let settings = WriteSettings {
            qps: limits.write_qps,
            burst: limits.write_burst,
            timeout: limits.write_timeout,
        };
        let writer = {
            let mut writers = self.writers.lock().expect("writers lock");
            let sink = Sink::Api {
                sender: self.sender.clone(),
                runtime: self.runtime.clone(),
            };
            writers
                .entry(plugin.name.to_string())
                .or_insert_with(|| {
                    let name = plugin.name.as_str();
                    Arc::new(PluginWriter::new(name, settings, sink).counted(metrics.writes(name)))
                })
                .clone()
        };
        grants.grant_writes(Arc::new(WriteAccess::new(
            plugin.write.clone(),
            plugin.events,
            limits,
            writer,
        )));
        grants
    }
}
