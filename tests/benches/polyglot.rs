//! What a Python or JavaScript plugin costs compared with a Rust one: per-call cost of an empty
//! handler, a labels handler and a full decode on the realistic Pod, instantiation, cold compile
//! and cached load, and resident memory per instance. Prints markdown on stdout (written into
//! BENCHMARKS.md by `scripts/bench-polyglot`, which builds the Python and JavaScript bench guests
//! first and passes their paths in `WASMFORMER_BENCH_PYTHON` and `WASMFORMER_BENCH_JS`).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasmformer::cache::CachedObject;
use wasmformer::plugin::{Event, Grants, Limits, LoadedPlugin, PluginEngine, PluginInstance};
use wasmformer_tests::{guests, pod_gvk, realistic_pod, store};

// Shared with the runtime benchmark, which uses more of it.
#[allow(dead_code)]
#[path = "runtime/harness.rs"]
mod harness;

// The runtime benchmark's tables (this one needs no text columns).
#[allow(dead_code)]
#[path = "runtime/table.rs"]
mod table;

use harness::{Stats, measure};
use table::{Table, mib, ns};

/// Instances started for the RSS figure.
const RSS_INSTANCES: usize = 10;

struct Lang {
    name: &'static str,
    /// The component for each handler (empty, labels, decode) and the config that selects it.
    handlers: [(String, Value); 3],
}

fn languages() -> Vec<Lang> {
    let rust = Lang {
        name: "Rust",
        handlers: [
            (guests::BENCH_EMPTY.into(), json!({})),
            (guests::BENCH_LABELS.into(), json!({})),
            (guests::BENCH_DECODE.into(), json!({})),
        ],
    };
    let mut langs = vec![rust];
    for (name, var) in [
        ("Python", "WASMFORMER_BENCH_PYTHON"),
        ("JavaScript", "WASMFORMER_BENCH_JS"),
    ] {
        let wasm = std::env::var(var).unwrap_or_else(|_| {
            panic!("{var} is not set: run scripts/bench-polyglot, which builds the bench guests")
        });
        langs.push(Lang {
            name,
            handlers: [
                (wasm.clone(), json!({"mode": "empty"})),
                (wasm.clone(), json!({"mode": "labels"})),
                (wasm, json!({"mode": "decode"})),
            ],
        });
    }
    langs
}

fn load(engine: &PluginEngine, wasm: &str) -> LoadedPlugin {
    LoadedPlugin::load(engine, "bench", Path::new(wasm)).expect("bench plugin loads")
}

/// Starts an instance under the default limits but a 2 s deadline: an interpreter's init takes
/// 50-70 ms on a loaded machine and can overrun the default 100 ms (calls are timed, not limited).
fn start(plugin: &LoadedPlugin, config: &Value) -> PluginInstance {
    let limits = Limits {
        deadline: std::time::Duration::from_secs(2),
        ..Limits::default()
    };
    PluginInstance::start(plugin.clone(), limits, Grants::none(), config, None)
        .expect("bench plugin starts")
}

fn call_stats(plugin: &LoadedPlugin, config: &Value, event: &Event) -> Stats {
    let mut instance = start(plugin, config);
    let gvk = pod_gvk();
    let stats = measure(|| {
        if let Err(e) = instance.handle(&gvk, std::hint::black_box(event)) {
            eprint!("[call failed: {e}] ");
        }
    });
    assert!(
        instance.failures() * 1000 <= instance.calls(),
        "{} of {} calls failed",
        instance.failures(),
        instance.calls()
    );
    stats
}

/// The median of `runs` timings of `op`.
fn median_of(runs: usize, mut op: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            op();
            started.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// This process's resident memory, in bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn main() {
    let langs = languages();
    let pods = store(pod_gvk(), vec![]);
    let realistic: std::sync::Arc<CachedObject> =
        pods.admit(realistic_pod()).expect("realistic Pod");
    let event = Event::Add {
        obj: realistic,
        initial: false,
    };
    let cache = tempfile::tempdir().expect("compile cache");
    let cached = PluginEngine::new(Some(cache.path().to_owned())).expect("engine");
    let uncached = PluginEngine::new(None).expect("engine");

    // Per-call cost: [lang][handler] median ns.
    let mut calls: Vec<[Stats; 3]> = Vec::new();
    let mut loads = Vec::new();
    for lang in &langs {
        let mut row = Vec::new();
        for (i, (wasm, config)) in lang.handlers.iter().enumerate() {
            eprint!("bench {} {} ", lang.name, ["empty", "labels", "decode"][i]);
            let plugin = load(&cached, wasm);
            let stats = call_stats(&plugin, config, &event);
            eprintln!("median {} ns/op", ns(stats.median));
            row.push(stats);
        }
        calls.push(row.try_into().ok().unwrap());

        // Loading and starting the empty handler's component (Python and JS: the one component).
        let (wasm, config) = &lang.handlers[0];
        let size = std::fs::metadata(wasm).unwrap().len() as usize;
        eprintln!("bench {} cold compile", lang.name);
        let cold = median_of(1, || drop(load(&uncached, wasm)));
        let warm = median_of(5, || drop(load(&cached, wasm)));
        let plugin = load(&cached, wasm);
        let instantiate = median_of(21, || drop(start(&plugin, config)));
        let memory = plugin.memory_at_start().expect("instantiate");
        let before = rss();
        let instances: Vec<PluginInstance> =
            (0..RSS_INSTANCES).map(|_| start(&plugin, config)).collect();
        let per_instance = rss().saturating_sub(before) / RSS_INSTANCES;
        drop(instances);
        loads.push((size, cold, warm, instantiate, memory, per_instance));
    }

    let figures: Vec<String> = langs
        .iter()
        .flat_map(|l| {
            [
                format!("{} median ns/op", l.name),
                "p99".to_owned(),
                "× Rust".to_owned(),
            ]
        })
        .collect();
    let mut table = Table::new("handler, realistic Pod", &figures);
    for (i, what) in [
        "empty handler",
        "labels handler (name, namespace, labels)",
        "full decode (parse the body, count containers)",
    ]
    .iter()
    .enumerate()
    {
        let rust = calls[0][i].median;
        let mut cells = vec![what.to_string()];
        for row in &calls {
            cells.push(ns(row[i].median));
            cells.push(ns(row[i].p99));
            cells.push(format!("{:.1}×", row[i].median / rust));
        }
        table.row(cells);
    }
    table.print();
    println!();
    let figures = [
        "size".to_owned(),
        "cold compile".to_owned(),
        "cached load".to_owned(),
        "instantiate + init".to_owned(),
        "largest memory at start".to_owned(),
        format!("RSS per instance ({RSS_INSTANCES} started)"),
    ];
    let mut table = Table::new("plugin (empty handler's component)", &figures);
    for (lang, (size, cold, warm, instantiate, memory, per_instance)) in langs.iter().zip(&loads) {
        table.row(vec![
            lang.name.to_owned(),
            mib(*size),
            format!("{:.1} s", cold.as_secs_f64()),
            format!("{:.1} ms", warm.as_secs_f64() * 1e3),
            format!("{:.2} ms", instantiate.as_secs_f64() * 1e3),
            mib(*memory),
            mib(*per_instance),
        ]);
    }
    table.print();
}
