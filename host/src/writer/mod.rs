//! The writer: what happens to a plugin's writes once its import has checked them against the
//! plugin's grants and limits (`plugin::host::writer`).
//!
//! One [`PluginWriter`] per plugin, shared by all its versions (so a hot swap keeps its rate
//! limit), owns the plugin's [`TokenBucket`] and sends each write to its [`Sink`]: the API server
//! ([`ApiSender`], optionally with `dryRun=All`) or a recording ([`Recording`], for `wasmformer
//! replay`), and counts how each write ended ([`WriteCounts`]). Writes are synchronous on the
//! plugin's own worker thread: a slow API server delays only that plugin, and each write's
//! outcome is the call's result. Each write has its own timeout; waiting for it does not count
//! against the handler's deadline.

mod api;
mod bucket;
mod counts;
mod request;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

pub use crate::config::WriteVerb as Verb;
pub use api::ApiSender;
pub use bucket::TokenBucket;
pub use counts::{REFUSAL_LOG_INTERVAL, WriteCounts, WriteTally, result_label};
pub use request::{
    Cause, EventType, PatchType, Propagation, RefusedBy, Target, WriteError, WriteRequest,
    target_of,
};

/// The field manager (and Event reporting controller) of `plugin`'s writes.
pub fn field_manager(plugin: &str) -> String {
    format!("wasmformer/{plugin}")
}

/// Where a plugin's writes go.
#[derive(Debug, Clone)]
pub enum Sink {
    /// The API server, through the host's tokio runtime.
    Api {
        /// The sender shared by every plugin.
        sender: Arc<ApiSender>,
        /// The runtime the requests run on.
        runtime: tokio::runtime::Handle,
    },
    /// Recorded, not sent (`wasmformer replay`).
    Record(Recording),
}

/// The writes recorded instead of sent, in call order.
#[derive(Debug, Clone, Default)]
pub struct Recording(Arc<Mutex<Vec<RecordedWrite>>>);

impl Recording {
    /// Takes the writes recorded so far.
    pub fn take(&self) -> Vec<RecordedWrite> {
        std::mem::take(&mut *self.0.lock().expect("recording lock"))
    }
}

/// One recorded write, as `wasmformer replay` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedWrite {
    /// `wasmformer/<plugin>`.
    pub field_manager: String,
    /// The write.
    #[serde(flatten)]
    pub request: WriteRequest,
}

/// Per-plugin write settings (from the plugin's `limits`).
#[derive(Debug, Clone, Copy)]
pub struct WriteSettings {
    /// Sustained writes per second.
    pub qps: u32,
    /// Writes allowed at once.
    pub burst: u32,
    /// How long one write may take, rate-limit wait included.
    pub timeout: Duration,
}

/// One plugin's writer: its rate limit and where its writes go.
#[derive(Debug)]
pub struct PluginWriter {
    plugin: Arc<str>,
    bucket: TokenBucket,
    timeout: Duration,
    sink: Sink,
    counts: WriteCounts,
}

impl PluginWriter {
    /// A writer for `plugin` sending to `sink`.
    pub fn new(plugin: &str, settings: WriteSettings, sink: Sink) -> Self {
        Self {
            plugin: plugin.into(),
            bucket: TokenBucket::new(settings.qps, settings.burst),
            timeout: settings.timeout,
            sink,
            counts: WriteCounts::default(),
        }
    }

    /// This writer, also counting its writes into `/metrics` through `metrics`.
    #[must_use]
    pub fn counted(mut self, metrics: crate::metrics::WriteCalls) -> Self {
        self.counts = WriteCounts::new(Some(metrics));
        self
    }

    /// The plugin's name.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// How the plugin's writes ended so far (all its versions).
    pub fn counts(&self) -> &WriteCounts {
        &self.counts
    }

    /// Sends `request` and waits for its outcome (at most the write timeout): the object the
    /// server stored as JSON (recorded: the manifest; delete and Event: empty).
    pub fn send(&self, request: WriteRequest) -> Result<String, WriteError> {
        let started = Instant::now();
        let Some(wait) = self.bucket.reserve(self.timeout) else {
            return Err(WriteError::Throttled(format!(
                "plugin {} is over its write rate (limits.writeQps/writeBurst): no token within {:?}",
                self.plugin, self.timeout
            )));
        };
        std::thread::sleep(wait);
        let outcome = match &self.sink {
            Sink::Record(recording) => {
                let stored = match &request {
                    WriteRequest::Apply { object, .. } | WriteRequest::Create { object } => {
                        object.to_string()
                    }
                    _ => String::new(),
                };
                let write = RecordedWrite {
                    field_manager: field_manager(&self.plugin),
                    request,
                };
                recording.0.lock().expect("recording lock").push(write);
                Ok(stored)
            }
            Sink::Api { sender, runtime } => {
                let (sender, plugin, remaining) = (
                    sender.clone(),
                    self.plugin.clone(),
                    self.timeout.saturating_sub(started.elapsed()),
                );
                let (tx, rx) = std::sync::mpsc::channel();
                let target = request.target();
                runtime.spawn(async move {
                    let outcome =
                        tokio::time::timeout(remaining, sender.send(&plugin, &request)).await;
                    let _ = tx.send(outcome);
                });
                match rx.recv() {
                    Ok(Ok(outcome)) => outcome,
                    Ok(Err(_elapsed)) => Err(WriteError::Unavailable(format!(
                        "no answer for {target} within limits.writeTimeout ({:?})",
                        self.timeout
                    ))),
                    Err(_) => Err(WriteError::Unavailable("the host is shutting down".into())),
                }
            }
        };
        if let Err(error) = &outcome {
            tracing::debug!(plugin.id = %self.plugin, error = %error, "write failed");
        }
        outcome
    }
}
