//! The writer-probe guest wired to a real API server, for the writer's end-to-end tests: each
//! [`WriterProbe::write`] delivers one ConfigMap whose `data` says what to write (see
//! `tests/guests/writer-probe`) and returns the handler's outcome.

use std::sync::Arc;

use serde_json::{Value, json};
use wasmformer::cache::{CachedObject, Gvk};
use wasmformer::config::WriteGrant;
use wasmformer::plugin::{
    Event, Grants, Limits, LoadedPlugin, PluginEngine, PluginInstance, WriteAccess,
};
use wasmformer::writer::{ApiSender, PluginWriter, Sink, WriteSettings};

/// The writer-probe plugin, `probe`, writing through `client`.
pub struct WriterProbe {
    instance: Option<PluginInstance>,
    messages: Arc<std::sync::Mutex<Vec<String>>>,
    next: u64,
}

impl WriterProbe {
    /// Starts the probe with `grants` (YAML list of `write:` entries) and `events`.
    pub async fn start(client: kube::Client, grants: &str, events: bool, dry_run: bool) -> Self {
        Self::start_with(
            client,
            grants,
            events,
            dry_run,
            Limits {
                deadline: std::time::Duration::from_secs(5),
                ..Limits::default()
            },
        )
        .await
    }

    /// [`WriterProbe::start`] with the plugin's `limits`.
    pub async fn start_with(
        client: kube::Client,
        grants: &str,
        events: bool,
        dry_run: bool,
        limits: Limits,
    ) -> Self {
        let sink = Sink::Api {
            sender: Arc::new(ApiSender::new(client, dry_run)),
            runtime: tokio::runtime::Handle::current(),
        };
        Self::start_sink(sink, grants, events, limits).await
    }

    /// The probe writing to `sink` (e.g. a recording, for measurements without a server).
    pub async fn start_sink(sink: Sink, grants: &str, events: bool, limits: Limits) -> Self {
        let grants: Vec<WriteGrant> = wasmformer::yaml::from_str(grants).expect("grants YAML");
        let settings = WriteSettings {
            qps: limits.write_qps,
            burst: limits.write_burst,
            timeout: limits.write_timeout,
        };
        let writer = Arc::new(PluginWriter::new("probe", settings, sink));
        let mut all = Grants::none();
        all.grant_writes(Arc::new(WriteAccess::new(grants, events, &limits, writer)));
        let messages: Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let observer = {
            let messages = messages.clone();
            Arc::new(move |line: &wasmformer::plugin::LogLine| {
                messages.lock().unwrap().push(line.message.clone())
            })
        };
        let instance = tokio::task::spawn_blocking(move || {
            let engine =
                PluginEngine::new(Some(crate::repo_root().join("target/tmp/components"))).unwrap();
            let plugin = LoadedPlugin::load(
                &engine,
                "probe",
                std::path::Path::new(crate::guests::WRITER_PROBE),
            )
            .unwrap();
            PluginInstance::start(plugin, limits, all, &json!({}), Some(observer)).unwrap()
        })
        .await
        .unwrap();
        Self {
            instance: Some(instance),
            messages,
            next: 0,
        }
    }

    /// Delivers a ConfigMap (in `namespace`) whose `data` is `data`; `Ok(answer)` with what the
    /// last write returned, or the handler's error text.
    pub async fn write(&mut self, namespace: &str, data: Value) -> Result<String, String> {
        let name = format!("probe-{}", self.next + 1);
        self.write_about(&name, namespace, data).await
    }

    /// [`WriterProbe::write`] with the delivered ConfigMap named `name` (Events are about it).
    pub async fn write_about(
        &mut self,
        name: &str,
        namespace: &str,
        data: Value,
    ) -> Result<String, String> {
        self.next += 1;
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("probe-uid-{name}"),
                         "resourceVersion": self.next.to_string(), "labels": {"probe": "yes"}},
            "data": data});
        let obj = Arc::new(CachedObject::from_value(cm, true, &[]).unwrap());
        let mut instance = self.instance.take().expect("probe instance");
        let (instance, result) = tokio::task::spawn_blocking(move || {
            let result = instance.handle(
                &Gvk::from_api_version("v1", "ConfigMap"),
                &Event::Add {
                    obj,
                    initial: false,
                },
            );
            (instance, result)
        })
        .await
        .unwrap();
        self.instance = Some(instance);
        match result {
            Ok(()) => Ok(self
                .messages
                .lock()
                .unwrap()
                .last()
                .cloned()
                .unwrap_or_default()
                .trim_start_matches("ok ")
                .to_owned()),
            Err(e) => Err(wasmformer::error_chain(&e)),
        }
    }
}

/// `data` for the probe: apply `manifest`.
pub fn apply(manifest: Value) -> Value {
    json!({"op": "apply", "manifest": manifest.to_string()})
}

/// `data` for the probe: apply `manifest` with force.
pub fn force_apply(manifest: Value) -> Value {
    json!({"op": "apply", "force": "true", "manifest": manifest.to_string()})
}
