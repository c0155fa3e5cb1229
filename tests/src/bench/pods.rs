//! The benchmarks' Pods: copies of the realistic fixture (`../shared/fixtures`) named
//! `web-frontend-7d9f8b6c5d-NNNNNN` over a few namespaces, created with many requests in flight,
//! each then given the fixture's status through the status subresource (a create drops it), so
//! what a client caches is the whole realistic Pod.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::realistic_pod;

/// Prefix of every Pod name; the index follows (the fixture's name has the same shape).
pub const NAME_PREFIX: &str = "web-frontend-7d9f8b6c5d-";

/// The name of Pod `i`.
pub fn name_of(i: usize) -> String {
    format!("{NAME_PREFIX}{i:06}")
}

/// The index of a Pod named by [`name_of`].
pub fn index_of(name: &str) -> Option<usize> {
    name.strip_prefix(NAME_PREFIX)?.parse().ok()
}

/// Makes the benchmark's Pods from the realistic fixture.
pub struct PodFactory {
    template: Pod,
    status: Value,
    namespaces: Vec<String>,
}

impl PodFactory {
    /// Pods spread over `namespaces` (Pod `i` in namespace `i % namespaces.len()`).
    pub fn new(namespaces: Vec<String>) -> Self {
        let mut pod = realistic_pod();
        let status = pod
            .as_object_mut()
            .unwrap()
            .remove("status")
            .expect("the fixture has a status");
        let metadata = pod["metadata"].as_object_mut().unwrap();
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
            "namespace",
        ] {
            metadata.remove(field);
        }
        Self {
            template: serde_json::from_value(pod).expect("the fixture is a Pod"),
            status: json!({ "status": status }),
            namespaces,
        }
    }

    /// The namespace of Pod `i`.
    pub fn namespace(&self, i: usize) -> &str {
        &self.namespaces[i % self.namespaces.len()]
    }

    /// Pod `i` without its status.
    pub fn pod(&self, i: usize) -> Pod {
        let mut pod = self.template.clone();
        pod.metadata.name = Some(name_of(i));
        pod
    }

    /// Creates the factory's namespaces.
    pub async fn create_namespaces(&self, client: &kube::Client) -> Result<()> {
        let api: Api<Namespace> = Api::all(client.clone());
        for name in &self.namespaces {
            let ns = Namespace {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            api.create(&PostParams::default(), &ns)
                .await
                .with_context(|| format!("create namespace {name}"))?;
        }
        Ok(())
    }
}

/// When each request of one Pod was sent and answered.
#[derive(Debug, Clone, Copy)]
pub struct PodTimes {
    pub create_sent: Instant,
    pub create_done: Instant,
    pub status_sent: Instant,
    pub status_done: Instant,
}

/// Retries a request a few times on errors that a loaded server may give (timeouts, 429, 5xx).
pub async fn with_retries<T, F: std::future::Future<Output = kube::Result<T>>>(
    mut request: impl FnMut() -> F,
) -> Result<T> {
    let mut attempt = 0;
    loop {
        match request().await {
            Ok(v) => return Ok(v),
            Err(e)
                if attempt < 5
                    && !matches!(&e, kube::Error::Api(s) if s.code == 409 || s.code == 422 || s.code == 403) =>
            {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Creates Pods `range` (and patches in their status) with `concurrency` requests in flight.
pub async fn create_pods(
    client: &kube::Client,
    factory: &Arc<PodFactory>,
    range: Range<usize>,
    concurrency: usize,
) -> Result<Vec<PodTimes>> {
    let next = Arc::new(AtomicUsize::new(range.start));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, factory, next, end) =
            (client.clone(), factory.clone(), next.clone(), range.end);
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    return Ok::<_, anyhow::Error>(done);
                }
                let api: Api<Pod> = Api::namespaced(client.clone(), factory.namespace(i));
                let pod = factory.pod(i);
                let (post, patch, status) = (
                    PostParams::default(),
                    PatchParams::default(),
                    Patch::Merge(&factory.status),
                );
                let create_sent = Instant::now();
                with_retries(|| api.create(&post, &pod))
                    .await
                    .with_context(|| format!("create pod {i}"))?;
                let create_done = Instant::now();
                let name = name_of(i);
                let status_sent = Instant::now();
                with_retries(|| api.patch_status(&name, &patch, &status))
                    .await
                    .with_context(|| format!("patch the status of pod {i}"))?;
                done.push((
                    i,
                    PodTimes {
                        create_sent,
                        create_done,
                        status_sent,
                        status_done: Instant::now(),
                    },
                ));
            }
        }));
    }
    let mut times: Vec<Option<PodTimes>> = vec![None; range.len()];
    for task in tasks {
        for (i, t) in task.await??.into_iter() {
            times[i - range.start] = Some(t);
        }
    }
    Ok(times
        .into_iter()
        .map(|t| t.expect("every pod was created"))
        .collect())
}

/// Sets the label `key=value` on each Pod of `indexes` with a merge patch, `concurrency` requests
/// in flight (each a real change when `value` is new: one update event per Pod); the
/// resourceVersion each Pod has after its patch, in the order of `indexes`.
pub async fn label_pods(
    client: &kube::Client,
    factory: &Arc<PodFactory>,
    indexes: Vec<usize>,
    (key, value): (&str, &str),
    concurrency: usize,
) -> Result<Vec<String>> {
    let patch = json!({ "metadata": { "labels": { key: value } } });
    let indexes = Arc::new(indexes);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, factory, next, indexes, patch) = (
            client.clone(),
            factory.clone(),
            next.clone(),
            indexes.clone(),
            patch.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            loop {
                let at = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = indexes.get(at) else {
                    return Ok::<_, anyhow::Error>(done);
                };
                let api: Api<Pod> = Api::namespaced(client.clone(), factory.namespace(i));
                let (name, params, patch) =
                    (name_of(i), PatchParams::default(), Patch::Merge(&patch));
                let pod = with_retries(|| api.patch(&name, &params, &patch))
                    .await
                    .with_context(|| format!("label pod {i}"))?;
                done.push((at, pod.metadata.resource_version.unwrap_or_default()));
            }
        }));
    }
    let mut versions = vec![String::new(); indexes.len()];
    for task in tasks {
        for (at, version) in task.await?? {
            versions[at] = version;
        }
    }
    Ok(versions)
}

/// One `serde_json::from_str::<Value>` of `text` (a Pod as a server sends it): the floor issue
/// 17 names for a client's CPU per object. The median over `batches` batches of `per_batch`
/// parses, in this process.
pub fn parse_time(text: &str, batches: usize, per_batch: u32) -> Result<Duration> {
    per_call(batches, per_batch, || {
        std::hint::black_box(serde_json::from_str::<Value>(std::hint::black_box(text))).map(drop)
    })
}

/// The median time of one `wasmformer_protobuf::to_json` of `body` (a protobuf object as the
/// API server sends it) over `batches` batches of `per_batch`: the informer's work on a protobuf
/// LIST page before kube parses the JSON.
pub fn transcode_time(
    body: &[u8],
    managed_fields: wasmformer_protobuf::ManagedFields,
    batches: usize,
    per_batch: u32,
) -> Result<Duration> {
    per_call(batches, per_batch, || {
        std::hint::black_box(wasmformer_protobuf::to_json(
            std::hint::black_box(body),
            managed_fields,
        ))
        .map(drop)
    })
}

fn per_call<E: std::error::Error + Send + Sync + 'static>(
    batches: usize,
    per_batch: u32,
    mut call: impl FnMut() -> Result<(), E>,
) -> Result<Duration> {
    let times = (0..batches)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..per_batch {
                call()?;
            }
            Ok(started.elapsed() / per_batch)
        })
        .collect::<Result<Vec<_>, E>>()?;
    Ok(crate::bench::units::median(times))
}
