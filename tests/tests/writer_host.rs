//! The writer in the whole host, against the embedded dev cluster: each bad write of the issue's
//! list (a manifest that is not JSON, a kind or namespace outside the grant, a 5 MiB manifest,
//! 100,000 writes in one call, an apply without apiVersion/kind/name, writes from `init`, an API
//! server answering 500, 429 or 403, or not answering) gives an error naming the plugin and the
//! cause, while another plugin on the same events receives every one of them in order and the
//! writing plugin goes on to its next event. Each outcome is counted per plugin in `/status`
//! (`writes`) and in `/metrics` (`wasmformer_writes_total` by verb and result, refused by the
//! grant told apart from forbidden by the server).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use wasmformer::config::HostConfig;
use wasmformer::dispatch::StatusReport;
use wasmformer::plugin::PluginEngine;
use wasmformer::runtime::{Runtime, RuntimeOptions};
use wasmformer::writer::WriteTally;
use wasmformer_devcluster::{DevCluster, DevClusterConfig, Failure, RequestFilter, Verb};
use wasmformer_tests::{Recorded, guests};

const WAIT: Duration = Duration::from_secs(60);
/// Where the events come from.
const NS: &str = "w";
/// Where the probe may write ConfigMaps.
const OUT: &str = "out";

fn namespace(name: &str) -> Namespace {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

fn cm(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": {"k": "v"}})
}

fn apply(manifest: Value) -> Value {
    json!({"op": "apply", "manifest": manifest.to_string()})
}

async fn status(runtime: &Runtime, name: &str) -> StatusReport {
    runtime
        .statuses()
        .await
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no plugin {name}"))
}

async fn get(url: String) -> String {
    tokio::task::spawn_blocking(move || {
        ureq::get(&url)
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
            .body_mut()
            .read_to_string()
            .unwrap()
    })
    .await
    .unwrap()
}

/// The value of `wasmformer_writes_total` for the probe's `verb` and `result`, if the series is
/// exported.
fn writes_total(metrics: &str, verb: &str, result: &str) -> Option<f64> {
    let series =
        format!(r#"wasmformer_writes_total{{plugin="probe",verb="{verb}",result="{result}"}} "#);
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_writes_fail_naming_plugin_and_cause_are_counted_and_the_other_plugin_sees_every_event()
{
    let dev = DevCluster::start(DevClusterConfig::default())
        .await
        .expect("dev cluster starts");
    let client = dev.client().expect("client");
    for name in [NS, OUT] {
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace(name))
            .await
            .unwrap();
    }
    let yaml = format!(
        "plugins:
  - name: probe
    wasm: {probe}
    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {NS}}}]
    write: [{{apiVersion: v1, kind: ConfigMap, verbs: [apply, delete], namespaces: [{OUT}]}}]
    limits: {{deadline: 10s, writesPerCall: 20, writeQps: 1000, writeBurst: 1000, writeTimeout: 2s}}
  - name: rec
    wasm: {rec}
    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {NS}}}]
  - name: early
    wasm: {probe}
    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {NS}}}]
    write: [{{apiVersion: v1, kind: ConfigMap, verbs: [apply]}}]
    config: {{writeInInit: true}}
",
        probe = guests::WRITER_PROBE,
        rec = guests::RECORDER
    );
    let config = HostConfig::parse(&yaml, "/".into()).unwrap_or_else(|p| panic!("{p:#?}"));
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
    let (admin, _task) =
        wasmformer::admin::serve("127.0.0.1:0".parse().unwrap(), runtime.clone(), None)
            .await
            .unwrap();

    // Writes from `init`: that plugin does not start, says why, and the others run.
    let early = status(&runtime, "early").await;
    let early_error = early.last_error.map(|e| e.message).unwrap_or_default();
    assert!(
        early_error.contains("plugin early")
            && early_error.contains("writes are not allowed in init"),
        "{early_error}"
    );
    assert!(
        runtime.wait_synced(WAIT).await,
        "{:#?}",
        runtime.statuses().await
    );

    let filter = || {
        RequestFilter::default()
            .verb(Verb::Patch)
            .resource("configmaps")
    };
    let faults = dev.faults().clone();
    // (name, what the probe writes, what fails on the server first, the error expected; "" = ok)
    type Step = (&'static str, Value, Option<Box<dyn Fn()>>, &'static str);
    let steps: Vec<Step> = vec![
        ("first", apply(cm(OUT, "first")), None, ""),
        (
            "not-json",
            json!({"op": "raw-apply", "manifest": "{not json"}),
            None,
            "plugin probe: the manifest is not JSON",
        ),
        (
            "other-kind",
            apply(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": OUT}}),
            ),
            None,
            "forbidden (not granted): plugin probe is not granted apply on v1 Secret in namespace out",
        ),
        (
            "other-namespace",
            apply(cm(NS, "elsewhere")),
            None,
            "forbidden (not granted): plugin probe is not granted apply on v1 ConfigMap in namespace w",
        ),
        (
            "five-mib",
            json!({"op": "apply", "pad": (5 << 20).to_string(), "manifest": cm(OUT, "big").to_string()}),
            None,
            "bytes is over limits.manifestBytes (1048576)",
        ),
        (
            "many",
            json!({"op": "apply", "count": "100000", "manifest": cm(OUT, "many").to_string()}),
            None,
            "plugin probe: more than limits.writesPerCall (20) writes in one call",
        ),
        (
            "nameless",
            apply(json!({"data": {}})),
            None,
            "plugin probe: the manifest has no apiVersion, kind, metadata.name",
        ),
        (
            "server-500",
            apply(cm(OUT, "five-hundred")),
            Some(Box::new({
                let faults = faults.clone();
                move || faults.fail_next_matching(filter(), 1, Failure::InternalError)
            })),
            "unavailable: the API server answered 500",
        ),
        (
            "server-403",
            apply(cm(OUT, "rbac")),
            Some(Box::new({
                let faults = faults.clone();
                move || {
                    faults.fail_next_matching(
                        filter(),
                        1,
                        Failure::Forbidden {
                            user: "system:serviceaccount:ops:wasmformer",
                        },
                    )
                }
            })),
            "forbidden (by the API server): the API server's RBAC refused apply v1 ConfigMap out/rbac",
        ),
        (
            "server-429-once",
            apply(cm(OUT, "retried")),
            Some(Box::new({
                let faults = faults.clone();
                move || {
                    faults.fail_next_matching(
                        filter(),
                        1,
                        Failure::TooManyRequests {
                            retry_after_seconds: 0,
                        },
                    )
                }
            })),
            "",
        ),
        (
            "server-hangs",
            apply(cm(OUT, "hung")),
            Some(Box::new({
                let faults = faults.clone();
                move || faults.delay_next_matching(filter(), 1, Duration::from_secs(5))
            })),
            "unavailable: no answer for v1 ConfigMap out/hung within limits.writeTimeout (2s)",
        ),
        ("last", apply(cm(OUT, "last")), None, ""),
    ];

    let cms = Api::<ConfigMap>::namespaced(client.clone(), NS);
    let mut errors = Vec::new();
    for (i, (name, data, fault, _)) in steps.iter().enumerate() {
        if let Some(fault) = fault {
            fault();
        }
        let source: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"probe": "yes"}}, "data": data}),
        )
        .unwrap();
        cms.create(&PostParams::default(), &source).await.unwrap();
        let deadline = Instant::now() + WAIT;
        let report = loop {
            let report = status(&runtime, "probe").await;
            if report.calls == i as u64 + 1 {
                break report;
            }
            assert!(Instant::now() < deadline, "{name}: {report:#?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        faults.clear();
        errors.push(report.last_error.map(|e| e.message).unwrap_or_default());
    }

    // Each bad write failed its call with the plugin and the cause; each good one did not.
    let mut failures = 0;
    for ((name, _, _, expected), error) in steps.iter().zip(&errors) {
        if expected.is_empty() {
            continue;
        }
        failures += 1;
        assert!(
            error.contains(expected),
            "{name}: expected {expected:?} in {error:?}"
        );
        assert!(
            error.contains(&format!("ConfigMap {NS}/{name}")),
            "{name}: the error names the event: {error:?}"
        );
    }
    let probe = status(&runtime, "probe").await;
    assert_eq!(
        (probe.calls, probe.failures),
        (steps.len() as u64, failures),
        "{probe:#?}"
    );
    let stored = Api::<ConfigMap>::namespaced(client.clone(), OUT);
    for name in ["first", "retried", "last"] {
        assert!(
            stored.get_opt(name).await.unwrap().is_some(),
            "{name} was written"
        );
    }
    let many = dev
        .request_log()
        .records()
        .into_iter()
        .filter(|r| r.is(Verb::Patch, "configmaps") && r.name.as_deref() == Some("many"))
        .count();
    assert_eq!(many, 20, "writes past writesPerCall never reach the server");

    // The other plugin saw every event, in order, while the probe failed.
    let seen = recorded.wait_for("rec", steps.len(), WAIT).await;
    let names: Vec<&str> = seen.iter().map(|e| e["name"].as_str().unwrap()).collect();
    let expected: Vec<&str> = steps.iter().map(|s| s.0).collect();
    assert_eq!(names, expected);
    assert_eq!(status(&runtime, "rec").await.failures, 0);

    // The probe's writes in /status: 3 + 20 ok (the 429 was retried by the client), 2 refused by
    // the grant, 1 forbidden by the server, and 6 failed otherwise (not JSON, 5 MiB, the 21st
    // write, no name, the 500, no answer).
    let expected_tally = WriteTally {
        ok: 23,
        refused_by_grant: 2,
        forbidden_by_server: 1,
        failed: 6,
    };
    assert_eq!(probe.writes, expected_tally, "{probe:#?}");
    let served: Value = serde_json::from_str(&get(format!("http://{admin}/status")).await).unwrap();
    let plugin = served["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "probe")
        .unwrap();
    assert_eq!(
        plugin["writes"],
        json!({"ok": 23, "refusedByGrant": 2, "forbiddenByServer": 1, "failed": 6}),
        "{plugin}"
    );

    // And in /metrics, by verb and result.
    let metrics = get(format!("http://{admin}/metrics")).await;
    for (verb, result, count) in [
        ("apply", "ok", 23.0),
        ("apply", "refused", 2.0),
        ("apply", "forbidden", 1.0),
        ("apply", "invalid", 4.0),
        ("apply", "unavailable", 2.0),
        ("delete", "ok", 0.0),
    ] {
        assert_eq!(
            writes_total(&metrics, verb, result),
            Some(count),
            "{verb} {result}:\n{metrics}"
        );
    }
    assert!(
        metrics
            .contains(r#"wasmformer_write_duration_seconds_count{plugin="probe",verb="apply"} 26"#),
        "the 26 writes sent (23 ok, the 403, the 500, the one with no answer) are timed:\n{metrics}"
    );
    runtime.shutdown().await;
    dev.shutdown().await.unwrap();
}
