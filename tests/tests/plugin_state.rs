//! Plugin state that survives unloading and hot swap (contract 0.3.2's `state` export), on the
//! instance without a cluster: a counter keeps its count across 100 unload/re-activate cycles and
//! into a new version with another state format; a state saved as JSON (an older guest SDK's)
//! still restores; a restore that traps or fails falls back to `init`; a state over
//! `limits.stateBytes` is refused naming the plugin, and the plugin stays loaded; a plugin
//! without `state` starts over with `init` after an unload.

use std::path::Path;

use serde_json::{Value, json};
use wasmformer::cache::Event;
use wasmformer::plugin::{
    Grants, Limits, LoadedPlugin, PluginEngine, PluginInstance, SavedState, StateError,
};
use wasmformer_tests::{Recorded, guests, pod, pod_gvk};

fn engine() -> PluginEngine {
    PluginEngine::new(Some(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
    ))
    .unwrap()
}

/// Starts `guest` as plugin `counter` under `limits`; its log lines go to `recorded`.
fn start(
    engine: &PluginEngine,
    guest: &str,
    limits: Limits,
    recorded: &Recorded,
) -> PluginInstance {
    let plugin = LoadedPlugin::load(engine, "counter", Path::new(guest)).unwrap();
    PluginInstance::start(
        plugin,
        limits,
        Grants::none(),
        &json!({"tag": "t"}),
        Some(recorded.observer()),
    )
    .unwrap()
}

fn add(instance: &mut PluginInstance, name: &str, rv: u64) {
    let event = Event::Add {
        obj: pod("ns", name, rv),
        initial: false,
    };
    instance.handle(&pod_gvk(), &event).unwrap();
}

/// The `count` of each event line logged so far (init lines left out).
fn counts(recorded: &Recorded) -> Vec<u64> {
    recorded
        .events("counter")
        .iter()
        .filter_map(|e| e["count"].as_u64())
        .collect()
}

fn last(recorded: &Recorded) -> Value {
    recorded.events("counter").pop().unwrap()
}

#[test]
fn a_counter_keeps_its_count_across_100_unloads() {
    let engine = engine();
    let recorded = Recorded::default();
    let mut instance = start(&engine, guests::COUNTER, Limits::default(), &recorded);
    let own = instance.plugin().digest()[..12].to_owned();
    for rv in 1..=100 {
        add(&mut instance, &format!("p{rv}"), rv);
        instance.unload().unwrap();
        assert!(!instance.is_loaded());
        assert!(
            !instance.plugin().code_loaded(),
            "an unloaded plugin's code is released (it is in the compile cache)"
        );
        assert!(instance.saved_state_bytes().is_some_and(|b| b > 0));
    }
    assert_eq!(counts(&recorded), (1..=100).collect::<Vec<_>>());
    assert_eq!(instance.activations(), 99);
    // Each re-activation restored before init: init saw the restored count.
    let inits: Vec<u64> = recorded
        .events("counter")
        .iter()
        .filter_map(|e| e["init"].as_u64())
        .collect();
    assert_eq!(inits, (0..100).collect::<Vec<_>>());
    assert_eq!(last(&recorded)["restoredFrom"], own.as_str());
    // The config is applied again on every activation (the tag is not part of the state).
    assert_eq!(last(&recorded)["tag"], "t");
}

/// The compiled code an unloaded plugin released is loaded again from the compile cache; if the
/// cache lost it, compiled again from the plugin's file; if that file holds another version by
/// then, the event fails with an error saying so, and the plugin keeps its state for later.
#[test]
fn released_code_comes_back_from_the_cache_or_the_file_or_fails_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("counter.wasm");
    std::fs::copy(guests::COUNTER, &wasm).unwrap();
    let engine = PluginEngine::new(Some(dir.path().join("components"))).unwrap();
    let recorded = Recorded::default();
    let mut instance = start(
        &engine,
        wasm.to_str().unwrap(),
        Limits::default(),
        &recorded,
    );
    let remove_artifacts = || {
        for entry in walk(&dir.path().join("components")) {
            if entry.extension().is_some_and(|e| e == "cwasm") {
                std::fs::remove_file(entry).unwrap();
            }
        }
    };
    add(&mut instance, "a", 1);
    instance.unload().unwrap();
    assert!(!instance.plugin().code_loaded());
    add(&mut instance, "b", 2);
    assert!(instance.plugin().code_loaded());

    instance.unload().unwrap();
    remove_artifacts();
    add(&mut instance, "c", 3);
    assert_eq!(counts(&recorded), [1, 2, 3]);

    instance.unload().unwrap();
    remove_artifacts();
    std::fs::copy(guests::COUNTER_V2, &wasm).unwrap();
    let event = Event::Add {
        obj: pod("ns", "d", 4),
        initial: false,
    };
    let error = wasmformer::error_chain(&instance.handle(&pod_gvk(), &event).unwrap_err());
    assert!(
        error.contains("no longer in the compile cache")
            && error.contains(&wasm.display().to_string())
            && error.contains("no longer holds version"),
        "{error}"
    );
    assert!(instance.saved_state_bytes().is_some(), "the state is kept");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn a_new_version_starts_from_its_predecessors_state_in_the_old_format() {
    let engine = engine();
    let recorded = Recorded::default();
    let mut v1 = start(&engine, guests::COUNTER, Limits::default(), &recorded);
    for rv in 1..=5 {
        add(&mut v1, "a", rv);
    }
    let mut v2 = start(&engine, guests::COUNTER_V2, Limits::default(), &recorded);
    let state = v1.take_state().unwrap().expect("the counter keeps state");
    assert_eq!(state.version, v1.plugin().digest());
    v2.restore(state).unwrap();
    add(&mut v2, "a", 6);
    let line = last(&recorded);
    assert_eq!(line["total"], 6, "{line}");
    assert_eq!(line["sinceV2"], 1, "{line}");
    assert_eq!(line["restoredFrom"], &v1.plugin().digest()[..12]);

    // An unloaded predecessor hands over what it saved when it was unloaded.
    let mut v1 = start(&engine, guests::COUNTER, Limits::default(), &recorded);
    add(&mut v1, "b", 1);
    v1.unload().unwrap();
    let mut v2 = start(&engine, guests::COUNTER_V2, Limits::default(), &recorded);
    v2.restore(v1.take_state().unwrap().unwrap()).unwrap();
    add(&mut v2, "b", 2);
    assert_eq!(last(&recorded)["total"], 2);
}

/// The state as the guest SDK saved it before MessagePack (2026-12-06), and as a Python or
/// JavaScript version of the plugin saves it: JSON. A version built with today's SDK reads it.
#[test]
fn a_state_saved_as_json_by_an_older_sdk_still_restores() {
    let engine = engine();
    let recorded = Recorded::default();
    let mut v1 = start(&engine, guests::COUNTER, Limits::default(), &recorded);
    add(&mut v1, "a", 1);
    let saved = v1.take_state().unwrap().expect("the counter keeps state");
    assert_eq!(saved.bytes[0], 0xc1, "today's SDK saves MessagePack");

    let mut v2 = start(&engine, guests::COUNTER_V2, Limits::default(), &recorded);
    let json = SavedState {
        bytes: r#"{"count":41,"poison":null,"ballast":"grüße"}"#.as_bytes().to_vec(),
        version: "0".repeat(64),
    };
    v2.restore(json).unwrap();
    assert!(v2.take_state_error().is_none());
    add(&mut v2, "a", 2);
    let line = last(&recorded);
    assert_eq!(
        (&line["total"], &line["sinceV2"]),
        (&json!(42), &json!(1)),
        "{line}"
    );
    assert_eq!(line["restoredFrom"], "000000000000");
}

#[test]
fn a_restore_that_traps_or_fails_falls_back_to_init_and_is_reported() {
    for (poison, cause) in [
        ("trap", "restore trapped on purpose"),
        ("error", "poisoned on purpose"),
    ] {
        let engine = engine();
        let recorded = Recorded::default();
        let mut instance = start(&engine, guests::COUNTER, Limits::default(), &recorded);
        add(&mut instance, "a", 1);
        add(&mut instance, &format!("poison-{poison}"), 2);
        instance.unload().unwrap();
        add(&mut instance, "a", 3);
        // A fresh instance, from init alone: the count starts over.
        assert_eq!(counts(&recorded), [1, 2, 1], "{poison}");
        assert!(last(&recorded)["restoredFrom"].is_null());
        let error = instance
            .take_state_error()
            .expect("the failed restore is reported");
        assert!(matches!(error, StateError::Restore { .. }), "{error}");
        let message = error.to_string();
        assert!(
            message.contains("plugin \"counter\"")
                && message.contains("started with init alone")
                && message.contains(cause),
            "{poison}: {message}"
        );
        assert!(instance.take_state_error().is_none(), "reported once");
    }
}

/// A state of many pages (the host faults the pages it lands on in at once before copying it)
/// restores byte for byte: the counter parses it, counts on, and saves the same bytes again.
#[test]
fn a_state_of_many_pages_restores_byte_for_byte() {
    let engine = engine();
    let recorded = Recorded::default();
    let mut instance = start(&engine, guests::COUNTER, Limits::default(), &recorded);
    // Not a whole number of pages, so the state starts and ends inside a page.
    add(&mut instance, "grow-300001", 1);
    instance.unload().unwrap();
    let saved = instance.saved_state_bytes().expect("a state is kept");
    assert!(saved > 300_001, "{saved}");
    for rv in 2..=3 {
        add(&mut instance, "same-size", rv);
        assert!(instance.take_state_error().is_none(), "restored");
        instance.unload().unwrap();
        assert_eq!(instance.saved_state_bytes(), Some(saved), "event {rv}");
    }
    assert_eq!(counts(&recorded), [1, 2, 3]);
    assert_eq!(instance.activations(), 2);
}

#[test]
fn a_state_over_the_limit_is_refused_naming_the_plugin_and_the_plugin_stays_loaded() {
    let engine = engine();
    let recorded = Recorded::default();
    let limits = Limits {
        state_bytes: 1000,
        ..Limits::default()
    };
    let mut instance = start(&engine, guests::COUNTER, limits, &recorded);
    add(&mut instance, "grow-5000", 1);
    let error = instance.unload().unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("plugin \"counter\"")
            && message.contains("over its limits.stateBytes (1000)"),
        "{message}"
    );
    assert!(instance.is_loaded(), "a refused state keeps the instance");
    add(&mut instance, "a", 2);
    assert_eq!(counts(&recorded), [1, 2]);
}

#[test]
fn a_plugin_without_state_starts_over_with_init_after_an_unload() {
    let engine = engine();
    let plugin = LoadedPlugin::load(&engine, "rec", Path::new(guests::RECORDER)).unwrap();
    assert!(!plugin.keeps_state());
    let recorded = Recorded::default();
    let mut instance = PluginInstance::start(
        plugin,
        Limits::default(),
        Grants::none(),
        &json!({"tag": "r"}),
        Some(recorded.observer()),
    )
    .unwrap();
    add(&mut instance, "a", 1);
    instance.unload().unwrap();
    assert!(!instance.is_loaded());
    assert_eq!(instance.saved_state_bytes(), None);
    add(&mut instance, "a", 2);
    assert_eq!(instance.activations(), 1);
    assert_eq!(instance.instantiations(), 2);
    assert_eq!(recorded.events("rec").len(), 2);
}
