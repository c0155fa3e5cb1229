//! The kube-rs peer of the density benchmark (`tests/benches/density.rs`, run by
//! `scripts/bench-density`): one process as a kube-rs controller keeps its cache, a
//! `kube::runtime::reflector` store of `Pod`s over every namespace fed by a `watcher` with the
//! default backoff, on `#[tokio::main]`'s default runtime. It prints the lines of the client-go
//! `informer` program of `tests/kube-apiserver` (see `wasmformer_tests::bench::peer`), one per
//! event, so the bench reads both alike:
//!
//! ```text
//! {"event":"add","namespace":"ns","name":"x","resourceVersion":"12","initial":true}
//! {"event":"update","namespace":"ns","name":"x","resourceVersion":"13"}
//! {"event":"synced"}                                  once the initial list is in the store
//! {"event":"stats","rssBytes":123,"objects":4}        every second
//! ```
//!
//! A watcher's `Apply` does not say whether the object is new: it is an update when the store
//! already holds the object. `cargo bench -p wasmformer-tests --bench kube-informer -- --kubeconfig
//! FILE`; without `--kubeconfig` (a `cargo bench` of every target) it says what it is and exits.
//!
//! With `--count N` it is the peer of the saturation benchmark (`tests/benches/saturation.rs`)
//! instead: `reflector(writer, watcher)` and one consumer of its applied objects that only
//! counts, and a single line `{"event":"done","handled":N}` once the consumer has seen N.

use std::io::Write;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, reflector::reflector, watcher};
use kube::{Api, Client, Config};
use serde_json::json;

/// Writes one line on stdout (line-buffered: one write per line, as the client-go program
/// flushes each line).
fn emit(line: serde_json::Value) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn event_line(event: &str, pod: &Pod) -> serde_json::Value {
    json!({
        "event": event,
        "namespace": pod.metadata.namespace,
        "name": pod.metadata.name,
        "resourceVersion": pod.metadata.resource_version,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let Some(kubeconfig) = option("--kubeconfig") else {
        eprintln!(
            "kube-informer: the kube-rs peer process of scripts/bench-density; run with --kubeconfig FILE"
        );
        return Ok(());
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let pods: Api<Pod> = Api::all(Client::try_from(config)?);
    let (reader, mut writer) = reflector::store::<Pod>();
    if let Some(count) = option("--count") {
        let count: usize = count.parse()?;
        let stream = watcher(pods, watcher::Config::default()).default_backoff();
        let mut applied = std::pin::pin!(reflector(writer, stream).applied_objects());
        let mut handled = 0;
        while let Some(pod) = applied.try_next().await? {
            std::hint::black_box(&pod);
            handled += 1;
            if handled == count {
                emit(json!({ "event": "done", "handled": count }));
            }
        }
        return Ok(());
    }

    let stats = reader.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            every.tick().await;
            emit(json!({ "event": "stats", "rssBytes": rss_bytes(), "objects": stats.len() }));
        }
    });

    // What `reflector(writer, stream)` does (the writer applies each event before it is passed
    // on), with a look at the store first to tell an add from an update.
    let mut events = std::pin::pin!(watcher(pods, watcher::Config::default()).default_backoff());
    let mut synced = false;
    loop {
        let event = match events.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => return Ok(()),
            Err(e) => {
                eprintln!("kube-informer: watch error: {e}");
                continue;
            }
        };
        let line = match &event {
            watcher::Event::InitApply(pod) => {
                let mut line = event_line("add", pod);
                line["initial"] = true.into();
                Some(line)
            }
            watcher::Event::Apply(pod) => {
                let known = reader.get(&ObjectRef::from_obj(pod)).is_some();
                Some(event_line(if known { "update" } else { "add" }, pod))
            }
            watcher::Event::Delete(pod) => Some(event_line("delete", pod)),
            watcher::Event::Init | watcher::Event::InitDone => None,
        };
        writer.apply_watcher_event(&event);
        if let Some(line) = line {
            emit(line);
        }
        if matches!(event, watcher::Event::InitDone) && !synced {
            synced = true;
            emit(json!({ "event": "synced" }));
        }
    }
}
