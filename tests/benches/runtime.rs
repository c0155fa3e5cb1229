//! The plugin runtime's benchmarks: what one event costs in a sandboxed instance, compared with
//! the same handler compiled natively, and what loading, instantiating and the object crossing
//! cost. Prints markdown (the tables `scripts/bench` writes into BENCHMARKS.md) on stdout and
//! progress on stderr.
//!
//! The harness is deliberately small: each benchmark warms up, picks a batch size of about
//! [`TARGET_BATCH`], then times many batches with `Instant`; a row reports the median and the
//! p99 of the batches' ns/op. Every object is the realistic Pod of `../shared/fixtures`, admitted
//! through a `Store` as the informers would (managed fields stripped), delivered under the default
//! limits with the engine's epoch deadline armed.
//!
//! `cargo bench -p wasmformer-tests --bench runtime [-- FILTER...]` runs the benchmarks whose id
//! contains one of the filters (all of them when none is given).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::{Arc, LazyLock};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use guest_bench_decode::PodDecoder;
use guest_bench_labels::LabelCounter;
use serde_json::{Value, json};
use wasmformer::cache::{CachedObject, Gvk, Store};
use wasmformer::plugin::{Event, Grants, Limits, LoadedPlugin, PluginEngine, PluginInstance};
use wasmformer_guest::Plugin;
use wasmformer_tests::{guests, pod_gvk, realistic_pod, store};

/// Warm-up time per benchmark, also used to size the batches.
const WARMUP: Duration = Duration::from_millis(300);
/// Aimed-at duration of one timed batch.
const TARGET_BATCH: Duration = Duration::from_micros(200);
/// Timed batches are taken until this much time has passed (and at least `MIN_BATCHES`).
const MEASURE: Duration = Duration::from_secs(2);
const MIN_BATCHES: usize = 15;
const MAX_BATCHES: usize = 5000;
/// Pods in the lister's store (variants of the realistic Pod).
const STORE_PODS: usize = 1000;
/// Instances started for the RSS figure.
const RSS_INSTANCES: usize = 100;

/// The timing of one benchmark, in ns per operation.
#[derive(Debug, Clone, Copy)]
struct Stats {
    min: f64,
    q25: f64,
    median: f64,
    q75: f64,
    p99: f64,
    batches: usize,
    per_batch: u64,
}

impl Stats {
    fn of(mut samples: Vec<f64>, per_batch: u64) -> Self {
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Self { min: at(0.0), q25: at(0.25), median: at(0.5), q75: at(0.75), p99: at(0.99), batches: samples.len(), per_batch }
    }
}

/// Times `batch(iters)` (which runs `iters` operations and returns how long they took) as the
/// module documentation describes.
fn measure_batches(mut batch: impl FnMut(u64) -> Duration) -> Stats {
    if let Some(iters) = fixed_iterations() {
        return Stats::of(vec![batch(iters).as_nanos() as f64 / iters as f64], iters);
    }
    let iters = calibrate(&mut batch);
    let mut samples = Vec::new();
    let measuring = Instant::now();
    while samples.len() < MAX_BATCHES && (samples.len() < MIN_BATCHES || measuring.elapsed() < MEASURE) {
        samples.push(batch(iters).as_nanos() as f64 / iters as f64);
    }
    Stats::of(samples, iters)
}

/// Warms up, doubling the batch until it takes about [`TARGET_BATCH`], and returns the batch size
/// that the fastest warm-up batch long enough to time suggests (a preempted batch would make it
/// too small).
fn calibrate(batch: &mut impl FnMut(u64) -> Duration) -> u64 {
    let started = Instant::now();
    let mut iters = 1u64;
    let mut per_op = Duration::MAX;
    while started.elapsed() < WARMUP {
        let took = batch(iters);
        if took >= TARGET_BATCH / 4 || iters == 1 {
            per_op = per_op.min(took / iters as u32);
        }
        if took < TARGET_BATCH / 2 {
            iters *= 2;
        }
    }
    (TARGET_BATCH.as_nanos() / per_op.as_nanos().max(1)).clamp(1, 1 << 24) as u64
}

/// The ratio of `a`'s time to `b`'s, timed in alternating batches so that both see the same
/// machine load; the statistics are of the per-pair ratios.
fn measure_ratio(mut a: impl FnMut(), mut b: impl FnMut()) -> Stats {
    let timed = |op: &mut dyn FnMut(), iters: u64| {
        let t = Instant::now();
        for _ in 0..iters {
            op();
        }
        t.elapsed()
    };
    let (iters_a, iters_b) = (calibrate(&mut |n| timed(&mut a, n)), calibrate(&mut |n| timed(&mut b, n)));
    let per_op = |took: Duration, iters: u64| took.as_nanos() as f64 / iters as f64;
    let mut ratios = Vec::new();
    let measuring = Instant::now();
    while ratios.len() < MAX_BATCHES && (ratios.len() < MIN_BATCHES || measuring.elapsed() < 2 * MEASURE) {
        let time_a = per_op(timed(&mut a, iters_a), iters_a);
        ratios.push(time_a / per_op(timed(&mut b, iters_b), iters_b));
    }
    Stats::of(ratios, iters_a)
}

/// `WASMFORMER_BENCH_ITERATIONS=N`: run each benchmark's operation exactly `N` times, once, with
/// no warm-up (for profilers such as `valgrind --tool=callgrind`, where time means nothing).
fn fixed_iterations() -> Option<u64> {
    std::env::var("WASMFORMER_BENCH_ITERATIONS").ok().map(|n| n.parse().expect("WASMFORMER_BENCH_ITERATIONS is a number"))
}

/// Times `op`, one operation per call.
fn measure(mut op: impl FnMut()) -> Stats {
    measure_batches(|iters| {
        let t = Instant::now();
        for _ in 0..iters {
            op();
        }
        t.elapsed()
    })
}

/// The benchmarks that ran, by id, and the filters from the command line.
struct Bench {
    filters: Vec<String>,
    results: BTreeMap<&'static str, (String, Stats)>,
    /// Ratios of two operations' times ([`measure_ratio`]).
    ratios: BTreeMap<&'static str, (String, Stats)>,
}

impl Bench {
    fn from_args() -> Self {
        // `cargo bench` passes `--bench`; anything not an option is a filter.
        let filters = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
        Self { filters, results: BTreeMap::new(), ratios: BTreeMap::new() }
    }

    fn wants(&self, id: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| id.contains(f.as_str()))
    }

    // Never inlined: `scripts/bench` counts instructions inside it with callgrind's toggle-collect.
    #[inline(never)]
    fn run(&mut self, id: &'static str, what: &str, bench: impl FnOnce() -> Stats) {
        if !self.wants(id) {
            return;
        }
        eprint!("bench {id:<28} ");
        let stats = bench();
        eprintln!("median {:>12} ns/op  p99 {:>12} ns/op  ({} batches of {})", ns(stats.median), ns(stats.p99), stats.batches, stats.per_batch);
        self.results.insert(id, (what.to_owned(), stats));
    }

    fn run_ratio(&mut self, id: &'static str, what: &str, bench: impl FnOnce() -> Stats) {
        if !self.wants(id) {
            return;
        }
        eprint!("ratio {id:<28} ");
        let stats = bench();
        eprintln!("median {:.2}×  p99 {:.2}×  ({} pairs)", stats.median, stats.p99, stats.batches);
        self.ratios.insert(id, (what.to_owned(), stats));
    }

    fn median(&self, id: &str) -> Option<f64> {
        self.results.get(id).map(|(_, s)| s.median)
    }
}

/// One informer-like store of Pods and the objects the benchmarks deliver.
struct Objects {
    pods: Arc<Store>,
    /// The realistic Pod, as the cache holds it.
    realistic: Arc<CachedObject>,
    /// The realistic Pod's identity and labels with no spec or status: the body is all that differs.
    metadata_only: Arc<CachedObject>,
    /// A Pod with a name and namespace only.
    minimal: Arc<CachedObject>,
}

impl Objects {
    fn new() -> Self {
        let pods = store(pod_gvk(), vec![]);
        let realistic = pods.admit(realistic_pod()).expect("realistic Pod is a valid object");
        let metadata = &realistic_pod()["metadata"];
        let metadata_only = pods
            .admit(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata["uid"],
                "resourceVersion": metadata["resourceVersion"], "labels": metadata["labels"]}}))
            .unwrap();
        let minimal =
            pods.admit(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tiny", "namespace": realistic.namespace()}})).unwrap();
        // The lister's view: the realistic Pod among STORE_PODS variants, and the minimal Pod.
        pods.upsert(realistic.clone());
        pods.upsert(minimal.clone());
        for i in 1..STORE_PODS {
            let mut pod = realistic_pod();
            let meta = &mut pod["metadata"];
            meta["name"] = Value::from(format!("{}-{i}", realistic.name()));
            meta["uid"] = Value::from(format!("{}-{i}", realistic.uid()));
            meta["resourceVersion"] = Value::from((1000 + i).to_string());
            pods.upsert(pods.admit(pod).unwrap());
        }
        Self { pods, realistic, metadata_only, minimal }
    }

    fn add(obj: &Arc<CachedObject>) -> Event {
        Event::Add { obj: obj.clone(), initial: false }
    }
}

/// The object a native handler receives: every field copied from the cached object, as the host
/// copies them into the WIT record for a wasm call.
fn guest_object(gvk: &Gvk, obj: &CachedObject) -> wasmformer_guest::Object {
    let kind = wasmformer_guest::Gvk { group: gvk.group.clone(), version: gvk.version.clone(), kind: gvk.kind.clone() };
    let labels = obj.labels().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    wasmformer_guest::Object::new(kind, obj.namespace(), obj.name(), obj.uid(), obj.resource_version(), labels, obj.body().to_owned())
}

fn load(engine: &PluginEngine, wasm: &str) -> LoadedPlugin {
    let name = Path::new(wasm).file_stem().unwrap().to_string_lossy().into_owned();
    LoadedPlugin::load(engine, &name, Path::new(wasm)).expect("benchmark plugin loads")
}

/// Starts `plugin`; a failed start is counted and retried (see [`FAILURES`]).
fn start(plugin: &LoadedPlugin, grants: Grants, config: Value) -> PluginInstance {
    for _ in 0..3 {
        match PluginInstance::start(plugin.clone(), Limits::default(), grants.clone(), &config, None) {
            Ok(instance) => return instance,
            Err(e) => {
                eprint!("[start failed: {e}] ");
                FAILURES.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    panic!("{} failed to start three times", plugin.name());
}

/// Times delivering `event` to a long-lived instance of `plugin`. A call that fails is counted,
/// not fatal (see [`FAILURES`]).
fn event_bench(plugin: &LoadedPlugin, grants: Grants, config: Value, event: &Event) -> Stats {
    let mut instance = start(plugin, grants, config);
    let stats = measure(|| handle(&mut instance, event));
    let failures = instance.failures();
    assert!(failures * 1000 <= instance.calls(), "{failures} of {} calls failed", instance.calls());
    FAILURES.fetch_add(failures, Ordering::Relaxed);
    stats
}

/// The kind `v1 Pod`.
static POD: LazyLock<Gvk> = LazyLock::new(pod_gvk);

/// Delivers `event` about a Pod; a failure is reported and counted in the instance.
fn handle(instance: &mut PluginInstance, event: &Event) {
    if let Err(e) = instance.handle(&POD, black_box(event)) {
        eprint!("[call failed: {e}] ");
    }
}

/// Calls and starts that failed, each reported on stderr when it happened. Only a deadline
/// overrun is expected, and only on a loaded machine: the deadline is wall-clock time, so a call
/// or an instantiation that is preempted long enough traps.
static FAILURES: AtomicU64 = AtomicU64::new(0);

fn main() {
    let mut bench = Bench::from_args();
    let objects = Objects::new();
    let gvk = pod_gvk();
    // `WASMFORMER_BENCH_CACHE_DIR` keeps compiled plugins between runs (profiler runs use it).
    let temporary = tempfile::tempdir().expect("temporary compile cache");
    let cache_dir = std::env::var_os("WASMFORMER_BENCH_CACHE_DIR").map_or_else(|| temporary.path().to_owned(), Into::into);
    let engine = PluginEngine::new(Some(cache_dir)).expect("engine");
    let [empty, labels, decode, lister] =
        [guests::BENCH_EMPTY, guests::BENCH_LABELS, guests::BENCH_DECODE, guests::BENCH_LISTER].map(|w| load(&engine, w));
    let mut pods_granted = Grants::none();
    pods_granted.grant(objects.pods.clone());

    // Before anything else allocates and frees much: RSS per live instance.
    let rss = (bench.filters.is_empty()).then(|| rss_per_instance(&empty, &objects.realistic));

    let realistic = Objects::add(&objects.realistic);
    bench.run("1-empty", "empty call, realistic Pod", || event_bench(&empty, Grants::none(), json!({}), &realistic));
    bench.run("2-labels-wasm", "name + namespace + labels handler, wasm", || {
        event_bench(&labels, Grants::none(), json!({}), &realistic)
    });
    bench.run("3-decode-wasm", "decode into `Pod` handler, wasm", || event_bench(&decode, Grants::none(), json!({}), &realistic));

    let prebuilt = guest_object(&gvk, &objects.realistic);
    bench.run("4a-labels-native", "labels handler, native, `Object` already built", || {
        let mut plugin = LabelCounter::default();
        let stats = measure(|| plugin.on_add(black_box(&prebuilt), false).unwrap());
        black_box(plugin.labels + plugin.with_app + plugin.identity_bytes);
        stats
    });
    bench.run("4b-labels-native-copy", "labels handler, native, `Object` copied from the cache per call", || {
        let mut plugin = LabelCounter::default();
        let stats = measure(|| plugin.on_add(&guest_object(&gvk, black_box(&objects.realistic)), false).unwrap());
        black_box(plugin.labels);
        stats
    });
    bench.run("4c-decode-native", "decode handler, native, `Object` already built", || {
        let mut plugin = PodDecoder::default();
        let stats = measure(|| plugin.on_add(black_box(&prebuilt), false).unwrap());
        black_box(plugin.containers);
        stats
    });
    bench.run("4d-decode-native-copy", "decode handler, native, `Object` copied from the cache per call", || {
        let mut plugin = PodDecoder::default();
        let stats = measure(|| plugin.on_add(&guest_object(&gvk, black_box(&objects.realistic)), false).unwrap());
        black_box(plugin.containers);
        stats
    });
    bench.run("4e-object-copy-native", "copy a cached object into an owned record and drop it, native", || {
        measure(|| drop(black_box(guest_object(&gvk, black_box(&objects.realistic)))))
    });

    bench.run_ratio("ratio-decode", "decode handler, wasm (3) / native (4c)", || {
        let mut instance = start(&decode, Grants::none(), json!({}));
        let mut plugin = PodDecoder::default();
        measure_ratio(|| handle(&mut instance, &realistic), || plugin.on_add(black_box(&prebuilt), false).unwrap())
    });
    bench.run_ratio("ratio-labels", "labels handler, wasm (2) / native with the copy (4b)", || {
        let mut instance = start(&labels, Grants::none(), json!({}));
        let mut plugin = LabelCounter::default();
        measure_ratio(
            || handle(&mut instance, &realistic),
            || plugin.on_add(&guest_object(&gvk, black_box(&objects.realistic)), false).unwrap(),
        )
    });

    bench.run("5a-lister-get", "event + one `lister.get` of the realistic Pod", || {
        event_bench(&lister, pods_granted.clone(), json!({}), &realistic)
    });
    bench.run("5b-lister-get-minimal", "event + one `lister.get` of a minimal Pod", || {
        event_bench(&lister, pods_granted.clone(), json!({"name": objects.minimal.name()}), &realistic)
    });
    bench.run("5c-lister-get-missing", "event + one `lister.get` answering not-found", || {
        event_bench(&lister, pods_granted.clone(), json!({"name": "no-such-pod"}), &realistic)
    });

    for (id, what, plugin) in [
        ("6a-start-empty", "`PluginInstance::start` (store + instantiate + init), empty guest", &empty),
        ("6b-start-decode", "`PluginInstance::start`, decode guest (k8s-openapi linked)", &decode),
    ] {
        bench.run(id, what, || {
            measure_batches(|iters| {
                let mut live = Vec::with_capacity(iters as usize);
                let t = Instant::now();
                for _ in 0..iters {
                    live.push(start(plugin, Grants::none(), json!({})));
                }
                let took = t.elapsed();
                drop(live);
                took
            })
        });
    }

    for (id, what, cache, wasm) in [
        ("7a-load-cached-empty", "`LoadedPlugin::load`, warm compile cache, empty guest", true, guests::BENCH_EMPTY),
        ("7b-load-cached-decode", "`LoadedPlugin::load`, warm compile cache, decode guest", true, guests::BENCH_DECODE),
        ("7c-load-nocache-empty", "`LoadedPlugin::load`, no cache (compiles), empty guest", false, guests::BENCH_EMPTY),
        ("7d-load-nocache-decode", "`LoadedPlugin::load`, no cache (compiles), decode guest", false, guests::BENCH_DECODE),
    ] {
        bench.run(id, what, || {
            let uncached;
            let engine = if cache {
                &engine
            } else {
                uncached = PluginEngine::new(None).expect("engine");
                &uncached
            };
            measure(|| drop(black_box(load(engine, wasm))))
        });
    }
    for (id, what, wasm) in [
        ("7e-read-decode-wasm", "part of 7b: read the .wasm file", guests::BENCH_DECODE),
    ] {
        bench.run(id, what, || measure(|| drop(black_box(std::fs::read(wasm).unwrap()))));
    }
    let decode_wasm = std::fs::read(guests::BENCH_DECODE).unwrap();
    bench.run("7f-sha256-decode-wasm", "part of 7b: SHA-256 of the .wasm (its identity)", || {
        use sha2::Digest;
        measure(|| {
            black_box(sha2::Sha256::digest(black_box(&decode_wasm)));
        })
    });

    bench.run("8a-empty-metadata-only", "empty call, realistic labels, no spec/status", || {
        event_bench(&empty, Grants::none(), json!({}), &Objects::add(&objects.metadata_only))
    });
    bench.run("8b-empty-minimal", "empty call, minimal Pod (name + namespace)", || {
        event_bench(&empty, Grants::none(), json!({}), &Objects::add(&objects.minimal))
    });

    print_report(&bench, &objects, rss);
}

/// `VmRSS` of this process, in KiB.
fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS in /proc/self/status");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS in kB")
}

/// RSS per live instance of `plugin` in KiB: idle after `start`, and after each handled `obj`.
fn rss_per_instance(plugin: &LoadedPlugin, obj: &Arc<CachedObject>) -> (f64, f64) {
    let gvk = pod_gvk();
    // One instance first, so what every instance shares (code, engine state) is not counted.
    let warm = start(plugin, Grants::none(), json!({}));
    let before = vm_rss_kib();
    let mut live: Vec<PluginInstance> = (0..RSS_INSTANCES).map(|_| start(plugin, Grants::none(), json!({}))).collect();
    let idle = vm_rss_kib();
    for instance in &mut live {
        instance.handle(&gvk, &Objects::add(obj)).unwrap();
    }
    let touched = vm_rss_kib();
    drop((warm, live));
    let per = |kib: u64| kib.saturating_sub(before) as f64 / RSS_INSTANCES as f64;
    (per(idle), per(touched))
}

/// `1234567.8` as `1,234,568`.
fn ns(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn us(value_ns: f64) -> String {
    format!("{:.2} µs", value_ns / 1000.0)
}

/// A goal's text and whether the run met it.
fn goal(bench: &Bench, id: &str) -> Option<(String, bool)> {
    let m = |id: &str| bench.median(id);
    let verdict = |text: String, met: bool| Some((text, met));
    match id {
        "1-empty" => verdict("< 1 µs".into(), m(id)? < 1000.0),
        "2-labels-wasm" => verdict("≤ 1.5 µs".into(), m(id)? <= 1500.0),
        "3-decode-wasm" => {
            // Prefer the ratio timed in alternating batches: both sides see the same load.
            let interleaved = bench.ratios.get("ratio-decode").map(|(_, s)| s.median);
            let ratio = interleaved.or_else(|| Some(m(id)? / m("4c-decode-native")?))?;
            verdict(format!("≤ 1.5× native: {ratio:.2}×"), ratio <= 1.5)
        }
        "5a-lister-get" => {
            let get = m(id)? - m("1-empty")?;
            verdict(format!("get < 2 µs: {}", us(get)), get < 2000.0)
        }
        "7a-load-cached-empty" | "7b-load-cached-decode" => verdict("< 1 ms".into(), m(id)? < 1e6),
        _ => None,
    }
}

fn print_report(bench: &Bench, objects: &Objects, rss: Option<(f64, f64)>) {
    println!("| id | what | median ns/op | p99 ns/op | min ns/op | goal | |");
    println!("|---|---|--:|--:|--:|---|---|");
    for (id, (what, stats)) in &bench.results {
        let (goal_text, verdict) = match goal(bench, id) {
            Some((text, true)) => (text, "met"),
            Some((text, false)) => (text, "**missed**"),
            None => (String::new(), ""),
        };
        println!("| {id} | {what} | {} | {} | {} | {goal_text} | {verdict} |", ns(stats.median), ns(stats.p99), ns(stats.min));
    }

    if !bench.ratios.is_empty() {
        println!("\n| ratio, timed in alternating batches | median | middle half |\n|---|--:|--:|");
        for (id, (what, s)) in &bench.ratios {
            println!("| {id}: {what} | {:.2}× | {:.2}–{:.2}× |", s.median, s.q25, s.q75);
        }
    }

    let m = |id: &str| bench.median(id);
    let mut derived: Vec<(String, String)> = Vec::new();
    let mut push = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            derived.push((name.to_owned(), value));
        }
    };
    push("labels handler, wasm / native (2 / 4a)", m("2-labels-wasm").zip(m("4a-labels-native")).map(|(w, n)| format!("{:.0}×", w / n)));
    push("labels handler, wasm / native with copy (2 / 4b)", m("2-labels-wasm").zip(m("4b-labels-native-copy")).map(|(w, n)| format!("{:.2}×", w / n)));
    push("decode handler, wasm / native (3 / 4c)", m("3-decode-wasm").zip(m("4c-decode-native")).map(|(w, n)| format!("{:.2}×", w / n)));
    push("decode handler, wasm / native with copy (3 / 4d)", m("3-decode-wasm").zip(m("4d-decode-native-copy")).map(|(w, n)| format!("{:.2}×", w / n)));
    push("labels handler beyond the empty call (2 − 1)", m("2-labels-wasm").zip(m("1-empty")).map(|(a, b)| us(a - b)));
    push("one `lister.get` of the realistic Pod (5a − 1)", m("5a-lister-get").zip(m("1-empty")).map(|(a, b)| us(a - b)));
    push("one `lister.get` of a minimal Pod (5b − 1)", m("5b-lister-get-minimal").zip(m("1-empty")).map(|(a, b)| us(a - b)));
    push("host-call round trip, nothing returned (5c − 1)", m("5c-lister-get-missing").zip(m("1-empty")).map(|(a, b)| us(a - b)));
    push("body crossing, 3.5 KB vs none (1 − 8a)", m("1-empty").zip(m("8a-empty-metadata-only")).map(|(a, b)| us(a - b)));
    push("labels + identity crossing (8a − 8b)", m("8a-empty-metadata-only").zip(m("8b-empty-minimal")).map(|(a, b)| us(a - b)));
    push("`start` beyond one empty call (6a − 8b)", m("6a-start-empty").zip(m("8b-empty-minimal")).map(|(a, b)| us(a - b)));
    push(
        "cached load not spent reading and hashing (7b − 7e − 7f)",
        m("7b-load-cached-decode").zip(m("7e-read-decode-wasm")).zip(m("7f-sha256-decode-wasm")).map(|((a, b), c)| us(a - b - c)),
    );
    if let Some((idle, touched)) = rss {
        push(&format!("RSS per live instance, idle after `start` ({RSS_INSTANCES} instances)"), Some(format!("{idle:.0} KiB")));
        push("RSS per live instance, after one realistic-Pod event", Some(format!("{touched:.0} KiB")));
    }
    if !derived.is_empty() {
        println!("\n| derived | value |\n|---|--:|");
        for (name, value) in derived {
            println!("| {name} | {value} |");
        }
    }

    println!("\n| object (as cached: managed fields stripped) | body bytes | labels |\n|---|--:|--:|");
    for (name, obj) in [("realistic Pod", &objects.realistic), ("metadata only", &objects.metadata_only), ("minimal Pod", &objects.minimal)] {
        println!("| {name} | {} | {} |", obj.body().len(), obj.labels().len());
    }

    println!("\n| component | .wasm bytes |\n|---|--:|");
    for (package, path) in guests::ALL.iter().filter(|(p, _)| p.starts_with("guest-bench-") || !p.starts_with("guest-")) {
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        println!("| {package} | {} |", ns(bytes as f64));
    }

    let failures = FAILURES.load(Ordering::Relaxed);
    if failures > 0 {
        println!(
            "\n{failures} call(s) or start(s) failed during this run (see stderr): on a loaded machine a preempted call can overrun the 100 ms wall-clock deadline."
        );
    }
}
