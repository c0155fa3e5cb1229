//! `/metrics` of the whole host against the embedded dev cluster, scraped over HTTP and parsed
//! with a Prometheus text parser (`prometheus-parse`): after a known sequence of events, traps of
//! each kind, dropped log output, lister reads and swaps (one failed, one done), every counter
//! says exactly what happened; a plugin granted writes shows its writes series at 0. Also checks
//! that `deploy/grafana-dashboard.json` queries only metrics the host exports.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use prometheus_parse::{Sample, Scrape, Value};
use serde_json::json;
use wasmformer::config::HostConfig;
use wasmformer::plugin::PluginEngine;
use wasmformer::runtime::{ReloadOutcome, Runtime, RuntimeOptions};
use wasmformer_tests::{Recorded, guests, with_custom_section};

const WAIT: Duration = Duration::from_secs(30);
const NS: &str = "metered";

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    }))
    .unwrap()
}

fn short_digest(wasm: &[u8]) -> String {
    hex_digest(wasm)[..12].to_owned()
}

fn hex_digest(wasm: &[u8]) -> String {
    wasmformer::plugin::content_digest(wasm)
}

/// GETs `url` with `accept`; returns the content type and body.
async fn get(url: String, accept: Option<&'static str>) -> (String, String) {
    tokio::task::spawn_blocking(move || {
        let mut request = ureq::get(&url);
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        let mut response = request.call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (content_type, response.body_mut().read_to_string().unwrap())
    })
    .await
    .unwrap()
}

fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("the exposition parses")
}

/// The value of the one sample of `metric` whose labels include `labels`; 0 if there is none.
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<&Sample> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect();
    assert!(
        matching.len() <= 1,
        "{metric}{labels:?} matches {} series",
        matching.len()
    );
    match matching.first().map(|s| &s.value) {
        None => 0.0,
        Some(Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v)) => *v,
        Some(Value::Histogram(buckets)) => buckets.iter().map(|b| b.count).fold(0.0, f64::max),
        Some(other) => panic!("{metric}: unexpected {other:?}"),
    }
}

async fn wait_calls(runtime: &Runtime, expected: &[(&str, u64)]) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let statuses = runtime.statuses().await;
        let done = expected.iter().all(|(name, calls)| {
            statuses
                .iter()
                .any(|s| s.name == *name && s.calls >= *calls)
        });
        if done {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "calls did not reach {expected:?}: {statuses:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_events_traps_lister_reads_and_swaps() {
    let (_dev, client) = wasmformer_tests::dev_cluster_with_namespace(NS).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    let dir = tempfile::tempdir().unwrap();
    let rec_wasm = std::fs::read(guests::RECORDER).unwrap();
    let rec_path = dir.path().join("rec.wasm");
    std::fs::write(&rec_path, &rec_wasm).unwrap();
    let plugin = |name: &str, wasm: &str, extra: &str| {
        format!(
            "  - name: {name}\n    wasm: {wasm}\n    handles: [{{apiVersion: v1, kind: Pod, namespace: {NS}}}]\n{extra}"
        )
    };
    let yaml = [
        "plugins:\n".to_owned(),
        plugin(
            "rec",
            &rec_path.display().to_string(),
            // Granted Events, which it never records: its writes series shows at 0.
            "    config: {lookup: true}\n    events: true\n",
        ),
        plugin("pan", guests::PANIC, ""),
        plugin(
            "mem",
            guests::MEMORY_HOG,
            // Growing to the limit takes over the default 100 ms deadline on a loaded machine
            // (CI once saw `deadline`, not `memory`): the deadline must not come first.
            "    limits: {memoryBytes: 16777216, deadline: 10s}\n",
        ),
        plugin(
            "loop",
            guests::INFINITE_LOOP,
            // Long enough that its other calls never overrun it on a loaded machine.
            "    limits: {deadline: 300ms}\n",
        ),
        plugin("flood", guests::LOG_FLOOD, "    limits: {deadline: 5s}\n"),
    ]
    .concat();
    let config =
        HostConfig::parse(&yaml, dir.path().to_owned()).unwrap_or_else(|p| panic!("{p:#?}"));
    let engine = Arc::new(
        PluginEngine::new(Some(
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
        ))
        .unwrap(),
    );
    let recorded = Recorded::default();
    let options = RuntimeOptions {
        log_observer: Some(recorded.observer()),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(config, client.clone(), engine, options).await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "plugins did not sync: {:#?}",
        runtime.statuses().await
    );
    let (admin, _task) =
        wasmformer::admin::serve("127.0.0.1:0".parse().unwrap(), runtime.clone(), None)
            .await
            .unwrap();

    // Two live adds for every plugin: `a` is handled, `boom-1` makes each test guest fail its
    // own way.
    for name in ["a", "boom-1"] {
        pods.create(&PostParams::default(), &pod(name))
            .await
            .unwrap();
    }
    wait_calls(
        &runtime,
        &[
            ("rec", 2),
            ("pan", 2),
            ("mem", 2),
            ("loop", 2),
            ("flood", 2),
        ],
    )
    .await;

    // A swap that fails (the new version's init refuses), then one that succeeds.
    std::fs::write(&rec_path, std::fs::read(guests::INIT_FAILS).unwrap()).unwrap();
    let failed = runtime.reload_plugin("rec", false).await.unwrap();
    assert!(matches!(failed, ReloadOutcome::Failed { .. }), "{failed:?}");
    let rec_v2 = with_custom_section(&rec_wasm, "wasmformer-test-version", b"v2");
    std::fs::write(&rec_path, &rec_v2).unwrap();
    let swapped = runtime.reload_plugin("rec", false).await.unwrap();
    assert!(
        matches!(swapped, ReloadOutcome::Swapped { .. }),
        "{swapped:?}"
    );
    pods.create(&PostParams::default(), &pod("c"))
        .await
        .unwrap();
    wait_calls(
        &runtime,
        &[
            ("rec", 3),
            ("pan", 3),
            ("mem", 3),
            ("loop", 3),
            ("flood", 3),
        ],
    )
    .await;
    recorded.wait_for("rec", 3, WAIT).await;

    let (content_type, text) = get(format!("http://{admin}/metrics"), None).await;
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let scrape = parse(&text);
    // On a failure, the whole exposition and each plugin's last error say what each call did.
    let context = format!("{text}\nstatuses: {:#?}", runtime.statuses().await);
    let (v1, v2) = (short_digest(&rec_wasm), short_digest(&rec_v2));
    let calls = |plugin: &str, version: &str, result: &str| {
        value(
            &scrape,
            "wasmformer_handler_calls_total",
            &[
                ("plugin", plugin),
                ("version", version),
                ("event", "add"),
                ("result", result),
            ],
        )
    };
    let v = |name: &str| short_digest(&std::fs::read(name).unwrap());
    for (plugin, version, result, expected) in [
        ("rec", v1.clone(), "ok", 2.0),
        ("rec", v2.clone(), "ok", 1.0),
        ("pan", v(guests::PANIC), "ok", 2.0),
        ("pan", v(guests::PANIC), "trap", 1.0),
        ("mem", v(guests::MEMORY_HOG), "memory", 1.0),
        ("mem", v(guests::MEMORY_HOG), "ok", 2.0),
        ("loop", v(guests::INFINITE_LOOP), "deadline", 1.0),
        ("loop", v(guests::INFINITE_LOOP), "ok", 2.0),
        ("flood", v(guests::LOG_FLOOD), "ok", 3.0),
    ] {
        assert_eq!(
            calls(plugin, &version, result),
            expected,
            "{plugin} {result}: {context}"
        );
    }
    assert_eq!(
        value(
            &scrape,
            "wasmformer_handler_duration_seconds",
            &[("plugin", "rec"), ("event", "add")]
        ),
        3.0,
        "count of the histogram"
    );
    // No Pod is deleted: the delete series of a plugin that handles Pods shows at 0 all the same.
    let deletes = format!(
        r#"wasmformer_handler_calls_total{{plugin="flood",version="{}",event="delete",result="ok"}} 0"#,
        v(guests::LOG_FLOOD)
    );
    assert!(text.contains(&deletes), "{deletes}: {context}");
    assert!(
        value(
            &scrape,
            "wasmformer_plugin_log_dropped_bytes_total",
            &[("plugin", "flood")]
        ) > 100_000.0,
        "{text}"
    );
    assert_eq!(
        value(
            &scrape,
            "wasmformer_plugin_log_dropped_bytes_total",
            &[("plugin", "rec")]
        ),
        0.0
    );
    assert_eq!(
        value(
            &scrape,
            "wasmformer_lister_calls_total",
            &[("plugin", "rec"), ("kind", "v1 Pod"), ("result", "ok")]
        ),
        3.0,
        "{text}"
    );
    assert_eq!(
        value(
            &scrape,
            "wasmformer_plugin_swaps_total",
            &[("plugin", "rec"), ("result", "ok")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &scrape,
            "wasmformer_plugin_swaps_total",
            &[("plugin", "rec"), ("result", "error")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &scrape,
            "wasmformer_plugin_info",
            &[
                ("plugin", "rec"),
                ("version", &v2),
                ("contract", wasmformer::plugin::CONTRACT_VERSION)
            ]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        value(
            &scrape,
            "wasmformer_plugin_info",
            &[("plugin", "rec"), ("version", &v1)]
        ),
        0.0,
        "the old version's info is gone"
    );

    // A plugin that may write has its writes series from the start, at 0 until it writes
    // (tests/writer_host.rs counts real writes).
    assert!(
        text.contains(r#"wasmformer_writes_total{plugin="rec",verb="event",result="ok"} 0"#),
        "{text}"
    );
    assert!(
        !text.contains(r#"wasmformer_writes_total{plugin="pan""#),
        "a plugin granted no writes has no writes series: {text}"
    );

    // The queue: a sync marker and three adds, all delivered.
    assert_eq!(
        value(&scrape, "workqueue_adds_total", &[("name", "rec")]),
        4.0,
        "{text}"
    );
    assert_eq!(value(&scrape, "workqueue_depth", &[("name", "rec")]), 0.0);
    assert_eq!(
        value(
            &scrape,
            "workqueue_queue_duration_seconds",
            &[("name", "rec")]
        ),
        4.0
    );
    assert_eq!(
        value(
            &scrape,
            "workqueue_work_duration_seconds",
            &[("name", "rec")]
        ),
        3.0
    );
    assert_eq!(
        value(
            &scrape,
            "workqueue_unfinished_work_seconds",
            &[("name", "rec")]
        ),
        0.0
    );
    assert_eq!(
        value(&scrape, "workqueue_retries_total", &[("name", "rec")]),
        0.0
    );
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric == "workqueue_longest_running_processor_seconds")
    );
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric == "wasmformer_queue_coalesced_total")
    );

    // One informer serves all five plugins: one series, never one per object.
    let informer = [("resource", "pods"), ("namespace", NS), ("selector", "")];
    let with = |extra: (&'static str, &'static str)| -> Vec<(&str, &str)> {
        informer.iter().copied().chain([extra]).collect()
    };
    assert_eq!(
        value(&scrape, "wasmformer_informer_objects", &informer),
        3.0,
        "{text}"
    );
    assert_eq!(value(&scrape, "wasmformer_informer_synced", &informer), 1.0);
    assert_eq!(
        value(
            &scrape,
            "wasmformer_informer_events_total",
            &with(("type", "added"))
        ),
        3.0
    );
    assert_eq!(
        value(
            &scrape,
            "wasmformer_informer_events_total",
            &with(("type", "deleted"))
        ),
        0.0
    );
    assert_eq!(
        value(
            &scrape,
            "wasmformer_informer_lists_total",
            &with(("reason", "start"))
        ),
        1.0
    );
    assert_eq!(
        value(
            &scrape,
            "wasmformer_informer_lists_total",
            &with(("reason", "410"))
        ),
        0.0
    );
    assert_eq!(
        value(
            &scrape,
            "wasmformer_informer_watch_restarts_total",
            &informer
        ),
        0.0
    );
    assert!(
        value(
            &scrape,
            "wasmformer_informer_seconds_since_last_event",
            &informer
        ) >= 0.0
    );
    assert_eq!(
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == "wasmformer_informer_objects")
            .count(),
        1
    );

    // The API client and the process.
    assert!(
        value(
            &scrape,
            "wasmformer_api_requests_total",
            &[("verb", "WATCH"), ("code", "200")]
        ) >= 1.0,
        "{text}"
    );
    assert!(
        value(
            &scrape,
            "wasmformer_api_requests_total",
            &[("verb", "GET"), ("code", "200")]
        ) >= 1.0,
        "{text}"
    );
    assert!(value(&scrape, "process_resident_memory_bytes", &[]) > 1_000_000.0);
    assert!(value(&scrape, "process_open_fds", &[]) > 0.0);
    assert!(value(&scrape, "process_cpu_seconds_total", &[]) > 0.0);
    assert_eq!(value(&scrape, "wasmformer_leader", &[]), 1.0);

    // OpenMetrics when asked.
    let (content_type, text) = get(
        format!("http://{admin}/metrics"),
        Some("application/openmetrics-text;version=1.0.0"),
    )
    .await;
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(text.ends_with("# EOF\n"));

    // The dashboard queries only what the host exports.
    let (_, text) = get(format!("http://{admin}/metrics"), None).await;
    let exported = exported_names(&text);
    let dashboard = wasmformer_tests::repo_root().join("deploy/grafana-dashboard.json");
    let used = dashboard_metrics(&std::fs::read_to_string(&dashboard).unwrap());
    assert!(used.len() >= 10, "the dashboard uses {used:?}");
    let unknown: Vec<&String> = used.iter().filter(|m| !exported.contains(*m)).collect();
    assert!(
        unknown.is_empty(),
        "deploy/grafana-dashboard.json queries metrics the host does not export: {unknown:?}"
    );

    // So does the README's metrics table.
    let readme = std::fs::read_to_string(wasmformer_tests::repo_root().join("README.md")).unwrap();
    let documented = readme_metrics(&readme);
    assert!(
        documented.len() >= 25,
        "the README documents {documented:?}"
    );
    let undocumented: Vec<&String> = documented
        .iter()
        .filter(|m| !exported.contains(*m) && !exported.contains(&format!("{m}_bucket")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "the README documents metrics the host does not export: {undocumented:?}"
    );
    runtime.shutdown().await;
}

/// The metric names in the first column of the README's metrics table.
fn readme_metrics(readme: &str) -> BTreeSet<String> {
    let section = &readme[readme
        .find("### Metrics")
        .expect("README has a Metrics section")..];
    let section = &section[..section.find("\n### ").unwrap_or(section.len())];
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| {
            l.split('|')
                .nth(1)
                .unwrap()
                .split(',')
                .map(|m| m.trim().trim_matches('`').to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every sample name the exposition holds (histograms as their `_bucket`/`_sum`/`_count`).
fn exported_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_owned())
        .collect()
}

/// The metric names in every PromQL expression (`expr`) of a Grafana dashboard.
fn dashboard_metrics(json: &str) -> BTreeSet<String> {
    let dashboard: serde_json::Value = serde_json::from_str(json).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    const PROMQL: &[&str] = &[
        "sum",
        "rate",
        "irate",
        "increase",
        "by",
        "without",
        "histogram_quantile",
        "le",
        "max",
        "min",
        "avg",
        "count",
        "topk",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "time",
        "clamp_min",
        "label_replace",
        "bool",
        "vector",
    ];
    let mut names = BTreeSet::new();
    for expr in exprs {
        // Drop label matchers and range selectors, then take the identifiers left.
        let mut outside = String::new();
        let mut depth = 0;
        for c in expr.chars() {
            match c {
                '{' | '[' => depth += 1,
                '}' | ']' => depth -= 1,
                _ if depth == 0 => outside.push(c),
                _ => {}
            }
        }
        for token in strip_grouping(&outside)
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        {
            if token.is_empty()
                || token.chars().next().unwrap().is_ascii_digit()
                || PROMQL.contains(&token)
            {
                continue;
            }
            names.insert(token.to_owned());
        }
    }
    names
}

/// `expr` without its `by (…)` and `without (…)` clauses (label names, not metrics).
fn strip_grouping(expr: &str) -> String {
    let mut out = expr.to_owned();
    for keyword in ["by", "without"] {
        while let Some(at) = out.match_indices(keyword).map(|(i, _)| i).find(|&i| {
            let before = out[..i]
                .chars()
                .last()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            before && out[i + keyword.len()..].trim_start().starts_with('(')
        }) {
            let close = at + out[at..].find(')').expect("a closing parenthesis");
            out.replace_range(at..=close, " ");
        }
    }
    out
}

fn collect_exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", serde_json::Value::String(expr)) => out.push(expr.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}
