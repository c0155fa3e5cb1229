//! The plugin runtime's benchmarks: what one event costs in a sandboxed instance, compared with
//! the same handler compiled natively, and what loading, instantiating and the object crossing
//! cost. Prints markdown (the tables `scripts/bench` writes into BENCHMARKS.md) on stdout and
//! progress on stderr.
//!
//! Each row is timed by the small [`harness`]: warm up, then the median and p99 of many short
//! batches' ns/op. Ratios and differences between two rows are timed again in alternating
//! batches ("pairs"), so that the machine's load changing between two rows cannot skew them.
//! Every event carries the realistic Pod of `../shared/fixtures`, admitted through a `Store` as the
//! informers would (managed fields stripped), delivered under the default limits with the
//! engine's epoch deadline armed.
//!
//! `cargo bench -p wasmformer-tests --bench runtime [-- FILTER...]` runs the benchmarks whose id
//! contains one of the filters (all of them when none is given).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use guest_bench_decode::PodDecoder;
use guest_bench_labels::LabelCounter;
use harness::{Pair, Stats, measure, measure_batches, measure_pair};
use kube::api::DynamicObject;
use kube::core::WatchEvent;
use serde_json::{Value, json};
use table::ns;
use wasmformer::cache::{CachedObject, Gvk, Store, WireObject};
use wasmformer::plugin::{
    Event, Grants, Limits, LoadedPlugin, PluginEngine, PluginInstance, PoolSettings,
};
use wasmformer_guest::Plugin;
use wasmformer_tests::{guests, pod_gvk, realistic_pod, store_with};

#[path = "runtime/harness.rs"]
mod harness;
#[path = "runtime/report.rs"]
mod report;
// Shared with the polyglot benchmark, which uses more of it.
#[allow(dead_code)]
#[path = "runtime/table.rs"]
mod table;

/// Pods in the lister's store (variants of the realistic Pod).
const STORE_PODS: usize = 1000;
/// Selects the realistic Pods of the store (all [`STORE_PODS`]), not the minimal one.
const LIST_SELECTOR: &str = "app.kubernetes.io/name=web-frontend";
/// Selects none of them, looking up the same label as [`LIST_SELECTOR`]: the two lists walk the
/// same objects and do the same lookups, so what 5d costs beyond 5e is the objects answered.
/// (Until 2026-12-05 it asked for a label no Pod has, whose lookup walks more of each object's
/// labels than `LIST_SELECTOR`'s: the pair then counted that difference too.)
const LIST_NONE_SELECTOR: &str = "app.kubernetes.io/name=no-such-app";
/// Instances started for the RSS figure.
const RSS_INSTANCES: usize = 100;
/// Pages 9e writes: 2 MiB, what 9b's guest writes (its state's bytes, then the string in them).
const FRESH_PAGES: usize = 512;
/// The size of a base page on x86_64 Linux.
const PAGE_BYTES: usize = 4096;

/// The benchmarks that ran, by id, and the filters from the command line.
struct Bench {
    filters: Vec<String>,
    results: BTreeMap<&'static str, (String, Stats)>,
    /// Pairs of operations timed in alternating batches ([`measure_pair`]).
    pairs: BTreeMap<&'static str, (String, Pair)>,
    /// Page faults per operation, where a benchmark counts them.
    page_faults: BTreeMap<&'static str, f64>,
}

impl Bench {
    fn from_args() -> Self {
        // `cargo bench` passes `--bench`; anything not an option is a filter.
        let filters = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with('-'))
            .collect();
        Self {
            filters,
            results: BTreeMap::new(),
            pairs: BTreeMap::new(),
            page_faults: BTreeMap::new(),
        }
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
        eprintln!(
            "median {:>12} ns/op  p99 {:>12} ns/op  ({} batches of {})",
            ns(stats.median),
            ns(stats.p99),
            stats.batches,
            stats.per_batch
        );
        self.results.insert(id, (what.to_owned(), stats));
    }

    fn run_pair(&mut self, id: &'static str, what: &str, bench: impl FnOnce() -> Pair) {
        if !self.wants(id) {
            return;
        }
        eprint!("pair  {id:<28} ");
        let pair = bench();
        eprintln!(
            "median ratio {:.2}×, difference {} ns/op ({} pairs)",
            pair.ratio.median,
            ns(pair.difference.median),
            pair.ratio.batches
        );
        self.pairs.insert(id, (what.to_owned(), pair));
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
        let metadata = realistic_pod()["metadata"].clone();
        let (name, namespace) = (
            metadata["name"].as_str().unwrap(),
            metadata["namespace"].as_str().unwrap(),
        );
        // The lister's view: the realistic Pod among STORE_PODS variants, and the minimal Pod.
        let variants = (1..STORE_PODS).map(|i| {
            let mut pod = realistic_pod();
            let meta = &mut pod["metadata"];
            meta["name"] = Value::from(format!("{name}-{i}"));
            meta["uid"] = Value::from(format!("{}-{i}", metadata["uid"].as_str().unwrap()));
            meta["resourceVersion"] = Value::from((1000 + i).to_string());
            pod
        });
        let minimal = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tiny", "namespace": namespace}});
        let pods = store_with(
            pod_gvk(),
            vec![],
            [realistic_pod(), minimal].into_iter().chain(variants),
        );
        let realistic = pods
            .get(namespace, name)
            .expect("realistic Pod is a valid object");
        let minimal = pods.get(namespace, "tiny").unwrap();
        let metadata_only = pods
            .admit(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata["uid"],
                "resourceVersion": metadata["resourceVersion"], "labels": metadata["labels"]}}))
            .unwrap();
        Self {
            pods,
            realistic,
            metadata_only,
            minimal,
        }
    }

    fn add(obj: &Arc<CachedObject>) -> Event {
        Event::Add {
            obj: obj.clone(),
            initial: false,
        }
    }
}

/// The object a native handler receives: kind, identity and labels packed into one string and
/// the body copied, as the host does for a wasm call.
fn guest_object(gvk: &Gvk, obj: &CachedObject) -> wasmformer_guest::Object {
    let kind = wasmformer_guest::Gvk {
        group: gvk.group.clone(),
        version: gvk.version.clone(),
        kind: gvk.kind.clone(),
    };
    let labels: Vec<(&str, &str)> = obj.labels().iter().collect();
    wasmformer_guest::Object::new(
        &kind,
        obj.namespace(),
        obj.name(),
        obj.uid(),
        obj.resource_version(),
        &labels,
        obj.body().to_owned(),
    )
}

fn load(engine: &PluginEngine, wasm: &str) -> LoadedPlugin {
    let name = Path::new(wasm)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    LoadedPlugin::load(engine, &name, Path::new(wasm)).expect("benchmark plugin loads")
}

/// Starts `plugin`; a failed start is counted and retried (see [`FAILURES`]).
fn start(plugin: &LoadedPlugin, grants: Grants, config: Value) -> PluginInstance {
    for _ in 0..3 {
        match PluginInstance::start(
            plugin.clone(),
            Limits::default(),
            grants.clone(),
            &config,
            None,
        ) {
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
    assert!(
        failures * 1000 <= instance.calls(),
        "{failures} of {} calls failed",
        instance.calls()
    );
    FAILURES.fetch_add(failures, Ordering::Relaxed);
    stats
}

/// The kind `v1 Pod`.
static POD: LazyLock<Gvk> = LazyLock::new(pod_gvk);

/// Delivers `event` about a Pod; a failure is reported and counted in the instance.
/// Decodes a watch event line as the informer does (kube's decoder into a [`WireObject`]) and
/// admits its object into `store`.
fn admit_watched(store: &Store, line: &str) {
    let event: WatchEvent<WireObject> = serde_json::from_str(black_box(line)).unwrap();
    let WatchEvent::Added(obj) = event else {
        unreachable!("an ADDED line")
    };
    black_box(store.admit_wire(obj).unwrap());
}

/// The informer's path before objects were decoded as [`WireObject`]s, reproduced: kube decodes a
/// `DynamicObject` (metadata typed, the rest a `Value`), which becomes one `Value`, loses its
/// `managedFields`, gives up its labels, and is written out as the cached body.
fn admit_dynamic(line: &str) {
    let event: WatchEvent<DynamicObject> = serde_json::from_str(black_box(line)).unwrap();
    let WatchEvent::Added(obj) = event else {
        unreachable!("an ADDED line")
    };
    let mut value = serde_json::to_value(obj).unwrap();
    let metadata = value["metadata"].as_object_mut().unwrap();
    metadata.remove("managedFields");
    let labels: BTreeMap<String, String> =
        serde_json::from_value(metadata["labels"].clone()).unwrap();
    black_box((labels, value.to_string()));
}

fn parse_value(text: &str) {
    black_box(serde_json::from_str::<Value>(black_box(text)).unwrap());
}

fn handle(instance: &mut PluginInstance, event: &Event) {
    if let Err(e) = instance.handle(&POD, black_box(event)) {
        eprint!("[call failed: {e}] ");
    }
}

/// Reconciles the key `shop/web-1` of kind Pod; a failure is reported and counted.
fn reconcile(instance: &mut PluginInstance) {
    if let Err(e) = instance.reconcile(&POD, black_box("shop"), black_box("web-1")) {
        eprint!("[reconcile failed: {e}] ");
        FAILURES.fetch_add(1, Ordering::Relaxed);
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
    let cache_dir = std::env::var_os("WASMFORMER_BENCH_CACHE_DIR")
        .map_or_else(|| temporary.path().to_owned(), Into::into);
    let size_before = vm_size_kib();
    // `WASMFORMER_BENCH_MAX_INSTANCES=N`: a smaller instance pool (valgrind cannot map the
    // default pool's 4 TiB of address space).
    let pool = std::env::var("WASMFORMER_BENCH_MAX_INSTANCES")
        .ok()
        .and_then(|n| n.parse().ok())
        .map_or_else(PoolSettings::default, |max_instances| PoolSettings {
            max_instances,
            ..PoolSettings::default()
        });
    let engine = PluginEngine::with_pool(Some(cache_dir.clone()), pool).expect("engine");
    // The instance pool reserves its address space when the engine is made.
    let reserved_kib = vm_size_kib().saturating_sub(size_before);
    // The same pool keeping nothing (`host.keepResidentBytes: 0`; the default keeps the four pages
    // an empty plugin's start writes), for the benchmarks that compare the two.
    let giving_back = PluginEngine::with_pool(
        Some(cache_dir.clone()),
        PoolSettings {
            keep_resident_bytes: 0,
            ..pool
        },
    )
    .expect("engine");
    let empty_given_back = load(&giving_back, guests::BENCH_EMPTY);
    let [empty, labels, decode, lister] = [
        guests::BENCH_EMPTY,
        guests::BENCH_LABELS,
        guests::BENCH_DECODE,
        guests::BENCH_LISTER,
    ]
    .map(|w| load(&engine, w));
    // Counted as `wasmformer run` counts a plugin's lister calls.
    let metrics = wasmformer::metrics::Metrics::new();
    let mut pods_granted = Grants::none();
    pods_granted
        .grant(objects.pods.clone())
        .count_calls(metrics.plugin("bench-lister").lister_calls());

    // Before anything else allocates and frees much: RSS per live instance.
    let rss = (bench.filters.is_empty()).then(|| {
        [&empty, &empty_given_back].map(|plugin| rss_per_instance(plugin, &objects.realistic))
    });

    let realistic = Objects::add(&objects.realistic);
    lifecycle_benches(&mut bench, &engine, &empty, &realistic);
    bench.run("1-empty", "empty call, realistic Pod", || {
        event_bench(&empty, Grants::none(), json!({}), &realistic)
    });
    let reconciler = load(&engine, guests::BENCH_RECONCILE);
    bench.run(
        "1r-reconcile-noop",
        "no-op reconcile call (a Pod key)",
        || {
            let mut instance = start(&reconciler, Grants::none(), json!({}));
            measure(|| reconcile(&mut instance))
        },
    );
    bench.run_pair(
        "pair-reconcile",
        "no-op reconcile (1r) vs empty call of a minimal Pod (8b)",
        || {
            let minimal = Objects::add(&objects.minimal);
            let mut a = start(&reconciler, Grants::none(), json!({}));
            let mut b = start(&empty, Grants::none(), json!({}));
            measure_pair(|| reconcile(&mut a), || handle(&mut b, &minimal))
        },
    );
    bench.run(
        "2-labels-wasm",
        "name + namespace + labels handler, wasm",
        || event_bench(&labels, Grants::none(), json!({}), &realistic),
    );
    bench.run("3-decode-wasm", "decode into `Pod` handler, wasm", || {
        event_bench(&decode, Grants::none(), json!({}), &realistic)
    });

    let prebuilt = guest_object(&gvk, &objects.realistic);
    bench.run(
        "4a-labels-native",
        "labels handler, native, `Object` already built",
        || {
            let mut plugin = LabelCounter::default();
            let stats = measure(|| plugin.on_add(black_box(&prebuilt), false).unwrap());
            black_box(plugin.labels + plugin.with_app + plugin.identity_bytes);
            stats
        },
    );
    bench.run(
        "4b-labels-native-copy",
        "labels handler, native, `Object` copied from the cache per call",
        || {
            let mut plugin = LabelCounter::default();
            let stats = measure(|| {
                plugin
                    .on_add(&guest_object(&gvk, black_box(&objects.realistic)), false)
                    .unwrap()
            });
            black_box(plugin.labels);
            stats
        },
    );
    bench.run(
        "4c-decode-native",
        "decode handler, native, `Object` already built",
        || {
            let mut plugin = PodDecoder::default();
            let stats = measure(|| plugin.on_add(black_box(&prebuilt), false).unwrap());
            black_box(plugin.containers);
            stats
        },
    );
    bench.run(
        "4d-decode-native-copy",
        "decode handler, native, `Object` copied from the cache per call",
        || {
            let mut plugin = PodDecoder::default();
            let stats = measure(|| {
                plugin
                    .on_add(&guest_object(&gvk, black_box(&objects.realistic)), false)
                    .unwrap()
            });
            black_box(plugin.containers);
            stats
        },
    );
    bench.run(
        "4e-object-copy-native",
        "copy a cached object into an owned record and drop it, native",
        || measure(|| drop(black_box(guest_object(&gvk, black_box(&objects.realistic))))),
    );

    let plugin_metrics = metrics.plugin("bench-metrics");
    plugin_metrics.running("0123456789abcdef", "0.3.3");
    bench.run(
        "1m-handler-metrics",
        "count and time one handler call in its plugin's metrics, as the worker does per event",
        || {
            measure(|| {
                plugin_metrics.handler_call(
                    black_box("update"),
                    wasmformer::metrics::CallResult::Ok,
                    black_box(std::time::Duration::from_micros(3)),
                )
            })
        },
    );

    bench.run(
        "5a-lister-get",
        "event + one `lister.get` of the realistic Pod",
        || event_bench(&lister, pods_granted.clone(), json!({}), &realistic),
    );
    bench.run(
        "5b-lister-get-minimal",
        "event + one `lister.get` of a minimal Pod",
        || {
            event_bench(
                &lister,
                pods_granted.clone(),
                json!({"name": objects.minimal.name()}),
                &realistic,
            )
        },
    );
    bench.run(
        "5c-lister-get-missing",
        "event + one `lister.get` answering not-found",
        || {
            event_bench(
                &lister,
                pods_granted.clone(),
                json!({"name": "no-such-pod"}),
                &realistic,
            )
        },
    );

    bench.run(
        "5d-lister-list",
        "event + one `lister.list` of 1,000 realistic Pods",
        || {
            event_bench(
                &lister,
                pods_granted.clone(),
                json!({"list": LIST_SELECTOR}),
                &realistic,
            )
        },
    );
    bench.run(
        "5f-lister-pages",
        "event + the same 1,000 Pods read a page at a time (`lister::iter_objects`, 64 a page)",
        || {
            event_bench(
                &lister,
                pods_granted.clone(),
                json!({"pages": LIST_SELECTOR}),
                &realistic,
            )
        },
    );
    bench.run(
        "5e-lister-list-none",
        "event + one `lister.list` matching no Pod (the same label, another value)",
        || {
            event_bench(
                &lister,
                pods_granted.clone(),
                json!({"list": LIST_NONE_SELECTOR}),
                &realistic,
            )
        },
    );

    for (id, what, plugin) in [
        (
            "6a-start-empty",
            "`PluginInstance::start` (store + instantiate + init), empty guest",
            &empty,
        ),
        (
            "6b-start-decode",
            "`PluginInstance::start`, decode guest (k8s-openapi linked)",
            &decode,
        ),
        (
            "6c-start-empty-given-back",
            "`PluginInstance::start`, empty guest, `keepResidentBytes: 0`",
            &empty_given_back,
        ),
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

    // A start in a slot its predecessor was just dropped from (a restart after a trap), with the
    // pool keeping the pages it wrote (the default) and giving them all back.
    bench.run_pair(
        "pair-start-kept",
        "`start` + drop, empty guest: `keepResidentBytes: 16384` (the default) vs 0",
        || {
            measure_pair(
                || drop(start(&empty, Grants::none(), json!({}))),
                || drop(start(&empty_given_back, Grants::none(), json!({}))),
            )
        },
    );

    for (id, what, cache, wasm) in [
        (
            "7a-load-cached-empty",
            "`LoadedPlugin::load`, warm compile cache, empty guest",
            true,
            guests::BENCH_EMPTY,
        ),
        (
            "7b-load-cached-decode",
            "`LoadedPlugin::load`, warm compile cache, decode guest",
            true,
            guests::BENCH_DECODE,
        ),
        (
            "7c-load-nocache-empty",
            "`LoadedPlugin::load`, no cache (compiles), empty guest",
            false,
            guests::BENCH_EMPTY,
        ),
        (
            "7d-load-nocache-decode",
            "`LoadedPlugin::load`, no cache (compiles), decode guest",
            false,
            guests::BENCH_DECODE,
        ),
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
    bench.run(
        "7e-read-decode-wasm",
        "part of 7b: read the .wasm file",
        || measure(|| drop(black_box(std::fs::read(guests::BENCH_DECODE).unwrap()))),
    );
    let decode_wasm = std::fs::read(guests::BENCH_DECODE).unwrap();
    bench.run(
        "7f-hash-decode-wasm",
        "part of 7b: BLAKE3 of the .wasm (its identity)",
        || {
            measure(|| {
                black_box(wasmformer::plugin::content_digest(black_box(&decode_wasm)));
            })
        },
    );
    bench.run(
        "7g-sha256-decode-wasm",
        "SHA-256 of the .wasm (the identity before BLAKE3)",
        || {
            use sha2::Digest;
            measure(|| {
                black_box(sha2::Sha256::digest(black_box(&decode_wasm)));
            })
        },
    );

    bench.run(
        "8a-empty-metadata-only",
        "empty call, realistic labels, no spec/status",
        || {
            event_bench(
                &empty,
                Grants::none(),
                json!({}),
                &Objects::add(&objects.metadata_only),
            )
        },
    );
    bench.run(
        "8b-empty-minimal",
        "empty call, minimal Pod (name + namespace)",
        || {
            event_bench(
                &empty,
                Grants::none(),
                json!({}),
                &Objects::add(&objects.minimal),
            )
        },
    );

    // Issue 17, item 1: what the informer spends to take in one watched object, against the
    // floor of parsing its bytes once.
    let object_text = realistic_pod().to_string();
    let event_line = format!(r#"{{"type":"ADDED","object":{object_text}}}"#);
    let admitting = wasmformer_tests::store(pod_gvk(), vec![]);
    bench.run(
        "10a-admit-watched",
        "watch event line → cached Pod (informer decode + admit)",
        || measure(|| admit_watched(&admitting, &event_line)),
    );
    bench.run(
        "10b-admit-dynamic",
        "the same through kube's DynamicObject and a Value (the path before)",
        || measure(|| admit_dynamic(&event_line)),
    );
    bench.run(
        "10c-parse-value",
        "`serde_json::from_str::<Value>` of the Pod",
        || measure(|| parse_value(&object_text)),
    );
    bench.run_pair(
        "pair-admit",
        "watched Pod → cache (10a) vs one parse of it (10c)",
        || {
            measure_pair(
                || admit_watched(&admitting, &event_line),
                || parse_value(&object_text),
            )
        },
    );

    // Ratios and differences, timed in alternating batches so that load changes cannot skew them.
    let wasm = |plugin: &LoadedPlugin, grants: &Grants, config: Value| {
        start(plugin, grants.clone(), config)
    };
    let none = Grants::none();
    bench.run_pair(
        "pair-decode",
        "decode handler: wasm (3) vs native (4c)",
        || {
            let (mut instance, mut native) =
                (wasm(&decode, &none, json!({})), PodDecoder::default());
            measure_pair(
                || handle(&mut instance, &realistic),
                || native.on_add(black_box(&prebuilt), false).unwrap(),
            )
        },
    );
    bench.run_pair(
        "pair-labels",
        "labels handler: wasm (2) vs native with the copy (4b)",
        || {
            let (mut instance, mut native) =
                (wasm(&labels, &none, json!({})), LabelCounter::default());
            measure_pair(
                || handle(&mut instance, &realistic),
                || {
                    native
                        .on_add(&guest_object(&gvk, black_box(&objects.realistic)), false)
                        .unwrap()
                },
            )
        },
    );
    // The lister guest with config `a` against config `b`, on the same event.
    let lister_pair = |a, b| {
        let (mut a, mut b) = (
            wasm(&lister, &pods_granted, a),
            wasm(&lister, &pods_granted, b),
        );
        measure_pair(|| handle(&mut a, &realistic), || handle(&mut b, &realistic))
    };
    bench.run_pair(
        "pair-list",
        "`lister.list` of 1,000 realistic Pods (5d) vs of none (5e)",
        || {
            lister_pair(
                json!({"list": LIST_SELECTOR}),
                json!({"list": LIST_NONE_SELECTOR}),
            )
        },
    );
    bench.run_pair(
        "pair-pages",
        "the 1,000 Pods read a page at a time (5f) vs a first page of none",
        || {
            lister_pair(
                json!({"pages": LIST_SELECTOR}),
                json!({"pages": LIST_NONE_SELECTOR}),
            )
        },
    );
    // A `get` of an object the guest has not fetched lately, as a list answers them: each event
    // gets the next of the store's other 999 realistic Pods (a), or as many names of Pods that do
    // not exist (b); the events and the names' formatting are alike, so a − b is the get's lookup
    // and object, out of the CPU's cache.
    let others = STORE_PODS as u64 - 1;
    bench.run_pair(
        "pair-get-each",
        "`lister.get` of each of the other 999 Pods in turn vs as many not found",
        || {
            let cycle = |name: &str| json!({"cycle": name, "count": others});
            lister_pair(cycle(objects.realistic.name()), cycle("no-such-pod"))
        },
    );
    let minimal = Objects::add(&objects.minimal);
    let metadata_only = Objects::add(&objects.metadata_only);
    for (id, what, plugin, grants, config, event, baseline) in [
        (
            "pair-labels-work",
            "labels handler (2) vs empty call (1)",
            &labels,
            &none,
            json!({}),
            &realistic,
            &realistic,
        ),
        (
            "pair-get",
            "`lister.get` of the realistic Pod (5a) vs empty call (1)",
            &lister,
            &pods_granted,
            json!({}),
            &realistic,
            &realistic,
        ),
        (
            "pair-get-minimal",
            "`lister.get` of a minimal Pod (5b) vs empty call (1)",
            &lister,
            &pods_granted,
            json!({"name": objects.minimal.name()}),
            &realistic,
            &realistic,
        ),
        (
            "pair-get-missing",
            "`lister.get` answering not-found (5c) vs empty call (1)",
            &lister,
            &pods_granted,
            json!({"name": "no-such-pod"}),
            &realistic,
            &realistic,
        ),
        (
            "pair-body",
            "empty call: realistic Pod (1) vs metadata only (8a)",
            &empty,
            &none,
            json!({}),
            &realistic,
            &metadata_only,
        ),
        (
            "pair-metadata",
            "empty call: metadata only (8a) vs minimal Pod (8b)",
            &empty,
            &none,
            json!({}),
            &metadata_only,
            &minimal,
        ),
    ] {
        bench.run_pair(id, what, || {
            let (mut a, mut b) = (wasm(plugin, grants, config), wasm(&empty, &none, json!({})));
            measure_pair(|| handle(&mut a, event), || handle(&mut b, baseline))
        });
    }

    report::print(&bench, &objects, rss, reserved_kib);
}

/// Issue 16: what an idle unload costs, and the next event to an unloaded plugin (instantiate,
/// `restore-state`, `init`, then the call): for the empty guest (no state) and for the `counter`
/// guest holding 1 MiB of state (the SDK's MessagePack, saved and read in the guest).
fn lifecycle_benches(
    bench: &mut Bench,
    engine: &PluginEngine,
    empty: &LoadedPlugin,
    event: &Event,
) {
    let counter = load(engine, guests::COUNTER);
    let grow = Objects::add(&wasmformer_tests::pod(
        "ns",
        &format!("grow-{}", 1 << 20),
        1,
    ));
    // Page faults taken in the timed part of the last run of `reactivated`: (faults, events).
    let faults = std::cell::Cell::new((0, 0));
    let reactivated = |plugin: &LoadedPlugin, state: bool| {
        faults.set((0, 0));
        let mut instance = start(plugin, Grants::none(), json!({}));
        if state {
            handle(&mut instance, &grow);
        }
        measure_batches(|iters| {
            let mut took = std::time::Duration::ZERO;
            for _ in 0..iters {
                instance.unload().expect("unload");
                let (started, faults_before) = (Instant::now(), page_faults());
                handle(&mut instance, event);
                took += started.elapsed();
                let (taken, events) = faults.get();
                faults.set((taken + page_faults() - faults_before, events + 1));
            }
            took
        })
    };
    bench.run(
        "9a-reactivate-empty",
        "event to an unloaded plugin, empty guest (no state)",
        || reactivated(empty, false),
    );
    bench.run(
        "9b-reactivate-1mib",
        "event to an unloaded plugin with 1 MiB of state",
        || reactivated(&counter, true),
    );
    if let (true, (taken, events @ 1..)) = (bench.wants("9b-reactivate-1mib"), faults.get()) {
        bench
            .page_faults
            .insert("9b-reactivate-1mib", taken as f64 / events as f64);
    }
    bench.run(
        "9d-code-reload",
        "compiled code released by an unload, mapped again from the compile cache (part of 9a and 9b)",
        || {
            let plugin = load(engine, guests::BENCH_EMPTY);
            measure_batches(|iters| {
                let mut took = std::time::Duration::ZERO;
                for _ in 0..iters {
                    assert!(plugin.release_code());
                    let started = Instant::now();
                    plugin.load_code().expect("load the code again");
                    took += started.elapsed();
                }
                took
            })
        },
    );
    bench.run(
        "9c-unload-1mib",
        "unload with 1 MiB of state (save-state)",
        || {
            let mut instance = start(&counter, Grants::none(), json!({}));
            handle(&mut instance, &grow);
            measure_batches(|iters| {
                let mut took = std::time::Duration::ZERO;
                for _ in 0..iters {
                    handle(&mut instance, event);
                    let started = Instant::now();
                    instance.unload().expect("unload");
                    took += started.elapsed();
                }
                took
            })
        },
    );
    bench.run(
        "9e-fresh-pages-2mib",
        "2 MiB of fresh memory written a page at a time: the floor of 9b on this machine, whose guest writes 1 MiB of state bytes and a 1 MiB string read from them into memory given back at the unload",
        || {
            let pages = FreshPages::new(FRESH_PAGES * PAGE_BYTES);
            measure_batches(|iters| {
                let mut took = std::time::Duration::ZERO;
                for _ in 0..iters {
                    pages.give_back();
                    let started = Instant::now();
                    pages.touch();
                    took += started.elapsed();
                }
                took
            })
        },
    );
}

/// Page faults this process has taken so far (minor and major: `getrusage`).
fn page_faults() -> u64 {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(
            libc::getrusage(libc::RUSAGE_SELF, &mut usage),
            0,
            "getrusage"
        );
        usage
    };
    (usage.ru_minflt + usage.ru_majflt) as u64
}

/// Anonymous memory given back to the kernel and written again, as a pool slot's linear memory
/// is after an unload: each first write to a page takes a fault and a fresh zeroed page.
struct FreshPages {
    base: *mut u8,
    len: usize,
}

impl FreshPages {
    fn new(len: usize) -> Self {
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap {len} bytes");
        // Base pages, as the guest's memory gets them (a huge page would take one fault for all).
        // SAFETY: the range is the mapping made above.
        unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) };
        Self {
            base: base.cast(),
            len,
        }
    }

    /// Writes one byte of every page.
    fn touch(&self) {
        for offset in (0..self.len).step_by(PAGE_BYTES) {
            // SAFETY: in bounds of the mapping, which lives as long as `self`.
            unsafe { self.base.add(offset).write_volatile(1) };
        }
    }

    /// Gives every page back (`MADV_DONTNEED`): the next write to each faults again.
    fn give_back(&self) {
        // SAFETY: the range is this mapping.
        let done = unsafe { libc::madvise(self.base.cast(), self.len, libc::MADV_DONTNEED) };
        assert_eq!(done, 0, "madvise(MADV_DONTNEED)");
    }
}

impl Drop for FreshPages {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// `VmRSS` of this process, in KiB.
fn vm_rss_kib() -> u64 {
    proc_status_kib("VmRSS:")
}

/// `VmSize` (address space mapped) of this process, in KiB.
fn vm_size_kib() -> u64 {
    proc_status_kib("VmSize:")
}

fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    line.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} in kB"))
}

/// RSS per instance of `plugin` in KiB: live and idle after `start`, after each handled `obj`,
/// and unloaded (`lifecycle.unloadAfter`) after that.
fn rss_per_instance(plugin: &LoadedPlugin, obj: &Arc<CachedObject>) -> (f64, f64, f64) {
    let gvk = pod_gvk();
    // One instance first, so what every instance shares (code, engine state) is not counted.
    let warm = start(plugin, Grants::none(), json!({}));
    let before = vm_rss_kib();
    let mut live: Vec<PluginInstance> = (0..RSS_INSTANCES)
        .map(|_| start(plugin, Grants::none(), json!({})))
        .collect();
    let idle = vm_rss_kib();
    for instance in &mut live {
        instance.handle(&gvk, &Objects::add(obj)).unwrap();
    }
    let touched = vm_rss_kib();
    for instance in &mut live {
        instance.unload().expect("unload");
    }
    let unloaded = vm_rss_kib();
    drop((warm, live));
    let per = |kib: u64| kib.saturating_sub(before) as f64 / RSS_INSTANCES as f64;
    (per(idle), per(touched), per(unloaded))
}
