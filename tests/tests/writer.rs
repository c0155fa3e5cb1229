//! The `writer` import without a cluster, through `wasmformer replay`'s recording sink: grants,
//! limits and malformed writes answer at once with an error naming the plugin and the cause, the
//! next event is delivered as usual, and the writes a plugin may make are recorded in order.
//! Also: a plugin built for contract 0.2.0 still loads and works.

use std::path::Path;

use serde_json::{Value, json};
use wasmformer::plugin::{Limits, LoadedPlugin, PluginEngine};
use wasmformer::replay::{self, CallOutcome, Script};
use wasmformer_tests::guests;

fn engine() -> PluginEngine {
    PluginEngine::new(Some(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
    ))
    .unwrap()
}

/// A ConfigMap the writer-probe acts on: `data` says what to write.
fn probe(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "shop", "labels": {"probe": "yes"}}, "data": data})
}

/// Runs the writer-probe through `steps` (ConfigMaps to add), with the script's `grants` YAML.
fn run_probe(
    grants: &str,
    steps: &[Value],
    limits: Limits,
    config: Value,
) -> Result<Vec<CallOutcome>, replay::ReplayError> {
    let events: Vec<Value> = steps.iter().map(|s| json!({"add": s})).collect();
    let script = format!(
        "{grants}\nevents: {}\n",
        serde_json::to_string(&events).unwrap()
    );
    let script = Script::parse(&script).unwrap();
    let plugin = LoadedPlugin::load(&engine(), "probe", Path::new(guests::WRITER_PROBE)).unwrap();
    replay::run(plugin, &script, &config, limits, |_| {})
}

fn error(outcome: &CallOutcome) -> String {
    outcome
        .error
        .as_ref()
        .map(|e| wasmformer::error_chain(e))
        .unwrap_or_default()
}

const POD_APPLY_IN_SHOP: &str =
    "write: [{apiVersion: v1, kind: Pod, verbs: [apply], namespaces: [shop]}]\nwriteEvents: false";

fn apply(manifest: Value) -> Value {
    json!({"op": "apply", "manifest": manifest.to_string()})
}

fn pod(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": {"a": "b"}}})
}

#[test]
fn granted_writes_are_recorded_in_order_with_the_plugins_field_manager() {
    let steps = [
        probe("one", apply(pod("shop", "web-1"))),
        probe("two", apply(pod("shop", "web-2"))),
    ];
    let outcomes = run_probe(POD_APPLY_IN_SHOP, &steps, Limits::default(), json!({})).unwrap();
    assert!(
        outcomes.iter().all(|o| o.error.is_none()),
        "{:?}",
        outcomes.iter().map(error).collect::<Vec<_>>()
    );
    let yaml = replay::writes_yaml(&outcomes);
    let first = yaml.find("name: web-1").expect(&yaml);
    let second = yaml.find("name: web-2").expect(&yaml);
    assert!(first < second, "{yaml}");
    assert_eq!(
        yaml.matches("fieldManager: wasmformer/probe").count(),
        2,
        "{yaml}"
    );
    assert_eq!(yaml.matches("verb: apply").count(), 2, "{yaml}");
}

#[test]
fn bad_writes_answer_at_once_naming_the_plugin_and_the_cause() {
    let five_mib = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "namespace": "shop", "annotations": {"x": "y".repeat(5 << 20)}}});
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "not-json",
            json!({"op": "raw-apply", "manifest": "{not json"}),
            "plugin probe: the manifest is not JSON",
        ),
        (
            "other-kind",
            apply(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "shop"}}),
            ),
            "forbidden (not granted): plugin probe is not granted apply on v1 Secret in namespace shop",
        ),
        (
            "other-namespace",
            apply(pod("kube-system", "web")),
            "forbidden (not granted): plugin probe is not granted apply on v1 Pod in namespace kube-system",
        ),
        (
            "other-verb",
            json!({"op": "create", "manifest": pod("shop", "web").to_string()}),
            "plugin probe is not granted create on v1 Pod",
        ),
        (
            "status",
            json!({"op": "apply", "status": "true", "manifest": pod("shop", "web").to_string()}),
            "not granted apply on v1 Pod (status subresource)",
        ),
        (
            "event",
            json!({"op": "event", "note": "n"}),
            "plugin probe is not granted events; set `events: true`",
        ),
        (
            "no-kind",
            apply(json!({"apiVersion": "v1", "metadata": {"name": "x", "namespace": "shop"}})),
            "plugin probe: the manifest has no kind",
        ),
        (
            "nothing",
            apply(json!({"metadata": {}})),
            "plugin probe: the manifest has no apiVersion, kind, metadata.name",
        ),
        (
            "not-an-object",
            json!({"op": "raw-apply", "manifest": "[1, 2]"}),
            "plugin probe: the manifest is not a JSON object",
        ),
        (
            "five-mib",
            apply(five_mib),
            "plugin probe: the manifest of 5242",
        ),
        (
            "many",
            json!({"op": "apply", "count": "100000", "manifest": pod("shop", "web").to_string()}),
            "plugin probe: more than limits.writesPerCall (1000) writes in one call",
        ),
        ("fine-after-all-that", apply(pod("shop", "web-ok")), ""),
    ];
    let steps: Vec<Value> = cases
        .iter()
        .map(|(name, data, _)| probe(name, data.clone()))
        .collect();
    // A generous deadline: the 5 MiB object is decoded in wasm on a shared 2-core machine.
    let limits = Limits {
        deadline: std::time::Duration::from_secs(10),
        ..Limits::default()
    };
    let outcomes = run_probe(POD_APPLY_IN_SHOP, &steps, limits, json!({})).unwrap();
    assert_eq!(
        outcomes.len(),
        cases.len() + 1,
        "init plus one call per case"
    );
    for ((name, _, expected), outcome) in cases.iter().zip(&outcomes[1..]) {
        let text = error(outcome);
        match expected.is_empty() {
            true => assert!(outcome.error.is_none(), "{name}: {text}"),
            false => assert!(
                text.contains(expected),
                "{name}: expected {expected:?} in {text:?}"
            ),
        }
    }
    let five_mib_error = error(&outcomes[10]);
    assert!(
        five_mib_error.contains("over limits.manifestBytes (1048576)"),
        "{five_mib_error}"
    );
    // Only the writes within the grants and limits were recorded: the 1,000 of the loop and the last.
    let recorded: usize = outcomes.iter().map(|o| o.writes.len()).sum();
    assert_eq!(recorded, 1000 + 1);
    assert_eq!(
        outcomes.last().unwrap().writes[0].request.target().name,
        "web-ok"
    );
}

#[test]
fn writes_from_init_are_refused_and_the_plugin_does_not_start() {
    let result = run_probe(
        POD_APPLY_IN_SHOP,
        &[],
        Limits::default(),
        json!({"writeInInit": true}),
    );
    let Err(error) = result else {
        panic!("init with a write started")
    };
    let text = wasmformer::error_chain(&error);
    assert!(
        text.contains("plugin probe") && text.contains("writes are not allowed in init"),
        "{text}"
    );
}

#[test]
fn a_plugin_without_write_grants_is_refused_by_the_host() {
    let outcomes = run_probe(
        "write: []\nwriteEvents: false",
        &[probe("one", apply(pod("shop", "web")))],
        Limits::default(),
        json!({}),
    )
    .unwrap();
    let text = error(&outcomes[1]);
    assert!(
        text.contains(
            "forbidden (not granted): plugin probe is not granted apply on v1 Pod in namespace shop"
        ),
        "{text}"
    );
    assert!(outcomes[1].writes.is_empty());
}

#[test]
fn a_plugin_built_for_contract_0_2_still_loads_and_reads_the_cache() {
    let script = Script::parse(
        "events:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: shop}}\n",
    )
    .unwrap();
    let plugin = LoadedPlugin::load(&engine(), "legacy", Path::new(guests::LEGACY_V02)).unwrap();
    let outcomes = replay::run(plugin, &script, &json!({}), Limits::default(), |_| {}).unwrap();
    assert!(
        outcomes.iter().all(|o| o.error.is_none()),
        "{:?}",
        outcomes.iter().map(error).collect::<Vec<_>>()
    );
    let logs: Vec<&str> = outcomes
        .iter()
        .flat_map(|o| &o.logs)
        .map(|l| l.message.as_str())
        .collect();
    assert_eq!(logs, ["legacy web-1 lister-rv=1"]);
    let info = wasmformer::plugin::inspect(&engine(), Path::new(guests::LEGACY_V02)).unwrap();
    assert_eq!(info.contract_version.as_deref(), Some("0.2.0"));
}
