//! The README's plugin-author snippets, built as a plugin author would: the `Cargo.toml`, the
//! `.cargo/config.toml` and the `lib.rs` of "Plugin author guide", and its state example, each in
//! a crate outside this workspace, with `cargo build --release --target wasm32-wasip2`; then the
//! host loads and runs what it built.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::json;
use wasmformer::plugin::{
    Event, Grants, Limits, LoadedPlugin, LogLine, LogObserver, PluginEngine, PluginInstance,
};
use wasmformer_tests::{pod, pod_gvk, repo_root};

/// The body of the first fenced block of `language` in `text`.
fn fenced<'a>(text: &'a str, language: &str) -> &'a str {
    let open = format!("```{language}\n");
    let start = text
        .find(&open)
        .unwrap_or_else(|| panic!("no ```{language} block"))
        + open.len();
    let end = start + text[start..].find("```").expect("an unclosed block");
    &text[start..end]
}

/// The README's author guide, from its heading on.
fn author_guide(readme: &str) -> &str {
    &readme[readme
        .find("## Plugin author guide")
        .expect("the plugin author guide")..]
}

/// The guide's `.cargo/config.toml`: the build settings for the plugin's target, the same as the
/// workspace's own (which `wasmformer new` writes).
fn cargo_config(guide: &str) -> &str {
    let config = fenced(
        &guide[guide
            .find("`.cargo/config.toml`")
            .expect("the guide names .cargo/config.toml")..],
        "toml",
    );
    let table = &config[config
        .find("[target.wasm32-wasip2]")
        .unwrap_or_else(|| panic!("no wasm32-wasip2 table: {config}"))..];
    let workspace = std::fs::read_to_string(repo_root().join(".cargo/config.toml")).unwrap();
    assert!(
        workspace.contains(table),
        "the README's settings differ from .cargo/config.toml:\n{table}"
    );
    config
}

/// Builds `source` with `manifest` and the cargo `config` as a plugin author would, in a crate of
/// its own outside this workspace (beside a checkout of this repository, as the manifest's path
/// says); returns the component, where the README says it lands.
fn build(manifest: &str, config: &str, source: &str, crate_name: &str) -> PathBuf {
    let root = repo_root().canonicalize().unwrap();
    let guide_path = "../wasmformer/guest-sdk";
    assert!(manifest.contains(guide_path), "{manifest}");
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = dir.path().join(crate_name);
    std::fs::create_dir_all(crate_dir.join("src")).unwrap();
    std::fs::create_dir_all(crate_dir.join(".cargo")).unwrap();
    std::fs::write(crate_dir.join(".cargo/config.toml"), config).unwrap();
    std::os::unix::fs::symlink(&root, dir.path().join("wasmformer")).unwrap();
    std::fs::write(crate_dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(crate_dir.join("src/lib.rs"), source).unwrap();
    // The workspace's lock pins the SDK's dependencies to the versions already built for the test
    // guests; the shared target folder reuses them (the first run compiles them).
    std::fs::copy(root.join("Cargo.lock"), crate_dir.join("Cargo.lock")).unwrap();
    let target_dir: PathBuf = root.join("target/readme-plugin");
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.current_dir(&crate_dir).args([
        "build",
        "--release",
        "--target",
        "wasm32-wasip2",
        "--offline",
    ]);
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
    ] {
        cargo.env_remove(var);
    }
    let status = cargo
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .expect("run cargo");
    assert!(status.success(), "the README's {crate_name} does not build");
    target_dir.join(format!(
        "wasm32-wasip2/release/{}.wasm",
        crate_name.replace('-', "_")
    ))
}

/// Starts the plugin at `wasm` with `config`; its log messages go to the returned list.
fn start(wasm: &Path, config: serde_json::Value) -> (PluginInstance, Arc<Mutex<Vec<String>>>) {
    let engine = PluginEngine::new(None).unwrap();
    let plugin = LoadedPlugin::load(&engine, "my-plugin", wasm).expect("the built component loads");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let observer: LogObserver = {
        let lines = lines.clone();
        Arc::new(move |line: &LogLine| lines.lock().unwrap().push(line.message.clone()))
    };
    let instance = PluginInstance::start(
        plugin,
        Limits::default(),
        Grants::none(),
        &config,
        Some(observer),
    )
    .unwrap();
    (instance, lines)
}

fn add(instance: &mut PluginInstance, name: &str, rv: u64) {
    let event = Event::Add {
        obj: pod("default", name, rv),
        initial: true,
    };
    instance.handle(&pod_gvk(), &event).unwrap();
}

#[test]
fn the_plugin_author_guide_builds_and_runs() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let guide = author_guide(&readme);
    let (manifest, source) = (fenced(guide, "toml"), fenced(guide, "rust"));
    assert!(
        manifest.contains("[package]") && manifest.contains("name = \"my-plugin\""),
        "{manifest}"
    );
    let wasm = build(manifest, cargo_config(guide), source, "my-plugin");
    assert!(
        readme.contains("target/wasm32-wasip2/release/my_plugin.wasm"),
        "the README names the file"
    );
    let (mut instance, lines) = start(&wasm, json!({}));
    add(&mut instance, "web", 1);
    assert_eq!(*lines.lock().unwrap(), ["New Pod Added to Store: web"]);
}

/// The state example, with the dependency line the README says to add: it builds, and its count
/// survives an idle unload while `verbose`, derived from the config, is set again by `init`.
#[test]
fn the_state_example_builds_and_keeps_its_count_across_an_unload() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let guide = author_guide(&readme);
    let state = &guide[guide
        .find("- State that survives an idle unload")
        .expect("the state bullet")..];
    let serde = r#"serde = { version = "1", features = ["derive"] }"#;
    assert!(state.contains(serde), "the README says which serde to add");
    let manifest = fenced(guide, "toml")
        .replace("name = \"my-plugin\"", "name = \"pod-counter\"")
        .replace("[dependencies]\n", &format!("[dependencies]\n{serde}\n"));
    let wasm = build(
        &manifest,
        cargo_config(guide),
        fenced(state, "rust"),
        "pod-counter",
    );

    let (mut instance, lines) = start(&wasm, json!({"verbose": true}));
    add(&mut instance, "a", 1);
    instance.unload().unwrap();
    add(&mut instance, "b", 2);
    assert_eq!(
        *lines.lock().unwrap(),
        ["1 Pods seen, the last a", "2 Pods seen, the last b"]
    );
}
