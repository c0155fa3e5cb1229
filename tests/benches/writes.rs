//! The writer benchmark (issue 10): writes per second of one plugin server-side applying
//! ConfigMaps to the real kube-apiserver, against a client-go program (`tests/bench-go/applier`)
//! applying the same number of ConfigMaps with the same field manager, one after another, in the
//! same run; and the added cost per handler call of one write: recorded (the host's side only:
//! the SDK's encoding, the import's checks, the bucket, the recording) and sent to the real API
//! server (the round trip included). Prints a markdown table on stdout.
//!
//! `scripts/bench-writes` builds the Go program and runs this; by hand:
//! `WASMFORMER_GO_APPLIER=/path/applier cargo bench -p wasmformer-tests --bench writes`.
//!
//! `writes instructions none|one N` instead makes N handler calls (no write, or one recorded
//! write each) on the calling thread inside [`measured_calls`], for
//! `valgrind --tool=callgrind --toggle-collect='*measured_calls*'`: instructions per call, which
//! unlike times do not depend on the machine's load (`scripts/bench-writes` runs both).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use wasmformer::cache::{CachedObject, Gvk};
use wasmformer::config::WriteGrant;
use wasmformer::plugin::{
    Event, Grants, Limits, LoadedPlugin, PluginEngine, PluginInstance, PoolSettings, WriteAccess,
};
use wasmformer::writer::{PluginWriter, Recording, Sink, WriteSettings};
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::bench::units::median;
use wasmformer_tests::guests;
use wasmformer_tests::writer::{WriterProbe, apply};

const WRITES: usize = 2000;
const PER_CALL: usize = 500;
const CALLS: usize = 2000;

fn cm(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"a": "1"}})
}

/// The median time of `calls` handler calls delivering `data`.
async fn per_call(
    probe: &mut WriterProbe,
    ns: &str,
    data: &Value,
    calls: usize,
) -> Result<Duration> {
    for _ in 0..calls / 10 {
        probe
            .write(ns, data.clone())
            .await
            .map_err(anyhow::Error::msg)?;
    }
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        probe
            .write(ns, data.clone())
            .await
            .map_err(anyhow::Error::msg)?;
        samples.push(started.elapsed());
    }
    Ok(median(samples))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, what, n, ..] = &args[..]
        && mode == "instructions"
    {
        return instructions(what, n.parse().context("N")?);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> Result<()> {
    let applier = std::env::var("WASMFORMER_GO_APPLIER")
        .context("set WASMFORMER_GO_APPLIER (scripts/bench-writes does)")?;
    eprintln!("starting kube-apiserver");
    let server = KubeApiserver::start();
    let admin = server.admin().await;
    let ns = server.namespace("bench").await;
    let limits = Limits {
        deadline: Duration::from_secs(120),
        write_qps: 1_000_000,
        write_burst: 1_000_000,
        ..Limits::default()
    };
    let grants = "[{apiVersion: v1, kind: ConfigMap, verbs: [apply]}]";

    eprintln!("per-call cost, recorded");
    let mut recorded = WriterProbe::start_sink(
        Sink::Record(Recording::default()),
        grants,
        false,
        limits.clone(),
    )
    .await;
    let none = json!({"op": "none"});
    let one = apply(cm(&ns, "per-call"));
    let recorded_none = per_call(&mut recorded, &ns, &none, CALLS).await?;
    let recorded_one = per_call(&mut recorded, &ns, &one, CALLS).await?;

    eprintln!("per-call cost, real API server");
    let mut live =
        WriterProbe::start_with(admin.clone(), grants, false, false, limits.clone()).await;
    let live_none = per_call(&mut live, &ns, &none, CALLS / 4).await?;
    let live_one = per_call(&mut live, &ns, &one, CALLS / 4).await?;

    eprintln!("writes/s: plugin");
    let started = Instant::now();
    for call in 0..WRITES / PER_CALL {
        let series = json!({"op": "apply-series", "count": PER_CALL.to_string(), "manifest": cm(&ns, &format!("wf-{call}")).to_string()});
        live.write(&ns, series).await.map_err(anyhow::Error::msg)?;
    }
    let plugin_seconds = started.elapsed().as_secs_f64();
    eprintln!("writes/s: client-go");
    let kubeconfig = server.kubeconfig("admin");
    let output = std::process::Command::new(&applier)
        .args([
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--namespace",
            &ns,
            "--prefix",
            "go",
            "--count",
            &WRITES.to_string(),
        ])
        .output()
        .context("run the Go applier")?;
    ensure!(
        output.status.success(),
        "the Go applier failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let go: Value = serde_json::from_slice(&output.stdout)?;
    let go_seconds = go["seconds"].as_f64().context("the applier's seconds")?;

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (plugin_rate, go_rate) = (WRITES as f64 / plugin_seconds, WRITES as f64 / go_seconds);
    println!("| measurement | value |");
    println!("|---|---|");
    println!(
        "| writes/s, one plugin, {WRITES} server-side applies of new ConfigMaps ({PER_CALL} per handler call) | {plugin_rate:.0} |"
    );
    println!(
        "| writes/s, client-go (`tests/bench-go/applier`), the same {WRITES} applies, same field manager | {go_rate:.0} |"
    );
    println!(
        "| ratio plugin / client-go | {:.2} |",
        plugin_rate / go_rate
    );
    println!(
        "| handler call, no write (median of {CALLS}) | {:.1} µs |",
        us(recorded_none)
    );
    println!(
        "| handler call, one recorded write (median of {CALLS}) | {:.1} µs |",
        us(recorded_one)
    );
    println!(
        "| added per call by one write, host side only (recorded) | {:.1} µs |",
        us(recorded_one) - us(recorded_none)
    );
    println!(
        "| handler call, one apply sent to the API server, unchanged object (median of {}) | {:.1} µs |",
        CALLS / 4,
        us(live_one)
    );
    println!(
        "| added per call by one apply to the API server (round trip included) | {:.1} µs |",
        us(live_one) - us(live_none)
    );
    Ok(())
}

/// The writer-probe with the recording sink, called `n` times on this thread with `what` (`none`:
/// no write; `one`: one apply) after as many warm-up calls outside [`measured_calls`].
fn instructions(what: &str, n: usize) -> Result<()> {
    let cache = std::env::var("WASMFORMER_BENCH_CACHE_DIR")
        .unwrap_or_else(|_| "target/tmp/bench-components".to_owned());
    // One instance, under valgrind: the default pool's 4 TiB of address space is more than
    // valgrind can map.
    let engine = PluginEngine::with_pool(
        Some(cache.into()),
        PoolSettings {
            max_instances: 4,
            ..PoolSettings::default()
        },
    )?;
    let plugin = LoadedPlugin::load(&engine, "probe", Path::new(guests::WRITER_PROBE))?;
    let limits = Limits {
        deadline: Duration::from_secs(120),
        write_qps: 1_000_000,
        write_burst: 1_000_000,
        ..Limits::default()
    };
    let settings = WriteSettings {
        qps: limits.write_qps,
        burst: limits.write_burst,
        timeout: limits.write_timeout,
    };
    let writer = Arc::new(PluginWriter::new(
        "probe",
        settings,
        Sink::Record(Recording::default()),
    ));
    let granted: Vec<WriteGrant> =
        wasmformer::yaml::from_str("[{apiVersion: v1, kind: ConfigMap, verbs: [apply]}]")?;
    let mut grants = Grants::none();
    grants.grant_writes(Arc::new(WriteAccess::new(granted, false, &limits, writer)));
    let mut instance = PluginInstance::start(plugin, limits, grants, &json!({}), None)?;
    let data = match what {
        "none" => json!({"op": "none"}),
        "one" => apply(cm("bench", "per-call")),
        other => bail!("instructions none|one N, not {other}"),
    };
    let delivered = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "probe-1", "namespace": "bench", "uid": "u", "resourceVersion": "1",
                     "labels": {"probe": "yes"}},
        "data": data});
    let event = Event::Add {
        obj: Arc::new(CachedObject::from_value(delivered, true, &[])?),
        initial: false,
    };
    let gvk = Gvk::from_api_version("v1", "ConfigMap");
    for _ in 0..n {
        instance.handle(&gvk, &event)?;
    }
    measured_calls(&mut instance, &gvk, &event, n)
}

/// `n` handler calls; `scripts/bench-writes` counts the instructions inside it.
#[inline(never)]
fn measured_calls(instance: &mut PluginInstance, gvk: &Gvk, event: &Event, n: usize) -> Result<()> {
    for _ in 0..n {
        instance.handle(gvk, event)?;
    }
    Ok(())
}
