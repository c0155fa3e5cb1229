//! What a restart costs, against the real kube-apiserver + etcd of `tests/kube-apiserver/`, and
//! what a leader-election failover costs instead. Prints a markdown table on stdout, progress on
//! stderr.
//!
//! For each `--pods` count, the namespace is filled with that many realistic Pods (the fixture of
//! `../shared/fixtures`, as the informer bench does), then:
//!
//! - **restart**: an in-process [`Runtime`] with one plugin that does nothing (`bench-empty`) on
//!   every Pod is started `--runs` times from nothing, as a restarted process would be: time from
//!   start to every plugin synced (its initial adds delivered), and the API requests it made
//!   (from its own `wasmformer_api_requests_total`), lists among them. The wasm comes from the
//!   compile cache, as in a restarted pod with a persistent cache.
//! - **failover**: two runtimes with leader election (leaseDuration 4s, renewDeadline 3s,
//!   retryPeriod 1s); the leader shuts down (drains and releases the Lease); time from the release
//!   to the follower's plugin synced, and the requests the follower made meanwhile.
//!
//! `cargo bench -p wasmformer-tests --bench restart [-- --pods 1000,10000 --runs 3 --fixture FILE]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::Value;
use wasmformer::config::HostConfig;
use wasmformer::metrics::Format;
use wasmformer::plugin::PluginEngine;
use wasmformer::runtime::{Runtime, RuntimeOptions};
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::bench::units::median;
use wasmformer_tests::{guests, realistic_pod};

struct Args {
    pods: Vec<usize>,
    runs: usize,
    /// `--fixture FILE`: the Pod to copy (default: `../shared/fixtures/pod-realistic.json`).
    fixture: Option<std::path::PathBuf>,
}

fn args() -> Result<Args> {
    let mut args = Args {
        pods: vec![1000, 10000],
        runs: 3,
        fixture: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--pods" => {
                args.pods = it
                    .next()
                    .context("--pods needs a value")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--runs" => args.runs = it.next().context("--runs needs a value")?.parse()?,
            "--fixture" => {
                args.fixture = Some(it.next().context("--fixture needs a value")?.into())
            }
            "--bench" => {}
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

/// The API requests a runtime made (its own `wasmformer_api_requests_total`), and the lists among
/// them.
fn requests(runtime: &Runtime) -> (u64, u64) {
    let text = runtime.metrics().encode(Format::Text);
    let mut total = 0.0;
    // A list is a GET (or a streaming WATCH): the informers count them.
    let lists: u64 = runtime
        .informers()
        .statuses()
        .iter()
        .map(|(_, status)| status.lists)
        .sum();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("wasmformer_api_requests_total{") else {
            continue;
        };
        let value: f64 = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        total += value;
    }
    (total as u64, lists)
}

fn config(ns: &str, election: Option<&str>) -> Result<HostConfig> {
    let election = election
        .map(|identity| {
            format!(
                "  leaderElection: {{enabled: true, leaseName: bench, namespace: {ns}, leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 1s, identity: {identity}}}\n"
            )
        })
        .unwrap_or_default();
    HostConfig::parse(
        &format!(
            "host:\n  watchConfig: false\n{election}plugins:\n  - name: empty\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod, namespace: {ns}}}]\n",
            guests::BENCH_EMPTY
        ),
        "/".into(),
    )
    .map_err(|p| anyhow::anyhow!("{p:?}"))
}

async fn fill(api: &Api<Pod>, count: usize, fixture: Option<&std::path::Path>) -> Result<()> {
    let have = api.list_metadata(&ListParams::default()).await?.items.len();
    let mut template = match fixture {
        Some(path) => serde_json::from_str(&std::fs::read_to_string(path)?)?,
        None => realistic_pod(),
    };
    if let Value::Object(meta) = &mut template["metadata"] {
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "namespace",
        ] {
            meta.remove(key);
        }
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(have));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (api, next, template) = (api.clone(), next.clone(), template.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, anyhow::Error>(());
                }
                let mut pod = template.clone();
                pod["metadata"]["name"] = format!("restart-{i:06}").into();
                let pod: Pod = serde_json::from_value(pod)?;
                api.create(&PostParams::default(), &pod).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// Whether the plugin runs and has delivered its initial adds (a new leader has none at first).
async fn plugin_synced(runtime: &Runtime) -> bool {
    let statuses = runtime.statuses().await;
    !statuses.is_empty() && statuses.iter().all(|s| s.synced && !s.version.is_empty())
}

fn main() -> Result<()> {
    let args = args()?;
    let tokio = tokio::runtime::Runtime::new()?;
    let server = KubeApiserver::start();
    let cache = tempfile::tempdir()?;
    let engine = Arc::new(
        PluginEngine::new(Some(cache.path().to_owned())).map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    println!(
        "| Pods | restart: start to synced (median of {}) | restart: API requests (lists) | failover: release to synced | failover: API requests (lists) |",
        args.runs
    );
    println!("|---:|---:|---:|---:|---:|");
    tokio.block_on(async {
        let client = server.admin().await;
        let ns = server.namespace("restart").await;
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        for &count in &args.pods {
            eprintln!("filling {count} pods…");
            fill(&api, count, args.fixture.as_deref()).await?;
            let mut times = Vec::new();
            let mut restart_requests = (0, 0);
            for run in 0..=args.runs {
                let started = Instant::now();
                let runtime = Runtime::start(
                    config(&ns, None)?,
                    client.clone(),
                    engine.clone(),
                    RuntimeOptions::default(),
                )
                .await;
                ensure!(
                    runtime.wait_synced(Duration::from_secs(600)).await,
                    "no sync"
                );
                let elapsed = started.elapsed();
                restart_requests = requests(&runtime);
                runtime.shutdown().await;
                if run > 0 {
                    // Run 0 warms the compile cache, as a persistent cache would be.
                    times.push(elapsed);
                }
                eprintln!("{count} pods, restart {run}: {elapsed:?}, {restart_requests:?}");
            }
            let start = |identity: &'static str| {
                let (client, engine, ns) = (client.clone(), engine.clone(), ns.clone());
                async move {
                    Ok::<_, anyhow::Error>(
                        Runtime::start(
                            config(&ns, Some(identity))?,
                            client,
                            engine,
                            RuntimeOptions::default(),
                        )
                        .await,
                    )
                }
            };
            let leader = start("bench-a").await?;
            while !(leader.is_leading() && plugin_synced(&leader).await) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let follower = start("bench-b").await?;
            ensure!(
                follower.wait_synced(Duration::from_secs(600)).await,
                "follower not warm"
            );
            ensure!(!follower.is_leading(), "the second runtime leads");
            let before = requests(&follower);
            let released = Instant::now();
            leader.shutdown().await;
            let release_took = released.elapsed();
            while !(follower.is_leading() && plugin_synced(&follower).await) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let failover = released.elapsed();
            let after = requests(&follower);
            follower.shutdown().await;
            eprintln!("{count} pods: failover {failover:?} (release took {release_took:?})");
            println!(
                "| {count} | {:.2} s | {} ({}) | {:.2} s | {} ({}) |",
                median(times).as_secs_f64(),
                restart_requests.0,
                restart_requests.1,
                failover.as_secs_f64(),
                after.0 - before.0,
                after.1 - before.1,
            );
        }
        Ok(())
    })
}
