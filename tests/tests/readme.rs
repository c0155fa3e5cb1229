//! The README's plugin-author snippets, built as a plugin author would: the `Cargo.toml` and the
//! `lib.rs` of "Plugin author guide", in a crate outside this workspace, with
//! `cargo build --release --target wasm32-wasip2`; then the host loads and runs what it built.

use std::path::{Path, PathBuf};
use std::process::Command;

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

#[test]
fn the_plugin_author_guide_builds_and_runs() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let guide = &readme[readme
        .find("## Plugin author guide")
        .expect("the plugin author guide")..];
    let (manifest, source) = (fenced(guide, "toml"), fenced(guide, "rust"));
    assert!(
        manifest.contains("[package]") && manifest.contains("name = \"my-plugin\""),
        "{manifest}"
    );

    // A checkout of this repository beside the plugin's folder, as the snippet's path says.
    let root = repo_root().canonicalize().unwrap();
    let guide_path = "../wasmformer/guest-sdk";
    assert!(manifest.contains(guide_path), "{manifest}");
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = dir.path().join("my-plugin");
    std::fs::create_dir_all(crate_dir.join("src")).unwrap();
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
    assert!(status.success(), "the README's plugin does not build");

    // Where the README says it lands: the target folder's wasm32-wasip2/release/my_plugin.wasm.
    let wasm = target_dir.join("wasm32-wasip2/release/my_plugin.wasm");
    assert!(
        readme.contains("target/wasm32-wasip2/release/my_plugin.wasm"),
        "the README names the file"
    );
    let engine = PluginEngine::new(None).unwrap();
    let plugin = LoadedPlugin::load(&engine, "my-plugin", Path::new(&wasm))
        .expect("the built component loads");
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let observer: LogObserver = {
        let lines = lines.clone();
        std::sync::Arc::new(move |line: &LogLine| lines.lock().unwrap().push(line.message.clone()))
    };
    let mut instance = PluginInstance::start(
        plugin,
        Limits::default(),
        Grants::none(),
        &json!({}),
        Some(observer),
    )
    .unwrap();
    instance
        .handle(
            &pod_gvk(),
            &Event::Add {
                obj: pod("default", "web", 1),
                initial: true,
            },
        )
        .unwrap();
    assert_eq!(*lines.lock().unwrap(), ["New Pod Added to Store: web"]);
}
