//! Contract 0.3.1 without a cluster: a plugin that exports `reconciler` is instantiated as a
//! controller and its reconciles answer with requeue-after or a typed error; a handler's
//! `Error::retry` reaches the host as a retry request; plugins built for 0.3.0 (and 0.2.0, in
//! `writer.rs`) still load unchanged, as plugins without a reconciler.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wasmformer::cache::{Event, Gvk, Store};
use wasmformer::plugin::{
    CallError, Grants, Limits, LoadedPlugin, LogLine, PluginEngine, PluginInstance,
};
use wasmformer::replay::{self, Script};
use wasmformer_tests::guests;

fn engine() -> PluginEngine {
    PluginEngine::new(Some(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
    ))
    .unwrap()
}

fn configmap(name: &str, rv: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "ns", "name": name, "uid": format!("uid-{name}"), "resourceVersion": rv.to_string()}})
}

fn cm_kind() -> Gvk {
    Gvk::from_api_version("v1", "ConfigMap")
}

/// Starts `guest` as plugin `name` with `config`, granted a ConfigMap store holding `objects`;
/// returns it and the lines it logs.
fn start(
    guest: &str,
    config: Value,
    objects: Vec<Value>,
) -> (PluginInstance, Arc<Mutex<Vec<String>>>) {
    let plugin = LoadedPlugin::load(&engine(), "ctl", Path::new(guest)).unwrap();
    let store = Arc::new(Store::with_objects(cm_kind(), vec![], true, objects).unwrap());
    let mut grants = Grants::none();
    grants.grant(store);
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = lines.clone();
    let observer = Arc::new(move |line: &LogLine| seen.lock().unwrap().push(line.message.clone()));
    let instance =
        PluginInstance::start(plugin, Limits::default(), grants, &config, Some(observer)).unwrap();
    (instance, lines)
}

fn take(lines: &Mutex<Vec<String>>) -> Vec<Value> {
    std::mem::take(&mut *lines.lock().unwrap())
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_plugin_exporting_reconciler_is_a_controller_and_reconciles_a_key_from_the_cache() {
    let (mut instance, lines) = start(
        guests::RECONCILER,
        json!({"requeueAfterMs": 1500}),
        vec![configmap("a", 7)],
    );
    assert!(instance.reconciles());
    assert_eq!(
        instance.plugin().contract(),
        wasmformer::plugin::CONTRACT_VERSION
    );
    let requeue = instance.reconcile(&cm_kind(), "ns", "a").unwrap();
    assert_eq!(requeue, Some(std::time::Duration::from_millis(1500)));
    let requeue = instance.reconcile(&cm_kind(), "ns", "gone").unwrap();
    assert_eq!(requeue, Some(std::time::Duration::from_millis(1500)));
    assert_eq!(
        take(&lines),
        [
            json!({"reconcile": "ConfigMap ns/a", "resourceVersion": "7", "call": 1}),
            json!({"reconcile": "ConfigMap ns/gone", "resourceVersion": "gone", "call": 1}),
        ]
    );
    let info = wasmformer::plugin::inspect(&engine(), Path::new(guests::RECONCILER)).unwrap();
    assert!(info.reconciler);
}

#[test]
fn a_failed_reconcile_is_a_typed_error_that_asks_for_a_retry() {
    let (mut instance, lines) = start(
        guests::RECONCILER,
        json!({"failTimes": 2}),
        vec![configmap("a", 1)],
    );
    for _ in 0..2 {
        match instance.reconcile(&cm_kind(), "ns", "a") {
            Err(error @ CallError::Reconcile { retry: true, .. }) => {
                assert!(error.wants_retry(true));
                assert!(
                    error
                        .to_string()
                        .contains("reconcile ConfigMap ns/a failed on purpose"),
                    "{error}"
                );
            }
            other => panic!("expected a retried reconcile error, got {other:?}"),
        }
    }
    assert_eq!(instance.reconcile(&cm_kind(), "ns", "a").unwrap(), None);
    let calls: Vec<Value> = take(&lines).iter().map(|l| l["call"].clone()).collect();
    assert_eq!(calls, [json!(1), json!(2), json!(3)]);
}

#[test]
fn a_handler_error_made_with_retry_asks_for_a_retry_and_a_plain_one_does_not() {
    let (mut instance, _) = start(
        guests::RECONCILER,
        json!({"retryAdds": 1}),
        vec![configmap("a", 1)],
    );
    let store = Store::with_objects(cm_kind(), vec![], true, [configmap("a", 1)]).unwrap();
    let add = Event::Add {
        obj: store.get("ns", "a").unwrap(),
        initial: false,
    };
    match instance.handle(&cm_kind(), &add) {
        Err(error @ CallError::HandlerRetry(_)) => assert!(error.wants_retry(false)),
        other => panic!("expected a handler error asking for a retry, got {other:?}"),
    }
    instance
        .handle(&cm_kind(), &add)
        .expect("the second add succeeds");

    let (mut legacy, _) = start(guests::LEGACY_V030, json!({}), vec![]);
    let fail = Event::Add {
        obj: Store::with_objects(cm_kind(), vec![], true, [configmap("fail", 1)])
            .unwrap()
            .get("ns", "fail")
            .unwrap(),
        initial: false,
    };
    match legacy.handle(&cm_kind(), &fail) {
        Err(error @ CallError::Handler(_)) => assert!(!error.wants_retry(false)),
        other => panic!("expected a plain handler error, got {other:?}"),
    }
    assert!(matches!(
        legacy.reconcile(&cm_kind(), "ns", "a"),
        Err(CallError::NoReconciler)
    ));
}

#[test]
fn a_plugin_built_for_contract_0_3_0_still_loads_as_a_plugin_without_reconciler() {
    let plugin = LoadedPlugin::load(&engine(), "v030", Path::new(guests::LEGACY_V030)).unwrap();
    assert_eq!(plugin.contract(), "0.3.0");
    assert!(!plugin.reconciles());
    let script = Script::parse(
        "events:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: shop}}\n",
    )
    .unwrap();
    let outcomes = replay::run(plugin, &script, &json!({}), Limits::default(), |_| {}).unwrap();
    assert!(outcomes.iter().all(|o| o.error.is_none()));
    let logs: Vec<&str> = outcomes
        .iter()
        .flat_map(|o| &o.logs)
        .map(|l| l.message.as_str())
        .collect();
    assert_eq!(logs, ["v030 web-1"]);
    let info = wasmformer::plugin::inspect(&engine(), Path::new(guests::LEGACY_V030)).unwrap();
    assert_eq!(info.contract_version.as_deref(), Some("0.3.0"));
    assert!(!info.reconciler);
}

#[test]
fn replay_reconciles_on_a_virtual_clock_with_each_attempt_and_its_backoff() {
    let plugin = LoadedPlugin::load(&engine(), "ctl", Path::new(guests::RECONCILER)).unwrap();
    let script = Script::parse(
        "events:\n  - add: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: shop}}\n",
    )
    .unwrap();
    let outcomes = replay::run(
        plugin,
        &script,
        &json!({"failTimes": 3}),
        Limits::default(),
        |_| {},
    )
    .unwrap();
    let steps: Vec<String> = outcomes
        .iter()
        .skip(1)
        .map(|o| match &o.reconcile {
            Some(step) => format!(
                "reconcile {} attempt {} at {}ms {} backoff {:?}",
                o.key,
                step.attempt,
                step.at.as_millis(),
                if o.error.is_some() { "failed" } else { "ok" },
                step.backoff.map(|b| b.as_millis())
            ),
            None => format!("{} {}", o.event, o.key),
        })
        .collect();
    assert_eq!(
        steps,
        [
            "add shop/a",
            "reconcile shop/a attempt 1 at 0ms failed backoff Some(5)",
            "reconcile shop/a attempt 2 at 5ms failed backoff Some(10)",
            "reconcile shop/a attempt 3 at 15ms failed backoff Some(20)",
            "reconcile shop/a attempt 4 at 35ms ok backoff None",
        ]
    );
    let line = outcomes[3].to_string();
    assert!(
        line.starts_with("reconcile ConfigMap shop/a (attempt 2, at 5ms) FAILED in ")
            && line.ends_with("; retry after 10ms"),
        "{line}"
    );
}
