//! The admin status page (`GET /`) rendered by headless Chromium against a running host on the
//! dev cluster: every plugin's row shows what `/status` says. The screenshot is kept as a test
//! artifact in `target/tmp/status-page.png`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use wasmformer::config::HostConfig;
use wasmformer::plugin::PluginEngine;
use wasmformer::runtime::{Runtime, RuntimeOptions};
use wasmformer_tests::guests;

const WAIT: Duration = Duration::from_secs(30);

/// The text of the `field` cell in the row whose `data-{row_attr}` is `key`.
fn cell(dom: &str, row_attr: &str, key: &str, field: &str) -> String {
    let row_start = dom
        .find(&format!(r#"data-{row_attr}="{key}""#))
        .unwrap_or_else(|| panic!("no row {key} in {dom}"));
    let row = &dom[row_start..row_start + dom[row_start..].find("</tr>").unwrap()];
    let at = row
        .find(&format!(r#"data-field="{field}""#))
        .unwrap_or_else(|| panic!("no {field} in {row}"));
    let text = &row[at + row[at..].find('>').unwrap() + 1..];
    let text = &text[..text.find("</td>").unwrap()];
    text.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_what_status_says() {
    let (_dev, client) = wasmformer_tests::dev_cluster_with_namespace("paged").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "paged");
    let yaml = format!(
        "plugins:\n  - name: rec\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod, namespace: paged}}]\n  - name: pan\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod, namespace: paged}}]\n",
        guests::RECORDER,
        guests::PANIC
    );
    let config = HostConfig::parse(&yaml, std::path::PathBuf::from("/"))
        .unwrap_or_else(|p| panic!("{p:#?}"));
    let engine = Arc::new(
        PluginEngine::new(Some(
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
        ))
        .unwrap(),
    );
    let runtime = Runtime::start(config, client.clone(), engine, RuntimeOptions::default()).await;
    assert!(runtime.wait_synced(WAIT).await);
    for name in ["a", "boom-1", "b"] {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let deadline = std::time::Instant::now() + WAIT;
    while runtime.statuses().await.iter().any(|s| s.calls < 3) {
        assert!(
            std::time::Instant::now() < deadline,
            "{:#?}",
            runtime.statuses().await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (admin, _task) =
        wasmformer::admin::serve("127.0.0.1:0".parse().unwrap(), runtime.clone(), None)
            .await
            .unwrap();
    let url = format!("http://{admin}/");

    let status: Value = {
        let url = format!("http://{admin}/status");
        tokio::task::spawn_blocking(move || {
            ureq::get(&url)
                .call()
                .unwrap()
                .body_mut()
                .read_json()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let page = url.clone();
    let dom =
        tokio::task::spawn_blocking(move || wasmformer_tests::chromium(&page, &["--dump-dom"]))
            .await
            .unwrap();
    assert!(
        dom.contains(r#"data-loaded="true""#),
        "the page did not load /status: {dom}"
    );
    for plugin in status["plugins"].as_array().unwrap() {
        let name = plugin["name"].as_str().unwrap();
        let shown = |field: &str| cell(&dom, "plugin", name, field);
        assert_eq!(shown("version"), plugin["version"].as_str().unwrap()[..12]);
        assert_eq!(shown("contract"), plugin["contract"].as_str().unwrap());
        assert_eq!(
            shown("contract"),
            wasmformer::plugin::CONTRACT_VERSION,
            "the guests are built for the current contract"
        );
        assert_eq!(shown("synced"), "yes");
        assert_eq!(shown("instance"), "loaded");
        assert_eq!(shown("calls"), plugin["calls"].to_string());
        assert_eq!(shown("failures"), plugin["failures"].to_string());
        assert_eq!(shown("queueDepth"), plugin["queueDepth"].to_string());
        assert_eq!(shown("swaps"), plugin["swaps"].to_string());
        let error = if plugin["lastSwapError"].is_null() {
            &plugin["lastError"]
        } else {
            &plugin["lastSwapError"]
        };
        assert_eq!(shown("lastError"), error["message"].as_str().unwrap_or(""));
    }
    assert_eq!(cell(&dom, "plugin", "pan", "failures"), "1");
    assert!(
        cell(&dom, "plugin", "pan", "lastError").contains("boom: the plugin panicked on purpose"),
        "{dom}"
    );
    assert_eq!(
        status["informers"].as_array().unwrap().len(),
        dom.matches("data-informer=").count()
    );
    for informer in status["informers"].as_array().unwrap() {
        // The informers ask for protobuf; the dev cluster answers JSON, which they take.
        assert_eq!(informer["listEncoding"], "json", "{informer}");
        assert_eq!(informer["listStrategy"], "list", "{informer}");
    }
    assert!(dom.contains("single replica (no leader election)"), "{dom}");

    let screenshot = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let arg = format!("--screenshot={}", screenshot.display());
    tokio::task::spawn_blocking(move || wasmformer_tests::chromium(&url, &[&arg]))
        .await
        .unwrap();
    let png = std::fs::read(&screenshot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    runtime.shutdown().await;
}
