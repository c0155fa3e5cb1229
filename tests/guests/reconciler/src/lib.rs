//! A controller (contract 0.3.1): logs every reconcile as one JSON line
//! `{"reconcile": "<Kind> <ns>/<name>", "resourceVersion": "<rv or gone>", "call": <n>}` (`call`:
//! this instance's count for that key), and every handler call as `{"event": …, "name": …}`.
//!
//! Config: `failTimes: N` (a key's first N reconciles fail, asking for a retry), `failAlways:
//! true`, `requeueAfterMs: M` (a success asks to be reconciled again after M ms),
//! `holdUntilLabel: "k=v"` (the first reconcile of each key logs `{"holding": "<Kind> <ns>/<name>"}`
//! and waits, reading the lister, until the object carries that label: a slow reconcile the test
//! ends), `retryAdds: N` (the handler's
//! first N adds of each object fail with `Error::retry`).

use std::collections::HashMap;
use std::time::Duration;

use wasmformer_guest::serde_json::{Value, json};
use wasmformer_guest::{Action, Error, Object, ObjectRef, Plugin, Reconciler, Result, info};

#[derive(Default)]
struct Controller {
    fail_times: u64,
    fail_always: bool,
    requeue_after_ms: Option<u64>,
    hold_until_label: Option<(String, String)>,
    retry_adds: u64,
    calls: HashMap<String, u64>,
    adds: HashMap<String, u64>,
}

impl Plugin for Controller {
    fn init(&mut self, config: Value) -> Result<()> {
        self.fail_times = config.get("failTimes").and_then(Value::as_u64).unwrap_or(0);
        self.fail_always = config
            .get("failAlways")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        self.requeue_after_ms = config.get("requeueAfterMs").and_then(Value::as_u64);
        self.hold_until_label = config
            .get("holdUntilLabel")
            .and_then(Value::as_str)
            .and_then(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()));
        self.retry_adds = config.get("retryAdds").and_then(Value::as_u64).unwrap_or(0);
        Ok(())
    }

    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        let key = format!("{}/{}", obj.namespace(), obj.name());
        let adds = self.adds.entry(key).or_default();
        *adds += 1;
        info!(
            "{}",
            json!({"event": "add", "name": obj.name(), "resourceVersion": obj.resource_version(), "call": *adds})
        );
        if *adds <= self.retry_adds {
            return Err(Error::retry(format!(
                "add {} failed on purpose",
                obj.name()
            )));
        }
        Ok(())
    }

    fn on_update(&mut self, _old: &Object, new: &Object) -> Result<()> {
        info!(
            "{}",
            json!({"event": "update", "name": new.name(), "resourceVersion": new.resource_version()})
        );
        Ok(())
    }
}

impl Reconciler for Controller {
    fn reconcile(&mut self, key: &ObjectRef) -> Result<Action> {
        let name = format!("{} {key}", key.kind.kind);
        let calls = self.calls.entry(name.clone()).or_default();
        *calls += 1;
        let call = *calls;
        let mut obj = key.get()?;
        if call == 1
            && let Some((label, value)) = &self.hold_until_label
        {
            info!("{}", json!({"holding": name}));
            while let Some(current) = &obj
                && current.label(label) != Some(value.as_str())
            {
                std::thread::sleep(Duration::from_millis(10));
                obj = key.get()?;
            }
        }
        let rv = obj
            .as_ref()
            .map_or("gone".to_owned(), |o| o.resource_version().to_owned());
        info!(
            "{}",
            json!({"reconcile": name, "resourceVersion": rv, "call": call})
        );
        if self.fail_always || call <= self.fail_times {
            return Err(Error::msg(format!("reconcile {name} failed on purpose")));
        }
        Ok(match self.requeue_after_ms {
            Some(ms) => Action::requeue(Duration::from_millis(ms)),
            None => Action::done(),
        })
    }
}

wasmformer_guest::export!(Controller, reconciler);
