//! The plugin runtime against real wasm guests: contract checks at load time, and containment
//! of every way a plugin can misbehave at call time. Each misbehaving guest behaves for objects
//! not named `boom*`, so every test also checks that the next event is delivered.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use wasmformer::cache::{IndexSpec, Store};
use wasmformer::plugin::{
    CallError, Event, Grants, Limits, LoadError, LoadedPlugin, LogLine, LogObserver, PluginEngine,
    PluginInstance, PoolSettings, START_PAGES_BYTES, TrapKind,
};
use wasmformer_tests::{guests, paged_pods, paged_read, pod, pod_gvk, pod_json, store, store_with};

/// The compile cache shared by this test binary's engines (the cache itself is tested with its
/// own directory below).
fn shared_cache() -> Option<std::path::PathBuf> {
    Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"))
}

/// An engine with the default instance pool and the shared compile cache.
fn engine() -> PluginEngine {
    PluginEngine::new(shared_cache()).expect("engine")
}

/// A started plugin and every line it logged.
struct Running {
    instance: PluginInstance,
    lines: Arc<Mutex<Vec<LogLine>>>,
}

impl Running {
    fn start(engine: &PluginEngine, wasm: &str, limits: Limits, grants: Grants) -> Self {
        Self::try_start(engine, wasm, limits, grants, json!({})).expect("plugin starts")
    }

    fn try_start(
        engine: &PluginEngine,
        wasm: &str,
        limits: Limits,
        grants: Grants,
        config: serde_json::Value,
    ) -> Result<Self, CallError> {
        let name = Path::new(wasm)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let plugin = LoadedPlugin::load(engine, &name, Path::new(wasm)).expect("plugin loads");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let observer: LogObserver = {
            let lines = lines.clone();
            Arc::new(move |line: &LogLine| lines.lock().unwrap().push(line.clone()))
        };
        let instance = PluginInstance::start(plugin, limits, grants, &config, Some(observer))?;
        Ok(Self { instance, lines })
    }

    fn add(&mut self, name: &str) -> Result<(), CallError> {
        self.instance.handle(
            &pod_gvk(),
            &Event::Add {
                obj: pod("default", name, 1),
                initial: false,
            },
        )
    }

    fn messages(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|l| l.message.clone())
            .collect()
    }
}

/// Asserts the event `boom` traps with `kind`, and that the next event is handled by a fresh
/// instance. The trap's report is one line with no backtrace in it.
fn assert_contained(wasm: &str, limits: Limits, kind: TrapKind) -> CallError {
    let engine = engine();
    let mut plugin = Running::start(&engine, wasm, limits, Grants::none());
    plugin.add("fine-before").unwrap();
    let err = plugin.add("boom").unwrap_err();
    assert_eq!(err.trap_kind(), Some(kind), "unexpected error: {err:?}");
    plugin.add("fine-after").unwrap();
    assert_eq!(
        plugin.instance.instantiations(),
        2,
        "the instance is recreated after the trap"
    );
    assert_eq!(
        (plugin.instance.calls(), plugin.instance.failures()),
        (3, 1)
    );
    let messages = plugin.messages();
    assert!(
        messages.contains(&"ok fine-before".to_owned())
            && messages.contains(&"ok fine-after".to_owned()),
        "{messages:?}"
    );
    let report = wasmformer::error_chain(&err);
    assert!(
        !report.contains('\n') && !report.contains("backtrace"),
        "a trap report is one line: {report}"
    );
    assert!(
        report.starts_with(&kind.to_string()) || kind == TrapKind::MemoryLimit,
        "the cause comes first: {report}"
    );
    err
}

/// The function a trap's report names.
fn frame(err: &CallError) -> &str {
    let CallError::Trap { frame, .. } = err else {
        panic!("not a trap: {err:?}")
    };
    frame
        .as_deref()
        .unwrap_or_else(|| panic!("no guest frame in {err}"))
}

#[test]
fn pod_logger_logs_the_classic_informer_lines() {
    let engine = engine();
    let mut plugin = Running::start(
        &engine,
        guests::POD_LOGGER,
        Limits::default(),
        Grants::none(),
    );
    let gvk = pod_gvk();
    let (v1, v2) = (pod("default", "web", 1), pod("default", "web", 2));
    plugin
        .instance
        .handle(
            &gvk,
            &Event::Add {
                obj: v1.clone(),
                initial: true,
            },
        )
        .unwrap();
    plugin
        .instance
        .handle(
            &gvk,
            &Event::Update {
                old: v1,
                new: v2.clone(),
            },
        )
        .unwrap();
    plugin
        .instance
        .handle(
            &gvk,
            &Event::Delete {
                obj: v2,
                final_state_unknown: false,
            },
        )
        .unwrap();
    assert_eq!(
        plugin.messages(),
        [
            "New Pod Added to Store: web",
            "web Pod Updated to web",
            "Pod Deleted from Store: web"
        ]
    );
    assert!(
        plugin
            .lines
            .lock()
            .unwrap()
            .iter()
            .all(|l| &*l.plugin == "pod_logger" && l.level == tracing::Level::INFO)
    );
}

#[test]
fn a_panic_is_a_trap_with_the_panic_message() {
    let err = assert_contained(guests::PANIC, Limits::default(), TrapKind::Unreachable);
    let text = err.to_string();
    assert!(
        text.contains("boom: the plugin panicked on purpose"),
        "{text}"
    );
    // Built with whole-program optimisation (tests/build.rs), the handler is inlined into the
    // component's export, which then names it.
    assert_eq!(
        frame(&err),
        format!(
            "wasmformer:plugin/handler@{}#on-add",
            wasmformer::plugin::CONTRACT_VERSION
        ),
        "{text}"
    );
}

#[test]
fn an_infinite_loop_is_stopped_at_the_deadline() {
    let limits = Limits {
        deadline: Duration::from_millis(50),
        ..Limits::default()
    };
    let err = assert_contained(guests::INFINITE_LOOP, limits, TrapKind::Deadline);
    let CallError::Trap { elapsed, .. } = &err else {
        unreachable!()
    };
    assert!(
        *elapsed >= Duration::from_millis(45),
        "stopped before its deadline: {elapsed:?}"
    );
    // Stopped in its own code, not in a host call: the message must not send the author to
    // look at lister or log calls.
    assert!(err.to_string().starts_with("deadline exceeded "), "{err}");
    assert!(!err.to_string().contains("host call"), "{err}");
}

#[test]
fn unbounded_allocation_is_stopped_at_the_memory_limit() {
    let limits = Limits {
        memory_bytes: 16 << 20,
        // Growing to the limit can take longer than the default deadline on a loaded machine:
        // the memory limit, not the deadline, must be what stops it.
        deadline: Duration::from_secs(10),
        ..Limits::default()
    };
    let err = assert_contained(guests::MEMORY_HOG, limits, TrapKind::MemoryLimit);
    assert!(
        format!("{:#}", anyhow::Error::from(err))
            .contains("memory limit of 16777216 bytes exceeded")
    );
}

#[test]
fn runaway_recursion_is_a_stack_overflow_named_with_its_function() {
    let err = assert_contained(
        guests::DEEP_RECURSION,
        Limits::default(),
        TrapKind::StackOverflow,
    );
    assert_eq!(frame(&err), "guest_deep_recursion::depth", "{err}");
    assert!(
        err.to_string()
            .starts_with("stack overflow in guest_deep_recursion::depth after "),
        "{err}"
    );
}

/// Issue 18, item 13: a Rust guest's own stack lives in linear memory; overflowing it is an
/// out-of-bounds access deep in a recursion, reported as the stack overflow it is (not a bare
/// `trap`), with the function.
#[test]
fn a_stack_overflow_in_linear_memory_is_named_with_its_cause_and_function() {
    let err = assert_contained(
        guests::LINEAR_STACK_OVERFLOW,
        Limits::default(),
        TrapKind::StackOverflow,
    );
    assert_eq!(frame(&err), "guest_linear_stack_overflow::fill", "{err}");
    assert!(
        err.to_string().starts_with(
            "stack overflow in linear memory (out of bounds memory access) in \
             guest_linear_stack_overflow::fill after "
        ),
        "{err}"
    );
}

#[test]
fn a_blocking_wasi_sleep_is_stopped_at_the_deadline() {
    // The guest sleeps 20 s (a monotonic-clock pollable it blocks on) under a 100 ms deadline: the
    // call fails with the deadline trap and the next event is delivered, not 20 s later.
    let err = assert_contained(guests::SLEEPER, Limits::default(), TrapKind::Deadline);
    assert!(
        err.to_string()
            .starts_with("deadline exceeded during a host call"),
        "{err}"
    );
}

/// The log-flood guest's `boom` event under `deadline`, with a log observer that holds the
/// guest's first log call for `held`: a call kept from running (its thread blocked, as a thread
/// waiting for a core) for that long, having run for far less than its deadline.
fn flood_held_for(deadline: Duration, held: Duration) -> Result<(), CallError> {
    let engine = engine();
    let plugin = LoadedPlugin::load(&engine, "log-flood", Path::new(guests::LOG_FLOOD)).unwrap();
    let first = AtomicBool::new(true);
    let observer: LogObserver = Arc::new(move |_: &LogLine| {
        if first.swap(false, Ordering::Relaxed) {
            std::thread::sleep(held);
        }
    });
    let limits = Limits {
        deadline,
        ..Limits::default()
    };
    let mut instance =
        PluginInstance::start(plugin, limits, Grants::none(), &json!({}), Some(observer)).unwrap();
    instance.handle(
        &pod_gvk(),
        &Event::Add {
            obj: pod("default", "boom", 1),
            initial: false,
        },
    )
}

#[test]
fn a_call_kept_from_running_past_its_wall_clock_deadline_is_not_stopped() {
    // Held 2 s under a 1 s deadline, the call then logs its 20,000 lines (far less than 1 s of
    // CPU) and returns: the deadline counts the time it ran, not the time it was kept waiting.
    flood_held_for(Duration::from_secs(1), Duration::from_secs(2))
        .expect("a call that ran for less than its deadline is not stopped");
}

#[test]
fn a_call_kept_from_running_for_ten_times_its_deadline_is_stopped() {
    // Held 1.1 s under a 100 ms deadline: past the ceiling (1 s) the call ends, however little it
    // ran (at its next epoch check, or its next log call).
    let err = flood_held_for(Duration::from_millis(100), Duration::from_millis(1100)).unwrap_err();
    assert_eq!(err.trap_kind(), Some(TrapKind::Deadline), "{err}");
    // The message tells an overloaded node from a plugin that ran too long.
    assert!(
        err.to_string().starts_with(
            "deadline exceeded (kept from running for 10 times the deadline: the node is overloaded)"
        ) || err.to_string().starts_with(
            "deadline exceeded during a host call (kept from running for 10 times the deadline"
        ),
        "{err}"
    );
}

#[test]
fn a_log_flood_is_capped_per_call_and_the_call_succeeds() {
    let engine = engine();
    // A generous deadline: 20,000 log calls are what is tested here, not speed.
    let limits = Limits {
        log_bytes_per_call: 4096,
        deadline: Duration::from_secs(10),
        ..Limits::default()
    };
    let mut plugin = Running::start(&engine, guests::LOG_FLOOD, limits, Grants::none());
    plugin.add("boom").unwrap();
    let logged: usize = plugin.messages().iter().map(String::len).sum();
    assert!(
        logged <= 4096,
        "logged {logged} bytes over a 4096-byte budget"
    );
    assert!(
        plugin.messages().len() > 10,
        "lines within the budget still arrive"
    );
    plugin.add("next").unwrap();
    assert_eq!(plugin.messages().last().unwrap(), "ok next");
}

#[test]
fn a_lister_call_for_an_ungranted_kind_is_forbidden() {
    let engine = engine();
    let mut grants = Grants::none();
    grants.grant(store(pod_gvk(), vec![]));
    let mut plugin = Running::start(&engine, guests::UNGRANTED_LISTER, Limits::default(), grants);
    let err = plugin.add("boom").unwrap_err();
    let CallError::Handler(message) = &err else {
        panic!("expected a handler error, got {err:?}")
    };
    assert!(
        message.contains("forbidden")
            && message.contains("v1 Secret")
            && message.contains("ungranted_lister"),
        "{message}"
    );
    plugin.add("next").unwrap();
}

/// `lister.list-page` (contract 0.3.3) through the SDK's `iter_objects`: whatever the page size,
/// the plugin reads every match once, in key order, as one `list` answers it.
#[test]
fn a_plugin_reads_a_list_a_page_at_a_time_each_object_once_in_key_order() {
    let engine = engine();
    let (store, expected) = (paged_pods(10), paged_read(10));
    // 3: the last page part full; 5: the last page empty; 0 (taken as 1) and 64 (one page).
    for page in [3, 5, 0, 64] {
        let mut grants = Grants::none();
        grants.grant(store.clone());
        let config = json!({"pages": "app=web", "page": page, "log": true});
        let mut plugin = Running::try_start(
            &engine,
            guests::BENCH_LISTER,
            Limits::default(),
            grants,
            config,
        )
        .unwrap();
        plugin.add("p0").unwrap();
        assert_eq!(
            plugin.messages(),
            std::slice::from_ref(&expected),
            "pages of {page}"
        );
    }
}

/// What pages are for: a plugin walks more objects than its memory limit holds at once. The same
/// plugin's `list` of them fails at the limit.
#[test]
fn pages_go_through_more_objects_than_the_plugin_memory_holds() {
    let engine = engine();
    // 2,000 Pods of 8 KiB each: 16 MiB of bodies, against a limit of 8 MiB.
    let pods = (0..2000).map(|i| {
        let mut pod = pod_json("default", &format!("p{i:04}"), 1);
        pod["metadata"]["annotations"] = json!({"note": "x".repeat(8 << 10)});
        pod
    });
    let store = store_with(pod_gvk(), vec![], pods);
    let limits = Limits {
        memory_bytes: 8 << 20,
        deadline: Duration::from_secs(10),
        ..Limits::default()
    };
    let run = |config| {
        let mut grants = Grants::none();
        grants.grant(store.clone());
        let mut plugin = Running::try_start(
            &engine,
            guests::BENCH_LISTER,
            limits.clone(),
            grants,
            config,
        )
        .unwrap();
        plugin.add("p0000")
    };
    run(json!({"pages": "app=web"})).expect("pages of 64 Pods fit");
    let err = run(json!({"list": "app=web"})).unwrap_err();
    assert!(
        matches!(
            err,
            CallError::Trap {
                kind: TrapKind::MemoryLimit,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn owner_lookup_follows_owners_through_the_lister() {
    let engine = engine();
    let owner = |kind: &str, name: &str| json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "x", "controller": true}]);
    let rs_store = store_with(
        wasmformer::cache::Gvk::from_api_version("apps/v1", "ReplicaSet"),
        vec![],
        [
            json!({"metadata": {"namespace": "shop", "name": "web-5d8", "ownerReferences": owner("Deployment", "web")}}),
        ],
    );
    let deploy_store = store_with(
        wasmformer::cache::Gvk::from_api_version("apps/v1", "Deployment"),
        vec![],
        [json!({"metadata": {"namespace": "shop", "name": "web"}})],
    );
    let mut grants = Grants::none();
    grants.grant(rs_store).grant(deploy_store);
    let mut plugin = Running::start(&engine, guests::OWNER_LOOKUP, Limits::default(), grants);

    let mut pod = pod_json("shop", "web-5d8-abc", 3);
    pod["metadata"]["ownerReferences"] = owner("ReplicaSet", "web-5d8");
    let obj = Arc::new(wasmformer::cache::CachedObject::from_value(pod, true, &[]).unwrap());
    plugin
        .instance
        .handle(
            &pod_gvk(),
            &Event::Add {
                obj,
                initial: false,
            },
        )
        .unwrap();
    assert_eq!(
        plugin.messages(),
        ["pod shop/web-5d8-abc -> ReplicaSet web-5d8 -> Deployment web"]
    );
}

#[test]
fn node_pods_counts_pods_on_a_cordoned_node_through_a_custom_index() {
    let engine = engine();
    let by_node = IndexSpec {
        name: "pods-by-node".into(),
        path: "spec.nodeName".parse().unwrap(),
    };
    let pods: Arc<Store> = store_with(
        pod_gvk(),
        vec![by_node],
        [("a", "n1"), ("b", "n1"), ("c", "n2")].map(|(name, node)| {
            let mut p = pod_json("default", name, 1);
            p["spec"]["nodeName"] = json!(node);
            p
        }),
    );
    let node_gvk = wasmformer::cache::Gvk::from_api_version("v1", "Node");
    let mut grants = Grants::none();
    grants.grant(pods);
    let mut plugin = Running::start(&engine, guests::NODE_PODS, Limits::default(), grants);
    let node = |rv: u64, unschedulable: bool| {
        Arc::new(
            wasmformer::cache::CachedObject::from_value(
                json!({"metadata": {"name": "n1", "resourceVersion": rv.to_string()}, "spec": {"unschedulable": unschedulable}}),
                true,
                &[],
            )
            .unwrap(),
        )
    };
    plugin
        .instance
        .handle(
            &node_gvk,
            &Event::Update {
                old: node(1, false),
                new: node(2, true),
            },
        )
        .unwrap();
    plugin
        .instance
        .handle(
            &node_gvk,
            &Event::Update {
                old: node(2, true),
                new: node(3, true),
            },
        )
        .unwrap();
    assert_eq!(plugin.messages(), ["node n1 cordoned with 2 pods on it"]);
}

#[test]
fn init_errors_stop_the_plugin_from_starting() {
    let engine = engine();
    let err = Running::try_start(
        &engine,
        guests::INIT_FAILS,
        Limits::default(),
        Grants::none(),
        json!({}),
    )
    .err()
    .unwrap();
    assert!(
        matches!(&err, CallError::Init(m) if m.contains("init refused")),
        "{err:?}"
    );
    Running::try_start(
        &engine,
        guests::INIT_FAILS,
        Limits::default(),
        Grants::none(),
        json!({"ok": true}),
    )
    .unwrap();
}

fn load_error(wasm: &Path) -> String {
    let err = LoadedPlugin::load(&engine(), "bad", wasm).unwrap_err();
    format!("{:#}", anyhow::Error::from(err))
}

#[test]
fn a_component_of_another_world_is_refused() {
    let text = load_error(Path::new(guests::WRONG_WORLD));
    assert!(
        text.starts_with("plugin bad:")
            && text.contains("is not a wasmformer plugin")
            && text.contains("greet"),
        "{text}"
    );
}

#[test]
fn a_plugin_for_another_contract_version_is_refused_naming_both() {
    let text = load_error(Path::new(guests::FUTURE_CONTRACT));
    assert!(
        text.contains("built for contract wasmformer:plugin@0.4.0")
            && text.contains("accepts wasmformer:plugin@0.3.x or wasmformer:plugin@0.2.x"),
        "{text}"
    );
}

#[test]
fn an_import_the_host_does_not_provide_is_refused_naming_it() {
    let text = load_error(Path::new(guests::MISSING_IMPORT));
    assert!(
        text.contains("imports what the host does not provide")
            && text.contains("test:missing/secrets"),
        "{text}"
    );
}

#[test]
fn files_that_are_not_components_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text_file = dir.path().join("notes.wasm");
    std::fs::write(&text_file, "not wasm at all").unwrap();
    assert!(load_error(&text_file).contains("is not a WebAssembly file"));
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    assert!(load_error(&core).contains("is a core WebAssembly module, not a component"));
    let err = LoadedPlugin::load(&engine(), "gone", &dir.path().join("missing.wasm")).unwrap_err();
    assert!(matches!(err, LoadError::Read { .. }));
}

#[test]
fn a_cached_artifact_this_host_did_not_write_for_that_plugin_is_recompiled() {
    let cache = tempfile::tempdir().unwrap();
    let engine = PluginEngine::new(Some(cache.path().to_owned())).unwrap();
    let (logger, panic) = (Path::new(guests::POD_LOGGER), Path::new(guests::PANIC));
    let logger_digest = LoadedPlugin::load(&engine, "p", logger)
        .unwrap()
        .digest()
        .to_owned();
    let panic_digest = LoadedPlugin::load(&engine, "q", panic)
        .unwrap()
        .digest()
        .to_owned();
    let artifacts = walk(cache.path());
    let artifact = |digest: &str| {
        artifacts
            .iter()
            .find(|p| p.file_name().unwrap().to_string_lossy() == format!("{digest}.cwasm"))
            .unwrap()
            .clone()
    };

    // Another plugin's artifact, valid for this engine, put in place of pod-logger's (by rename,
    // as the host writes): loading it would run the other plugin's code.
    let planted = artifact(&logger_digest).with_extension("planted");
    std::fs::copy(artifact(&panic_digest), &planted).unwrap();
    std::fs::rename(&planted, artifact(&logger_digest)).unwrap();
    let engine = PluginEngine::new(Some(cache.path().to_owned())).unwrap();
    let reloaded = LoadedPlugin::load(&engine, "p", logger).unwrap();
    assert!(!reloaded.from_cache(), "the planted artifact was used");
    let mut plugin = PluginInstance::start(
        reloaded,
        Limits::default(),
        Grants::none(),
        &json!({}),
        None,
    )
    .unwrap();
    plugin
        .handle(
            &pod_gvk(),
            &Event::Add {
                obj: pod("default", "boom", 1),
                initial: false,
            },
        )
        .expect("pod-logger's code, not the panicking plugin's");
    assert!(
        LoadedPlugin::load(&engine, "p", logger)
            .unwrap()
            .from_cache(),
        "the recompiled artifact is cached again"
    );
}

#[test]
fn a_compile_cache_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let cache = tempfile::tempdir().unwrap();
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = PluginEngine::new(Some(cache.path().to_owned()))
        .err()
        .expect("a world-writable cache is refused");
    let text = err.to_string();
    assert!(
        text.contains(&cache.path().display().to_string()) && text.contains("chmod 700"),
        "{text}"
    );
    let fresh = cache.path().join("new/components");
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    PluginEngine::new(Some(fresh.clone())).unwrap();
    assert_eq!(
        std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777,
        0o700,
        "created private"
    );
}

#[test]
fn compiled_components_are_cached_on_disk_and_bad_cache_entries_are_replaced() {
    let cache = tempfile::tempdir().unwrap();
    let engine = PluginEngine::new(Some(cache.path().to_owned())).unwrap();
    let wasm = Path::new(guests::POD_LOGGER);
    assert!(!LoadedPlugin::load(&engine, "p", wasm).unwrap().from_cache());
    let cached = LoadedPlugin::load(&engine, "p", wasm).unwrap();
    assert!(cached.from_cache());

    // Replace the artifact with garbage (by rename, as the host writes: a loaded component maps
    // the old file): the next load recompiles and still works.
    let artifact = walk(cache.path())
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .unwrap();
    let garbage = artifact.with_extension("tmp");
    std::fs::write(&garbage, b"garbage").unwrap();
    std::fs::rename(&garbage, &artifact).unwrap();
    let recompiled = LoadedPlugin::load(&engine, "p", wasm).unwrap();
    assert!(!recompiled.from_cache());
    assert_eq!(recompiled.digest(), cached.digest());
    PluginInstance::start(
        recompiled,
        Limits::default(),
        Grants::none(),
        &json!({}),
        None,
    )
    .unwrap();
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|e| {
            let p = e.unwrap().path();
            if p.is_dir() { walk(&p) } else { vec![p] }
        })
        .collect()
}

#[test]
fn a_trapping_plugin_does_not_disturb_another_on_the_same_engine() {
    let engine = engine();
    let mut bad = Running::start(&engine, guests::PANIC, Limits::default(), Grants::none());
    let mut good = Running::start(&engine, guests::RECORDER, Limits::default(), Grants::none());
    for i in 0..3 {
        assert!(bad.add(&format!("boom-{i}")).is_err());
        good.add(&format!("pod-{i}")).unwrap();
    }
    assert_eq!(good.messages().len(), 3);
    assert_eq!(good.instance.instantiations(), 1);
}

#[test]
fn a_full_instance_pool_refuses_one_more_instance_and_takes_it_once_a_slot_is_free() {
    let engine = PluginEngine::with_pool(
        shared_cache(),
        PoolSettings {
            max_instances: 2,
            ..PoolSettings::default()
        },
    )
    .expect("engine");
    let start = || {
        Running::try_start(
            &engine,
            guests::POD_LOGGER,
            Limits::default(),
            Grants::none(),
            json!({}),
        )
    };
    let (first, _second) = (start().unwrap(), start().unwrap());
    let err = start()
        .err()
        .expect("a third instance does not fit a pool of two");
    assert!(
        matches!(err, CallError::InstancePoolExhausted(_)),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "cannot instantiate: the instance pool is full (raise host.maxInstances)"
    );
    drop(first);
    let mut third = start().expect("a freed slot is reused");
    third.add("web").unwrap();
}

/// Minor page faults taken by the calling thread so far (`/proc/thread-self/stat`, field 10).
fn thread_minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("read thread stat");
    // The fields after the command name, which is in parentheses and may hold spaces.
    let after_comm = &stat[stat.rfind(')').expect("comm field") + 2..];
    after_comm
        .split(' ')
        .nth(7)
        .and_then(|f| f.parse().ok())
        .expect("minflt field")
}

/// Page faults per start of an instance in a slot its predecessor was just released from: each
/// instance handles one event and is dropped (after `unload` if `unload`), so its slot is the one
/// the next start takes.
fn faults_per_restart(engine: &PluginEngine, unload: bool) -> f64 {
    const STARTS: u64 = 40;
    let plugin = LoadedPlugin::load(engine, "pod-logger", Path::new(guests::POD_LOGGER)).unwrap();
    let cycle = || {
        let mut instance = PluginInstance::start(
            plugin.clone(),
            Limits::default(),
            Grants::none(),
            &json!({}),
            None,
        )
        .unwrap();
        let add = Event::Add {
            obj: pod("default", "web", 1),
            initial: false,
        };
        instance.handle(&pod_gvk(), &add).unwrap();
        if unload {
            instance.unload().unwrap();
        }
    };
    // The first starts map the memory image and grow the host's own heap.
    (0..10).for_each(|_| cycle());
    let before = thread_minor_faults();
    (0..STARTS).for_each(|_| cycle());
    (thread_minor_faults() - before) as f64 / STARTS as f64
}

#[test]
fn a_released_slot_keeps_the_pages_its_instance_wrote_so_the_next_start_faults_none_in() {
    let keeping = PluginEngine::with_pool(
        shared_cache(),
        PoolSettings {
            keep_resident_bytes: START_PAGES_BYTES,
            ..PoolSettings::default()
        },
    )
    .unwrap();
    assert_eq!(
        keeping.keep_resident_bytes(),
        START_PAGES_BYTES,
        "host.keepResidentBytes needs Linux's PAGEMAP_SCAN (6.7+), which this kernel lacks"
    );
    // The default keeps as much.
    let default = PluginEngine::with_pool(shared_cache(), PoolSettings::default()).unwrap();
    assert_eq!(default.keep_resident_bytes(), START_PAGES_BYTES);
    let giving_back = PluginEngine::with_pool(
        shared_cache(),
        PoolSettings {
            keep_resident_bytes: 0,
            ..PoolSettings::default()
        },
    )
    .unwrap();
    assert_eq!(giving_back.keep_resident_bytes(), 0);
    let (kept, given_back) = (
        faults_per_restart(&keeping, false),
        faults_per_restart(&giving_back, false),
    );
    // pod-logger's start and one event write about nine pages of its memory and table.
    assert!(
        given_back >= 4.0,
        "with nothing kept, each start faults its pages in: {given_back}"
    );
    assert!(
        kept < 1.0,
        "a start in a slot that kept its pages faults none in: {kept} per start"
    );
}

/// An unload gives its instance's memory back itself, the pages a released slot would keep
/// included: an unloaded plugin may stay idle for hours, and its slot must not hold them (issue 16).
/// A plain drop (a restart after a trap) leaves them to the next start.
#[test]
fn an_unload_gives_back_the_pages_a_released_slot_would_keep() {
    // Without a compile cache an unload keeps the plugin's code mapped: the faults counted are
    // its memory's.
    let keeping = PluginEngine::with_pool(
        None,
        PoolSettings {
            keep_resident_bytes: START_PAGES_BYTES,
            ..PoolSettings::default()
        },
    )
    .unwrap();
    let (dropped, unloaded) = (
        faults_per_restart(&keeping, false),
        faults_per_restart(&keeping, true),
    );
    assert!(
        dropped < 1.0,
        "a start after a drop faults none in: {dropped}"
    );
    assert!(
        unloaded >= 4.0,
        "a start after an unload faults its pages in again: {unloaded} per start"
    );
}

#[test]
fn an_instance_in_a_released_slot_that_kept_its_pages_starts_from_the_plugins_image() {
    let engine = PluginEngine::with_pool(
        shared_cache(),
        PoolSettings {
            max_instances: 1,
            keep_resident_bytes: START_PAGES_BYTES,
        },
    )
    .unwrap();
    for round in 0..3 {
        // One slot: every instance reuses the pages the one before wrote its count into.
        let mut counter =
            Running::start(&engine, guests::COUNTER, Limits::default(), Grants::none());
        for i in 0..5 {
            counter.add(&format!("pod-{i}")).unwrap();
        }
        let messages = counter.messages();
        assert_eq!(messages[0], r#"{"init":0}"#, "round {round}: {messages:?}");
        assert!(
            messages[5].starts_with(r#"{"count":5,"#),
            "round {round}: {messages:?}"
        );
    }
}
