//! The hot-swap benchmark of issue 6: how long a plugin's event stream stops while a new version
//! is swapped in, and how long preparing that version takes. Prints a markdown table on stdout
//! and progress on stderr.
//!
//! An in-process [`Runtime`] runs the recorder guest on the ConfigMaps of one namespace of the
//! embedded dev cluster, while a thread changes those ConfigMaps at a steady rate through the dev
//! cluster's store (each change reaches the plugin through the informer's watch, as in
//! production). The plugin is swapped back and forth between two versions of the recorder (the
//! same code; `v2` has a custom section appended, so another content hash, and another
//! `config.tag`) with [`Runtime::apply_config`]. The log observer stamps every line the plugin
//! logs (one per event, at the end of its handler); the **swap pause** is the time from the old
//! version's last line to the new version's first, the **gap** the time between two consecutive
//! lines of one version (what the stream looks like without a swap). **Prepare** is
//! `ReloadOutcome::Swapped.prepare_ms` (load, compile or compile-cache hit, instantiate, `init`,
//! all off the event path), **reload call** the wall time of the `apply_config` call (prepare plus
//! waiting for the worker to take the new version between two events).
//!
//! Three runs: **warm**, an engine with a compile cache holding both versions (the same two files
//! swapped repeatedly), and **cold**, an engine without a cache (`PluginEngine::new(None)`), which
//! compiles every version it loads; both with a plugin that keeps up with the stream, so its
//! pauses include the stream's own jitter (the gap columns show it). **warm, backlogged** isolates
//! the swap from that jitter: the plugin sleeps 2 ms per event (`sleepMs: 2`) under a stream it
//! cannot keep up with (800 changes/s), so its queue never empties and every gap is one handler call; there the
//! pause beyond the median gap is what the swap itself costs on the worker. Afterwards every
//! produced change must have reached the plugin exactly once, in order per object: the table
//! reports lost, duplicated and reordered events.
//!
//! `cargo bench -p wasmformer-tests --bench swap [-- --rate 2000 --warm 100 --cold 20]` (swaps per
//! run: at least 20; percentiles are nearest-rank, so with 100 swaps p99 is the second largest).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use wasmformer::config::HostConfig;
use wasmformer::plugin::{LoadedPlugin, LogLine, PluginEngine};
use wasmformer::runtime::{ReloadOutcome, Runtime, RuntimeOptions};
use wasmformer_devcluster::{DevCluster, DevClusterConfig, ObjectKey, Part, ResourceId, Store};
use wasmformer_tests::{guests, with_custom_section};

/// ConfigMaps the producer changes in turn.
const OBJECTS: usize = 16;
/// Time between two swaps: long enough for a few dozen events of each version.
const BETWEEN_SWAPS: Duration = Duration::from_millis(100);
/// The p99 swap pause aimed at with a warm compile cache.
const GOAL_P99: Duration = Duration::from_millis(5);

struct Options {
    rate: f64,
    warm: usize,
    cold: usize,
}

impl Options {
    fn from_args() -> Result<Self> {
        let mut options = Self {
            rate: 2000.0,
            warm: 100,
            cold: 20,
        };
        let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
        while let Some(arg) = args.next() {
            let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--rate" => options.rate = value()?.parse()?,
                "--warm" => options.warm = value()?.parse()?,
                "--cold" => options.cold = value()?.parse()?,
                other => bail!("unknown option {other}; see the module documentation"),
            }
        }
        ensure!(
            options.warm >= 20 && options.cold >= 20,
            "at least 20 swaps per run"
        );
        Ok(options)
    }
}

// ---------------------------------------------------------------------------------------------
// Two versions of the recorder

/// Writes `v1.wasm` (the recorder as built) and `v2.wasm` (with a custom section) into `dir`.
fn write_versions(dir: &Path) -> Result<BTreeMap<&'static str, String>> {
    let v1 = std::fs::read(guests::RECORDER).context("read the recorder guest")?;
    let v2 = with_custom_section(&v1, "wasmformer-bench-version", b"v2");
    let mut digests = BTreeMap::new();
    for (label, wasm) in [("v1", v1), ("v2", v2)] {
        std::fs::write(dir.join(format!("{label}.wasm")), &wasm)?;
        digests.insert(label, wasmformer::plugin::content_digest(&wasm));
    }
    Ok(digests)
}

/// The plugin's config. The deadline is generous because a cold compile runs on every core: on a
/// small, busy machine it can hold the worker off the CPU past the default 100 ms, and the call
/// in progress would trap.
fn config(dir: &Path, namespace: &str, label: &str, sleep_ms: u64) -> Result<HostConfig> {
    let yaml = format!(
        "plugins:\n  - name: rec\n    wasm: {label}.wasm\n    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {namespace}}}]\n    \
         maxQueuedEvents: 1000000\n    limits: {{deadline: 5s}}\n    config: {{tag: {label}, sleepMs: {sleep_ms}}}\n"
    );
    HostConfig::parse(&yaml, dir.to_owned()).map_err(|problems| anyhow::anyhow!("{problems:?}"))
}

// ---------------------------------------------------------------------------------------------
// The load

/// Changes the ConfigMaps `cm-0` … in turn, `rate` times a second, until `stop`; returns each
/// change as (object, resourceVersion), in order.
fn produce(
    store: Store,
    namespace: String,
    rate: f64,
    stop: Arc<AtomicBool>,
) -> Vec<(String, String)> {
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut produced = Vec::new();
    let mut next = Instant::now();
    for i in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let name = format!("cm-{}", i % OBJECTS);
        let key = ObjectKey::new(
            ResourceId::core("configmaps"),
            Some(&namespace),
            name.as_str(),
        );
        // Every value differs from the initial "0": a change that changes nothing is no event.
        let changed = store
            .modify(&key, Part::Main, |cm| {
                cm["data"]["n"] = json!((i + 1).to_string())
            })
            .expect("change a ConfigMap");
        produced.push((
            name,
            changed["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        ));
        next += period;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    produced
}

/// One line the plugin logged, stamped when it was logged.
type Stamped = (Instant, String);

/// One run's setting.
struct Scenario {
    name: &'static str,
    engine: PluginEngine,
    swaps: usize,
    /// Changes per second.
    rate: f64,
    /// The plugin's `sleepMs`: 0 keeps up with the stream, 1 makes a backlog.
    sleep_ms: u64,
}

/// What one run measured.
struct Run {
    name: &'static str,
    sleep_ms: u64,
    swaps: usize,
    /// Swap pauses, in µs, one per swap that fell between two events.
    pauses: Vec<f64>,
    /// Gaps between two events of one version, in µs.
    gaps: Vec<f64>,
    /// `prepare_ms` of each swap.
    prepare: Vec<f64>,
    /// Wall time of each `apply_config`, in µs.
    calls: Vec<f64>,
    events: usize,
    lost: usize,
    duplicated: usize,
    /// Objects whose events arrived complete but out of order.
    reordered: usize,
    rate: f64,
}

async fn run(scenario: Scenario, dev: &DevCluster, dir: &Path) -> Result<Run> {
    let Scenario {
        name,
        engine,
        swaps,
        rate,
        sleep_ms,
    } = scenario;
    let namespace = format!("bench-{}", name.replace([' ', ','], "-").replace("--", "-"));
    let store = dev.store().clone();
    store.create(
        &ResourceId::namespaces(),
        None,
        json!({"metadata": {"name": namespace}}),
    )?;
    for i in 0..OBJECTS {
        store.create(
            &ResourceId::core("configmaps"),
            Some(&namespace),
            json!({"metadata": {"name": format!("cm-{i}")}, "data": {"n": "0"}}),
        )?;
    }
    let digests = write_versions(dir)?;
    let lines: Arc<Mutex<Vec<Stamped>>> = Arc::default();
    let sink = lines.clone();
    let observer = Arc::new(move |line: &LogLine| {
        let at = Instant::now();
        sink.lock().unwrap().push((at, line.message.clone()));
    });
    let runtime_options = RuntimeOptions {
        log_observer: Some(observer),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(
        config(dir, &namespace, "v1", sleep_ms)?,
        dev.client()?,
        Arc::new(engine),
        runtime_options,
    )
    .await;
    ensure!(
        runtime.wait_synced(Duration::from_secs(30)).await,
        "not synced: {:?}",
        runtime.statuses().await
    );
    let initial = lines.lock().unwrap().len();

    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (store, namespace, stop) = (store.clone(), namespace.clone(), stop.clone());
        std::thread::spawn(move || produce(store, namespace, rate, stop))
    };
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (mut prepare, mut calls) = (Vec::new(), Vec::new());
    for k in 1..=swaps {
        tokio::time::sleep(BETWEEN_SWAPS).await;
        let label = if k % 2 == 1 { "v2" } else { "v1" };
        let asked = Instant::now();
        let report = runtime
            .apply_config(config(dir, &namespace, label, sleep_ms)?)
            .await;
        calls.push(asked.elapsed().as_secs_f64() * 1e6);
        match &report.plugins[..] {
            [
                (
                    _,
                    ReloadOutcome::Swapped {
                        version,
                        prepare_ms,
                        ..
                    },
                ),
            ] if *version == digests[label] => prepare.push(*prepare_ms as f64),
            other => bail!("swap {k} to {label}: {other:?}"),
        }
        eprint!("\r{name}: {k}/{swaps} swaps");
    }
    eprintln!();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let produced = producer.join().expect("producer thread");
    let elapsed = started.elapsed();

    // Wait for the queue to drain: every change delivered, or nothing new for 2 s.
    let (mut seen, mut quiet_since) = (0, Instant::now());
    while lines.lock().unwrap().len() - initial < produced.len()
        && quiet_since.elapsed() < Duration::from_secs(2)
    {
        let now = lines.lock().unwrap().len();
        if now != seen {
            (seen, quiet_since) = (now, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let st = runtime.statuses().await;
    ensure!(st[0].swaps == swaps as u64 && st[0].failures == 0, "{st:?}");
    runtime.shutdown().await;

    let lines = std::mem::take(&mut *lines.lock().unwrap());
    let events: Vec<(Instant, Value)> = lines[initial..]
        .iter()
        .map(|(at, text)| Ok((*at, serde_json::from_str(text)?)))
        .collect::<Result<_>>()?;
    let (mut pauses, mut gaps) = (Vec::new(), Vec::new());
    for pair in events.windows(2) {
        let ((a, first), (b, second)) = (&pair[0], &pair[1]);
        let micros = b.duration_since(*a).as_secs_f64() * 1e6;
        if first["tag"] == second["tag"] {
            gaps.push(micros)
        } else {
            pauses.push(micros)
        }
    }

    // Exactly once, in order, per object.
    let per_object = |items: &mut dyn Iterator<Item = (String, String)>| {
        let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, rv) in items {
            map.entry(name).or_default().push(rv);
        }
        map
    };
    let wanted = per_object(&mut produced.iter().cloned());
    let got = per_object(&mut events.iter().map(|(_, e)| {
        (
            e["name"].as_str().unwrap_or("").to_owned(),
            e["resourceVersion"].as_str().unwrap_or("").to_owned(),
        )
    }));
    let (mut lost, mut duplicated, mut reordered) = (0, 0, 0);
    for name in wanted.keys().chain(got.keys()).collect::<BTreeSet<_>>() {
        let (w, g) = (
            wanted.get(name).map_or(&[][..], Vec::as_slice),
            got.get(name).map_or(&[][..], Vec::as_slice),
        );
        let (lost_here, duplicated_here) = (
            w.iter().filter(|rv| !g.contains(rv)).count(),
            g.len() - g.iter().collect::<BTreeSet<_>>().len(),
        );
        (lost, duplicated) = (lost + lost_here, duplicated + duplicated_here);
        reordered += usize::from(lost_here == 0 && duplicated_here == 0 && w != g);
    }
    let received: BTreeSet<&str> = events
        .iter()
        .filter_map(|(_, e)| e["resourceVersion"].as_str())
        .collect();
    for (i, (name, rv)) in produced
        .iter()
        .enumerate()
        .filter(|(_, (_, rv))| !received.contains(rv.as_str()))
        .take(5)
    {
        eprintln!(
            "{name}: change {i} of {} (resourceVersion {rv}) never reached the plugin",
            produced.len()
        );
    }
    let rate = produced.len() as f64 / elapsed.as_secs_f64();
    Ok(Run {
        name,
        sleep_ms,
        swaps,
        pauses,
        gaps,
        prepare,
        calls,
        events: events.len(),
        lost,
        duplicated,
        reordered,
        rate,
    })
}

// ---------------------------------------------------------------------------------------------
// The report

/// The `q` quantile of `values` (nearest rank).
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn print_report(runs: &[Run], _options: &Options) {
    println!(
        "ConfigMap changes streamed from the dev cluster's store through the watch and the informer to the plugin; times in ms.\n"
    );
    println!(
        "| run | swaps | pause p50 | pause p99 | pause max | gap p50 | gap p99 | gap max | gaps > 5 ms | prepare p50 | prepare p99 | \
         reload call p50 | reload call p99 | events (per s) | lost | duplicated | reordered objects | goal |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|");
    let ms = |micros: f64| format!("{:.2}", micros / 1000.0);
    for run in runs {
        let p99 = quantile(&run.pauses, 0.99);
        let goal = if run.name != "warm" {
            String::new()
        } else if p99 < GOAL_P99.as_secs_f64() * 1e6
            && run.lost + run.duplicated + run.reordered == 0
        {
            "p99 < 5 ms, none lost: met".to_owned()
        } else {
            "p99 < 5 ms, none lost: **missed**".to_owned()
        };
        println!(
            "| {} | {} ({} between two events) | {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} ({:.0}) | {} | {} | {} | {goal} |",
            run.name,
            run.swaps,
            run.pauses.len(),
            ms(quantile(&run.pauses, 0.5)),
            ms(p99),
            ms(quantile(&run.pauses, 1.0)),
            ms(quantile(&run.gaps, 0.5)),
            ms(quantile(&run.gaps, 0.99)),
            ms(quantile(&run.gaps, 1.0)),
            run.gaps
                .iter()
                .filter(|&&gap| gap > GOAL_P99.as_secs_f64() * 1e6)
                .count(),
            quantile(&run.prepare, 0.5),
            quantile(&run.prepare, 0.99),
            ms(quantile(&run.calls, 0.5)),
            ms(quantile(&run.calls, 0.99)),
            run.events,
            run.rate,
            run.lost,
            run.duplicated,
            run.reordered,
        );
    }
    for run in runs.iter().filter(|run| run.sleep_ms > 0) {
        let gap = quantile(&run.gaps, 0.5);
        let excess: Vec<f64> = run.pauses.iter().map(|pause| pause - gap).collect();
        println!(
            "\nSwap cost on the worker ({}: pause beyond the median gap): p50 {} ms, p99 {} ms, max {} ms.",
            run.name,
            ms(quantile(&excess, 0.5)),
            ms(quantile(&excess, 0.99)),
            ms(quantile(&excess, 1.0)),
        );
    }
}

fn main() -> Result<()> {
    let options = Options::from_args()?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    tokio.block_on(async {
        let dev = DevCluster::start(DevClusterConfig::default()).await?;
        let dir = tempfile::tempdir()?;
        let cache = dir.path().join("components");
        // Warm: both versions compiled into the cache before the first swap.
        let warm = PluginEngine::new(Some(cache.clone())).map_err(|e| anyhow::anyhow!("{e}"))?;
        let versions = dir.path().join("versions");
        std::fs::create_dir_all(&versions)?;
        write_versions(&versions)?;
        for label in ["v1", "v2"] {
            LoadedPlugin::load(&warm, "rec", &versions.join(format!("{label}.wasm")))?;
        }
        let warm_backlogged =
            PluginEngine::new(Some(cache.clone())).map_err(|e| anyhow::anyhow!("{e}"))?;
        let scenarios = [
            Scenario {
                name: "warm",
                engine: warm,
                swaps: options.warm,
                rate: options.rate,
                sleep_ms: 0,
            },
            Scenario {
                name: "cold",
                engine: PluginEngine::new(None).map_err(|e| anyhow::anyhow!("{e}"))?,
                swaps: options.cold,
                rate: options.rate,
                sleep_ms: 0,
            },
            // At most 500 events/s get through a 2 ms handler: 800/s keeps a backlog.
            Scenario {
                name: "warm, backlogged",
                engine: warm_backlogged,
                swaps: options.warm,
                rate: 800.0,
                sleep_ms: 2,
            },
        ];
        let mut runs = Vec::new();
        for scenario in scenarios {
            runs.push(run(scenario, &dev, &versions).await?);
        }
        print_report(&runs, &options);
        dev.shutdown().await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(())
}
