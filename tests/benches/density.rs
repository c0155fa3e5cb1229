//! The density benchmark of issue 16: many plugins in one `wasmformer run` against one informer
//! process per controller, on the real kube-apiserver + etcd of `tests/kube-apiserver/`, in one
//! run. Prints markdown tables on stdout (what `scripts/bench-density` shows) and progress on
//! stderr.
//!
//! 1. `--pods` realistic Pods (the fixture of `../shared/fixtures`, with its status) are created
//!    as the informer benchmark creates them.
//! 2. **N distinct plugins** (`--plugins`, default 1, 10, 100, 1000), each handling every Pod,
//!    in a fresh `wasmformer run` (release build) per N. Every plugin is a copy of the
//!    `bench-probe` guest (does nothing, except log the updates of one probe Pod) with its own
//!    nonce in a custom section, so each has its own digest and is compiled, cached and mapped on
//!    its own: nothing is shared that separate controllers would not share. The compile cache is
//!    filled before the Pods exist (a host with every copy against no Pods), so each measured host
//!    maps its plugins from it. Measured once `/readyz` answers (every plugin has handled its
//!    initial adds) and a settling pause: RSS (median of five samples of `VmRSS`), PSS
//!    (`/proc/<pid>/smaps_rollup`), threads (`/proc/<pid>/status`), RSS by kind of mapping
//!    (`/proc/<pid>/smaps`). Then the CPU phase: `--updates` Pods get a new label (one update
//!    event each), then the probe Pod; once every plugin has logged the probe's update, every
//!    plugin has handled the others too (each plugin's events arrive in the watch's order). Host
//!    CPU is `utime + stime` of `/proc/<pid>/stat` over that phase, divided by the handler calls
//!    it made (`wasmformer_handler_calls_total`, event `update`, from `/metrics`) and by the Pod
//!    updates. Then the latency phase: `--probes` updates of the probe Pod, one at a time; latency
//!    is from the moment the patch request is sent to the host's log timestamp of each plugin's
//!    `probe <resourceVersion>` line (per plugin, and until the last plugin), so it includes the
//!    API server's write and watch. The bench also watches the probe Pod itself, and the time from
//!    its own watch seeing an update to each plugin's line is the host's part ("watch → handled":
//!    both watches get the event from the same server at about the same moment). The
//!    handler-duration histogram of `/metrics` (bucket resolution) is shown beside it.
//! 3. **The peers**, on the same Pods: N client-go informer processes (`--client-go`, default
//!    1 and 10; the harness's typed SharedInformer, each its own informer), and one kube-rs
//!    process (the `kube-informer` bench target, its path in `$WASMFORMER_KUBE_INFORMER`): RSS,
//!    PSS and threads summed over the processes once each has printed every add, and CPU per
//!    event over the same kind of update phase. Both print one JSON line per event (their
//!    handler's work; wasmformer's plugins do nothing).
//!
//! `cargo bench -p wasmformer-tests --bench density [-- --pods 10000 --plugins 1,10,100,1000
//! --client-go 1,10 --updates 1000 --probes 30 --settle 5 --concurrency 16 --namespaces 4
//! --logs DIR --unload-after SECONDS --bystanders --deadline MS]` (`--logs`: keep each host's log;
//! `--unload-after`: also measure every N with `lifecycle: {unloadAfter}`, its plugins unloaded;
//! `--bystanders`: also every N with one plugin on the Pods and the others on ConfigMaps, for CPU
//! per Pod update against N = 1; `--deadline`: every plugin's `limits.deadline`, in ms). Needs
//! `target/release/wasmformer`.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Seek};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use prometheus_parse::{Scrape, Value as Metric};
use serde_json::Value;
use wasmformer::dispatch::DeliveryPool;
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::bench::host::{HostProcess, HostSetup};
use wasmformer_tests::bench::peer::InformerPeer;
use wasmformer_tests::bench::pods::{PodFactory, create_pods, label_pods, name_of};
use wasmformer_tests::bench::proc::{
    Breakdown, cpu_time, load_average, print_loads_and_notes, pss, smaps_breakdown, steady_rss,
    threads,
};
use wasmformer_tests::bench::units::{kib, mib, ms, p50_p99};
use wasmformer_tests::{guests, with_custom_section};

/// The Pod whose updates the plugins log: Pod 0. The CPU phase updates the others.
const PROBE: usize = 0;
/// The custom section that makes each copy of the guest a distinct component.
const NONCE_SECTION: &str = "wasmformer-bench-density-nonce";
/// The label every update of the bench changes.
const LABEL: &str = "bench-density-round";

// ---------------------------------------------------------------------------------------------
// Options

struct Options {
    pods: usize,
    plugins: Vec<usize>,
    client_go: Vec<usize>,
    updates: usize,
    probes: usize,
    settle: Duration,
    concurrency: usize,
    namespaces: usize,
    logs: Option<PathBuf>,
    /// `--unload-after SECONDS`: also measure every N with `lifecycle: {unloadAfter}`.
    unload_after: Option<Duration>,
    /// `--bystanders`: also measure every N with one plugin handling the Pods and the others
    /// handling ConfigMaps (which do not change): CPU per Pod update against N = 1.
    bystanders: bool,
    /// `--deadline MS`: every plugin's `limits.deadline` (default: the host's, 100 ms). A short
    /// one shows whether calls starved by the machine's load fail ("calls not ok").
    deadline: Option<Duration>,
}

fn counts(text: &str) -> Result<Vec<usize>> {
    let counts: Vec<usize> = text
        .split(',')
        .map(|n| n.trim().replace('_', "").parse())
        .collect::<Result<_, _>>()?;
    ensure!(
        !counts.is_empty() && counts[0] > 0 && counts.windows(2).all(|w| w[0] < w[1]),
        "{text:?}: increasing positive counts"
    );
    Ok(counts)
}

impl Options {
    fn from_args() -> Result<Self> {
        let mut options = Self {
            pods: 10_000,
            plugins: vec![1, 10, 100, 1000],
            client_go: vec![1, 10],
            updates: 1000,
            probes: 30,
            settle: Duration::from_secs(5),
            concurrency: 16,
            namespaces: 4,
            logs: None,
            unload_after: None,
            bystanders: false,
            deadline: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--pods" => options.pods = value()?.replace('_', "").parse()?,
                "--plugins" => options.plugins = counts(&value()?)?,
                "--client-go" => options.client_go = counts(&value()?)?,
                "--updates" => options.updates = value()?.parse()?,
                "--probes" => options.probes = value()?.parse()?,
                "--settle" => options.settle = Duration::from_secs(value()?.parse()?),
                "--concurrency" => options.concurrency = value()?.parse()?,
                "--namespaces" => options.namespaces = value()?.parse()?,
                "--logs" => options.logs = Some(PathBuf::from(value()?)),
                "--unload-after" => {
                    options.unload_after = Some(Duration::from_secs_f64(value()?.parse()?))
                }
                "--bystanders" => options.bystanders = true,
                "--deadline" => options.deadline = Some(Duration::from_millis(value()?.parse()?)),
                "--bench" => {}
                other => bail!("unknown argument {other:?}"),
            }
        }
        ensure!(options.pods >= 2, "--pods: at least 2 (one is the probe)");
        ensure!(
            options.updates > 0 && options.probes > 0,
            "--updates and --probes must be positive"
        );
        ensure!(
            options.concurrency > 0 && options.namespaces > 0,
            "--concurrency and --namespaces must be positive"
        );
        // Each update of the CPU phase must change another Pod than the probe.
        options.updates = options.updates.min(options.pods - 1);
        Ok(options)
    }
}

// ---------------------------------------------------------------------------------------------
// What is measured

/// How the measured hosts run their plugins: every plugin loaded, or (`--unload-after`) with
/// `lifecycle: {unloadAfter}`, measured once every plugin is unloaded, and with each latency
/// probe sent to unloaded plugins. [`print_report`] prints one RSS column per variant.
struct Variant {
    /// Which it is.
    kind: VariantKind,
    /// The heading of its RSS column.
    label: &'static str,
    /// Extra YAML of each plugin entry, indented by four spaces (empty for none).
    plugin_fields: String,
    /// `lifecycle.unloadAfter`, if the plugins unload.
    unload_after: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VariantKind {
    /// Every plugin loaded, every plugin handling the Pods.
    Loaded,
    /// `lifecycle: {unloadAfter}`.
    Unloaded,
    /// Plugin 0 handles the Pods; the others ConfigMaps, which the bench does not change.
    Bystanders,
}

/// Memory and threads of a process, or summed over a few.
#[derive(Debug, Clone, Copy, Default)]
struct Footprint {
    rss: u64,
    /// `None` where `/proc/<pid>/smaps_rollup` cannot be read.
    pss: Option<u64>,
    threads: u64,
}

impl Footprint {
    fn of(pids: &[u32]) -> Result<Self> {
        let mut sum = Footprint {
            pss: Some(0),
            ..Footprint::default()
        };
        for &pid in pids {
            sum.rss += steady_rss(pid)?;
            sum.pss = sum.pss.zip(pss(pid)).map(|(a, b)| a + b);
            sum.threads += threads(pid)?;
        }
        Ok(sum)
    }
}

/// CPU spent on a fixed number of Pod updates.
#[derive(Debug, Clone, Copy)]
struct CpuPhase {
    /// Pod updates applied.
    updates: usize,
    /// Handler calls (wasmformer) or event lines (peers) they caused, over every plugin or
    /// process.
    calls: u64,
    /// `utime + stime` over the phase, summed over the processes.
    cpu: Duration,
    /// From the first patch sent to the last handler call seen.
    took: Duration,
}

impl CpuPhase {
    fn per_update(&self) -> Duration {
        self.cpu / self.updates.max(1) as u32
    }

    fn per_call(&self) -> Duration {
        self.cpu.div_f64(self.calls.max(1) as f64)
    }
}

/// Update → handler latency over the probe updates.
#[derive(Debug, Clone, Copy)]
struct Latency {
    /// p50 and p99 over every (update, plugin) pair.
    each: (Duration, Duration),
    /// The same from the moment the bench's own watch saw the update: the host's part.
    from_watch: (Duration, Duration),
    /// p50 and p99 over the updates of the time until the last plugin handled it.
    all: (Duration, Duration),
}

/// One `wasmformer run` with N plugins.
struct HostRow {
    plugins: usize,
    variant: usize,
    ready: Duration,
    footprint: Footprint,
    breakdown: Breakdown,
    cpu: CpuPhase,
    latency: Latency,
    /// p50 and p99 of `wasmformer_handler_duration_seconds` for updates, as bucket upper bounds.
    histogram: (Option<f64>, Option<f64>),
    /// Handler calls of the whole run that did not end `ok`, and updates the queues merged.
    failed: u64,
    coalesced: u64,
}

/// N peer processes.
struct PeerRow {
    client: &'static str,
    processes: usize,
    ready: Duration,
    footprint: Footprint,
    cpu: CpuPhase,
}

// ---------------------------------------------------------------------------------------------
// The host's metrics and log

fn scrape(host: &HostProcess) -> Result<Scrape> {
    let text = host.metrics()?;
    Ok(Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))?)
}

/// The sum of the counter `metric` over the series whose labels include `labels`.
fn counter(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> u64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            Metric::Counter(v) | Metric::Untyped(v) | Metric::Gauge(v) => v,
            _ => 0.0,
        })
        .sum::<f64>() as u64
}

/// Handler calls of `event` (add, update, delete) of every plugin.
fn handler_calls(scrape: &Scrape, event: &str) -> u64 {
    counter(
        scrape,
        "wasmformer_handler_calls_total",
        &[("event", event)],
    )
}

/// The `quantiles` of the histogram `metric` summed over the series whose labels include
/// `labels`: for each, the upper bound of the first bucket that holds it (`None` past the last).
fn histogram_quantiles(
    scrape: &Scrape,
    metric: &str,
    labels: &[(&str, &str)],
    quantiles: &[f64],
) -> Vec<Option<f64>> {
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for sample in scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
    {
        if let Metric::Histogram(counts) = &sample.value {
            for bucket in counts {
                match buckets.iter_mut().find(|(le, _)| *le == bucket.less_than) {
                    Some((_, count)) => *count += bucket.count,
                    None => buckets.push((bucket.less_than, bucket.count)),
                }
            }
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map_or(0.0, |(_, count)| *count);
    quantiles
        .iter()
        .map(|q| {
            buckets
                .iter()
                .find(|(_, count)| total > 0.0 && *count >= q * total)
                .map(|(le, _)| *le)
                .filter(|le| le.is_finite())
        })
        .collect()
}

/// The bench's own watch of the probe Pod: when it saw each resourceVersion. The host's watch gets
/// the same event from the same server at about the same moment, so a plugin's log time minus
/// this one is the host's part of the latency.
struct ProbeWatch {
    seen: Arc<std::sync::Mutex<HashMap<String, SystemTime>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ProbeWatch {
    fn start(rt: &tokio::runtime::Runtime, client: &kube::Client, factory: &PodFactory) -> Self {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client.clone(), factory.namespace(PROBE));
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", name_of(PROBE)));
        let seen = Arc::new(std::sync::Mutex::new(HashMap::new()));
        let shared = seen.clone();
        let task = rt.spawn(async move {
            let mut events = std::pin::pin!(watcher(pods, config));
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event
                    && let Some(version) = pod.metadata.resource_version
                {
                    let now = SystemTime::now();
                    shared.lock().unwrap().entry(version).or_insert(now);
                }
            }
        });
        // Listed (the probe's current version seen) before the first update is sent, so no
        // update reaches it late through the initial list.
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        Self { seen, task }
    }

    /// When it saw `version` (waiting up to 10 s for it).
    fn seen(&self, version: &str) -> Result<SystemTime> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(at) = self.seen.lock().unwrap().get(version) {
                return Ok(*at);
            }
            ensure!(
                Instant::now() < deadline,
                "the bench's watch of the probe Pod did not see resourceVersion {version}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for ProbeWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads the probe lines the host appends to its JSON log.
struct LogTail {
    file: std::io::BufReader<std::fs::File>,
    partial: String,
}

impl LogTail {
    /// From the current end of `path`.
    fn at_end(path: &Path) -> Result<Self> {
        let mut file =
            std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
        file.seek(std::io::SeekFrom::End(0))?;
        Ok(Self {
            file: std::io::BufReader::new(file),
            partial: String::new(),
        })
    }

    /// Waits until each of `plugins` plugins has logged `probe <version>` or failed a call on
    /// the probe Pod (`probe_ref`, `namespace/name`); when each that logged it did, by plugin
    /// (a failed call is in the report's "calls not ok", not here). One probe update is in
    /// flight at a time and a failed event is not delivered again, so a failure line for the
    /// probe after the tail's start is this version's: counting it, instead of waiting for a
    /// line that never comes, keeps a trap (a deadline overrun under mass re-activation) from
    /// aborting the run.
    fn wait_for(
        &mut self,
        version: &str,
        probe_ref: &str,
        plugins: usize,
        timeout: Duration,
    ) -> Result<HashMap<String, SystemTime>> {
        let message = format!("probe {version}");
        let deadline = Instant::now() + timeout;
        let mut seen = HashMap::new();
        let mut failed = HashSet::new();
        while seen.len() + failed.len() < plugins {
            let read = self.file.read_line(&mut self.partial)?;
            if read == 0 || !self.partial.ends_with('\n') {
                ensure!(
                    Instant::now() < deadline,
                    "{} of {plugins} plugins logged {message:?} and {} failed on it after {timeout:?}",
                    seen.len(),
                    failed.len()
                );
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            let line = std::mem::take(&mut self.partial);
            let Ok(entry) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let fields = &entry["fields"];
            if FAILED_CALL.contains(&fields["message"].as_str().unwrap_or_default())
                && fields["object.ref"].as_str() == Some(probe_ref)
            {
                let Some(plugin) = entry["span"]["plugin.id"].as_str() else {
                    bail!("a failed call without plugin.id: {line}");
                };
                eprintln!("{plugin}: a call on the probe failed: {}", fields["error"]);
                failed.insert(plugin.to_owned());
                continue;
            }
            if fields["message"].as_str() != Some(message.as_str()) {
                continue;
            }
            let (Some(plugin), Some(at)) =
                (fields["plugin.id"].as_str(), entry["timestamp"].as_str())
            else {
                bail!("a probe line without plugin.id or timestamp: {line}");
            };
            let at: jiff::Timestamp = at.parse().with_context(|| format!("timestamp {at:?}"))?;
            seen.insert(plugin.to_owned(), SystemTime::from(at));
        }
        Ok(seen)
    }
}

/// The host's log messages for a handler call that failed (README, "Logs").
const FAILED_CALL: [&str; 2] = [
    "plugin trapped; its instance will be recreated",
    "plugin handler failed",
];

// ---------------------------------------------------------------------------------------------
// The bench

struct Bench {
    options: Options,
    work: tempfile::TempDir,
    /// Kept running for the whole bench.
    _server: KubeApiserver,
    kubeconfig: PathBuf,
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    factory: Arc<PodFactory>,
    /// The distinct copies of the guest, one per plugin of the largest N.
    plugins: Vec<PathBuf>,
    /// Each phase's updates set the label to a new value.
    round: usize,
    /// `/proc/loadavg` at each phase's end: the machine is shared.
    loads: Vec<(String, String)>,
    notes: Vec<String>,
}

fn plugin_name(i: usize) -> String {
    format!("p{i:04}")
}

impl Bench {
    fn record_load(&mut self, phase: impl Into<String>) {
        let load = load_average();
        eprintln!("load average {load}");
        self.loads.push((phase.into(), load));
    }

    /// Sets a new value of the bench's label on the Pods `indexes`; their new resourceVersions.
    fn update(&mut self, indexes: Vec<usize>) -> Result<Vec<String>> {
        self.round += 1;
        let (client, factory, value) = (
            self.client.clone(),
            self.factory.clone(),
            self.round.to_string(),
        );
        let concurrency = self.options.concurrency;
        self.rt.block_on(async move {
            label_pods(&client, &factory, indexes, (LABEL, &value), concurrency).await
        })
    }

    /// The Pods the CPU phase updates: every one but the probe, up to `--updates`.
    fn cpu_phase_pods(&self) -> Vec<usize> {
        (0..self.options.pods)
            .filter(|&i| i != PROBE)
            .take(self.options.updates)
            .collect()
    }

    /// Writes `count` distinct copies of the probe guest into the work directory.
    fn write_plugins(&mut self, count: usize) -> Result<()> {
        let wasm = std::fs::read(guests::BENCH_PROBE)
            .with_context(|| format!("read {}", guests::BENCH_PROBE))?;
        let dir = self.work.path().join("plugins");
        std::fs::create_dir_all(&dir)?;
        for i in self.plugins.len()..count {
            let path = dir.join(format!("{}.wasm", plugin_name(i)));
            std::fs::write(
                &path,
                with_custom_section(&wasm, NONCE_SECTION, &(i as u64).to_le_bytes()),
            )?;
            self.plugins.push(path);
        }
        Ok(())
    }

    fn host_setup(&self, plugins: usize, variant: &Variant) -> HostSetup<'static> {
        let limits = match self.options.deadline {
            Some(deadline) => format!("    limits: {{deadline: {}ms}}\n", deadline.as_millis()),
            None => String::new(),
        };
        let entries: String = self.plugins[..plugins]
            .iter()
            .enumerate()
            .map(|(i, wasm)| {
                let kind = match variant.kind == VariantKind::Bystanders && i > 0 {
                    true => "ConfigMap",
                    false => "Pod",
                };
                format!(
                    "  - name: {}\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: {kind}}}]\n    config: {{probe: {}}}\n{}{limits}",
                    plugin_name(i),
                    wasm.display(),
                    name_of(PROBE),
                    variant.plugin_fields
                )
            })
            .collect();
        HostSetup {
            plugins: entries,
            // The pool holds every instance, and a few for hot swaps.
            host: format!("  maxInstances: {}\n", plugins + 16),
            args: &["--log-format", "json"],
        }
    }

    /// Compiles every copy into the compile cache: a host with all of them, before any Pod
    /// exists. The time it took.
    fn fill_compile_cache(&mut self, plugins: usize) -> Result<Duration> {
        let setup = self.host_setup(plugins, &Variant::loaded());
        let mut host = HostProcess::start(self.work.path(), &self.kubeconfig, setup)?;
        let took = host.wait_ready(Duration::from_secs(3600))?;
        drop(host);
        Ok(took)
    }

    fn create_pods(&mut self) -> Result<Duration> {
        let started = Instant::now();
        let (client, factory) = (self.client.clone(), self.factory.clone());
        let (pods, concurrency) = (self.options.pods, self.options.concurrency);
        self.rt.block_on(async move {
            factory.create_namespaces(&client).await?;
            create_pods(&client, &factory, 0..pods, concurrency).await
        })?;
        Ok(started.elapsed())
    }

    /// `wasmformer run` with the first `plugins` copies.
    fn host(&mut self, plugins: usize, variants: &[Variant], variant: usize) -> Result<HostRow> {
        let setup = self.host_setup(plugins, &variants[variant]);
        let log = self.work.path().join("host.log");
        let _ = std::fs::remove_file(&log);
        let mut host = HostProcess::start(self.work.path(), &self.kubeconfig, setup)?;
        let ready = host.wait_ready(Duration::from_secs(3600))?;
        eprintln!(
            "{plugins} plugins: ready after {:.1} s; settling",
            ready.as_secs_f64()
        );
        std::thread::sleep(self.options.settle);
        if variants[variant].unload_after.is_some() {
            let deadline = Instant::now() + Duration::from_secs(300);
            while counter(&scrape(&host)?, "wasmformer_plugin_loaded", &[]) > 0 {
                ensure!(Instant::now() < deadline, "the plugins did not unload");
                std::thread::sleep(Duration::from_millis(200));
            }
            eprintln!("{plugins} plugins: every plugin unloaded");
        }
        let footprint = Footprint::of(&[host.pid()])?;
        let breakdown = smaps_breakdown(host.pid())?;
        eprintln!(
            "{plugins} plugins: RSS {}, {} threads",
            mib(footprint.rss),
            footprint.threads
        );

        // CPU: the updates, then the probe's; when every plugin has logged the probe's, every
        // plugin has handled the others (its events come in the watch's order).
        let before = scrape(&host)?;
        let mut tail = LogTail::at_end(host.log())?;
        let (cpu_before, started) = (cpu_time(host.pid())?, Instant::now());
        let pods = self.cpu_phase_pods();
        self.update(pods.clone())?;
        let marker = self.update(vec![PROBE])?.remove(0);
        let handlers = variants[variant].handlers(plugins);
        let probe_ref = format!("{}/{}", self.factory.namespace(PROBE), name_of(PROBE));
        tail.wait_for(&marker, &probe_ref, handlers, Duration::from_secs(1800))?;
        let (cpu_after, took) = (cpu_time(host.pid())?, started.elapsed());
        let after = scrape(&host)?;
        let cpu = CpuPhase {
            updates: pods.len() + 1,
            calls: handler_calls(&after, "update") - handler_calls(&before, "update"),
            cpu: cpu_after - cpu_before,
            took,
        };
        eprintln!(
            "{plugins} plugins: {} updates, {} handler calls, {:.2} s CPU in {:.1} s",
            cpu.updates,
            cpu.calls,
            cpu.cpu.as_secs_f64(),
            cpu.took.as_secs_f64()
        );

        // Latency: one probe update at a time.
        let watch = ProbeWatch::start(&self.rt, &self.client, &self.factory);
        let (mut each, mut all, mut from_watch) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..self.options.probes {
            if let Some(after) = variants[variant].unload_after {
                // Every plugin unloaded again before the probe reaches it.
                std::thread::sleep(after + Duration::from_millis(500));
            }
            let sent = SystemTime::now();
            let version = self.update(vec![PROBE])?.remove(0);
            let seen = tail.wait_for(&version, &probe_ref, handlers, Duration::from_secs(300))?;
            let latencies: Vec<Duration> = seen
                .values()
                .map(|at| at.duration_since(sent).unwrap_or_default())
                .collect();
            all.push(latencies.iter().copied().max().unwrap_or_default());
            each.extend(latencies);
            let watched = watch.seen(&version)?;
            from_watch.extend(
                seen.values()
                    .map(|at| at.duration_since(watched).unwrap_or_default()),
            );
        }
        drop(watch);
        let latency = Latency {
            each: p50_p99(each),
            from_watch: p50_p99(from_watch),
            all: p50_p99(all),
        };
        let metrics = scrape(&host)?;
        let quantiles = histogram_quantiles(
            &metrics,
            "wasmformer_handler_duration_seconds",
            &[("event", "update")],
            &[0.5, 0.99],
        );
        let failed = ["add", "update", "delete"]
            .iter()
            .map(|event| {
                handler_calls(&metrics, event)
                    - counter(
                        &metrics,
                        "wasmformer_handler_calls_total",
                        &[("event", event), ("result", "ok")],
                    )
            })
            .sum();
        let coalesced = counter(&metrics, "wasmformer_queue_coalesced_total", &[]);
        eprintln!(
            "{plugins} plugins: update → handled p50 {} p99 {}; watch → handled p50 {} p99 {}",
            ms(latency.each.0),
            ms(latency.each.1),
            ms(latency.from_watch.0),
            ms(latency.from_watch.1)
        );
        drop(host);
        if let Some(dir) = &self.options.logs {
            std::fs::create_dir_all(dir)?;
            std::fs::copy(&log, dir.join(format!("host-{plugins}-plugins.log")))?;
        }
        Ok(HostRow {
            plugins,
            variant,
            ready,
            footprint,
            breakdown,
            cpu,
            latency,
            histogram: (quantiles[0], quantiles[1]),
            failed,
            coalesced,
        })
    }

    /// `processes` peers started at once; memory once each has printed every add, then CPU per
    /// event over an update phase.
    fn peers(
        &mut self,
        client: &'static str,
        processes: usize,
        start: impl Fn(&Path) -> Result<InformerPeer>,
    ) -> Result<PeerRow> {
        let pods = self.options.pods;
        let mut peers: Vec<InformerPeer> = (0..processes)
            .map(|_| start(&self.kubeconfig))
            .collect::<Result<_>>()?;
        let mut ready = Duration::ZERO;
        for peer in &mut peers {
            ready = ready.max(peer.wait("initial adds", Duration::from_secs(1800), |s| {
                s.synced && s.adds >= pods
            })?);
        }
        eprintln!(
            "{processes} × {client}: ready after {:.1} s; settling",
            ready.as_secs_f64()
        );
        std::thread::sleep(self.options.settle);
        let pids: Vec<u32> = peers.iter().map(InformerPeer::pid).collect();
        let footprint = Footprint::of(&pids)?;
        eprintln!(
            "{processes} × {client}: RSS {} in all, {} threads",
            mib(footprint.rss),
            footprint.threads
        );

        let updates_before: Vec<usize> = peers.iter().map(|p| p.with(|s| s.updates)).collect();
        let cpu_before = pids
            .iter()
            .map(|&pid| cpu_time(pid))
            .sum::<Result<Duration>>()?;
        let started = Instant::now();
        let updated = self.update(self.cpu_phase_pods())?.len();
        for (peer, before) in peers.iter_mut().zip(&updates_before) {
            peer.wait("the updates", Duration::from_secs(1800), |s| {
                s.updates >= before + updated
            })?;
        }
        let took = started.elapsed();
        let cpu_after = pids
            .iter()
            .map(|&pid| cpu_time(pid))
            .sum::<Result<Duration>>()?;
        let calls = peers
            .iter()
            .zip(&updates_before)
            .map(|(p, before)| (p.with(|s| s.updates) - before) as u64)
            .sum();
        drop(peers);
        Ok(PeerRow {
            client,
            processes,
            ready,
            footprint,
            cpu: CpuPhase {
                updates: updated,
                calls,
                cpu: cpu_after - cpu_before,
                took,
            },
        })
    }
}

impl Variant {
    fn loaded() -> Self {
        Self {
            kind: VariantKind::Loaded,
            label: "RSS (every plugin loaded)",
            plugin_fields: String::new(),
            unload_after: None,
        }
    }

    fn unloaded(after: Duration) -> Self {
        Self {
            kind: VariantKind::Unloaded,
            label: "RSS with idle plugins unloaded",
            plugin_fields: format!("    lifecycle: {{unloadAfter: {}ms}}\n", after.as_millis()),
            unload_after: Some(after),
        }
    }

    fn bystanders() -> Self {
        Self {
            kind: VariantKind::Bystanders,
            label: "RSS, one plugin on Pods, the others on ConfigMaps",
            plugin_fields: String::new(),
            unload_after: None,
        }
    }

    /// How many of `plugins` handle the Pods the bench updates.
    fn handlers(&self, plugins: usize) -> usize {
        match self.kind {
            VariantKind::Bystanders => 1,
            _ => plugins,
        }
    }
}

fn kube_informer(kubeconfig: &Path) -> Result<InformerPeer> {
    let program = std::env::var_os("WASMFORMER_KUBE_INFORMER")
        .context("$WASMFORMER_KUBE_INFORMER is not set")?;
    let mut command = Command::new(program);
    command.arg("--kubeconfig").arg(kubeconfig);
    InformerPeer::start("the kube-rs informer", command, false)
}

fn main() -> Result<()> {
    let options = Options::from_args()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    eprintln!("starting the kube-apiserver harness");
    let server = KubeApiserver::start();
    let client = rt.block_on(server.admin());
    let namespaces = (0..options.namespaces)
        .map(|i| format!("bench-{i}"))
        .collect();
    let mut bench = Bench {
        kubeconfig: server.kubeconfig("admin"),
        _server: server,
        work: tempfile::tempdir()?,
        rt,
        client,
        factory: Arc::new(PodFactory::new(namespaces)),
        plugins: Vec::new(),
        round: 0,
        loads: Vec::new(),
        notes: Vec::new(),
        options,
    };
    bench.record_load("start");

    let most = *bench.options.plugins.last().unwrap();
    bench.write_plugins(most)?;
    eprintln!("compiling {most} distinct plugins into the compile cache");
    let compiled = bench.fill_compile_cache(most)?;
    bench.notes.push(format!(
        "filling the compile cache with the {most} copies (a host started with all of them, no Pods yet) took {:.0} s",
        compiled.as_secs_f64()
    ));
    bench.record_load("compile cache filled");

    eprintln!("creating {} Pods", bench.options.pods);
    let created = bench.create_pods()?;
    bench.notes.push(format!(
        "creating the {} Pods (create + status patch, {} in flight) took {:.0} s",
        bench.options.pods,
        bench.options.concurrency,
        created.as_secs_f64()
    ));
    bench.record_load("Pods created");

    let mut variants = vec![Variant::loaded()];
    variants.extend(bench.options.unload_after.map(Variant::unloaded));
    if bench.options.bystanders {
        variants.push(Variant::bystanders());
    }
    let mut hosts = Vec::new();
    for n in bench.options.plugins.clone() {
        for variant in 0..variants.len() {
            hosts.push(bench.host(n, &variants, variant)?);
            bench.record_load(format!("{n} plugins measured"));
        }
    }
    let mut peers = Vec::new();
    for n in bench.options.client_go.clone() {
        peers.push(bench.peers("client-go", n, |k| InformerPeer::client_go(k, false))?);
        bench.record_load(format!("{n} × client-go measured"));
    }
    if std::env::var_os("WASMFORMER_KUBE_INFORMER").is_some() {
        peers.push(bench.peers("kube-rs", 1, kube_informer)?);
        bench.record_load("kube-rs measured");
    } else {
        bench.notes.push(
            "kube-rs not measured: $WASMFORMER_KUBE_INFORMER (the `kube-informer` bench target, built by scripts/bench-density) is not set".into(),
        );
    }
    print_report(&bench, &variants, &hosts, &peers);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The report

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn bound(le: Option<f64>) -> String {
    le.map_or("> last bucket".into(), |s| {
        format!("≤ {}", ms(Duration::from_secs_f64(s)))
    })
}

fn print_report(bench: &Bench, variants: &[Variant], hosts: &[HostRow], peers: &[PeerRow]) {
    let options = &bench.options;
    let of_kind = |kind: VariantKind| -> Vec<&HostRow> {
        hosts
            .iter()
            .filter(|r| variants[r.variant].kind == kind)
            .collect()
    };
    let loaded = of_kind(VariantKind::Loaded);
    let first = loaded[0];
    let wasm_bytes = std::fs::metadata(&bench.plugins[0]).map_or(0, |m| m.len());

    println!("### Memory and threads: `wasmformer run` with N distinct plugins\n");
    println!(
        "{} realistic Pods on the real kube-apiserver; every plugin handles every Pod. Each plugin is its own component: a copy of the `bench-probe` guest ({} KiB) with its own nonce in a custom section, compiled and mapped on its own. Measured after `/readyz` (every plugin has handled its initial adds) and {} s of quiet: RSS is the median of five `VmRSS` samples, PSS from `smaps_rollup`; per extra plugin: (RSS(N) − RSS({})) / (N − {}). From `/proc/<pid>/smaps`: wasm memories (the pooling allocator's memory slots: the instances' linear memories, touched pages only, with their copy-on-write memory images; and its instance and table reservations), compiled code (wasmtime's copy of each plugin's code and read-only data, loaded from the compile cache), heap (other anonymous memory: malloc — the cache, runtime data, per-thread arenas — and thread stacks).\n",
        options.pods,
        wasm_bytes / 1024,
        options.settle.as_secs(),
        first.plugins,
        first.plugins
    );
    let columns: Vec<&str> = variants.iter().map(|v| v.label).collect();
    println!(
        "| N plugins | ready after | {} | PSS | RSS per extra plugin | threads | wasm memories | compiled code | heap | executable + libs |",
        columns.join(" | ")
    );
    println!(
        "|---:|---:|{}---:|---:|---:|---:|---:|---:|---:|",
        "---:|".repeat(columns.len())
    );
    for row in &loaded {
        let rss: Vec<String> = (0..variants.len())
            .map(|v| {
                hosts
                    .iter()
                    .find(|r| r.variant == v && r.plugins == row.plugins)
                    .map_or("—".into(), |r| mib(r.footprint.rss))
            })
            .collect();
        let per_plugin = rss_per_extra_plugin(first, row).map_or("—".into(), kib);
        let b = row.breakdown;
        println!(
            "| {} | {:.1} s | {} | {} | {per_plugin} | {} | {} | {} | {} | {} |",
            row.plugins,
            row.ready.as_secs_f64(),
            rss.join(" | "),
            row.footprint.pss.map_or("—".into(), mib),
            row.footprint.threads,
            mib(b.wasm_memory),
            mib(b.wasm_code),
            mib(b.heap),
            mib(b.code)
        );
    }

    println!("\n### CPU per event and update → handler latency\n");
    println!(
        "CPU phase: {} Pods get a new label (one update each), then the probe Pod; host CPU is `utime + stime` of `/proc/<pid>/stat` (10 ms ticks) over the phase, from the first patch until every plugin has handled the probe's update, divided by the Pod updates and by the handler calls (`wasmformer_handler_calls_total{{event=\"update\"}}`). Latency: {} updates of the probe Pod, one at a time, from the patch request being sent to each plugin's log line for it (the host's log timestamp, µs), so the API server's write and watch are included; \"last plugin\": until every plugin has handled it; \"watch → handled\": from the moment the bench's own watch of the probe Pod saw the update (the host's part); a call that failed (a trap, an error) is in \"calls not ok\", not in the latencies. Handler duration: `wasmformer_handler_duration_seconds` for updates, all plugins, at **bucket resolution** (the upper bound of the bucket holding the quantile; buckets 0.1 ms × 2ᵏ).\n",
        options.updates, options.probes
    );
    println!(
        "| N plugins | Pod updates | handler calls | CPU | CPU per Pod update | CPU per handler call | update → handled p50 | p99 | update → last plugin p50 | p99 | watch → handled p50 | p99 | handler duration p50 | p99 | calls not ok | updates merged |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &loaded {
        let c = row.cpu;
        println!(
            "| {} | {} | {} | {:.2} s | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.plugins,
            c.updates,
            c.calls,
            c.cpu.as_secs_f64(),
            us(c.per_update()),
            us(c.per_call()),
            ms(row.latency.each.0),
            ms(row.latency.each.1),
            ms(row.latency.all.0),
            ms(row.latency.all.1),
            ms(row.latency.from_watch.0),
            ms(row.latency.from_watch.1),
            bound(row.histogram.0),
            bound(row.histogram.1),
            row.failed,
            row.coalesced
        );
    }

    let unloaded = of_kind(VariantKind::Unloaded);
    if let (Some(first_unloaded), Some(after)) = (unloaded.first(), options.unload_after) {
        println!(
            "\n### With idle plugins unloaded (`lifecycle: {{unloadAfter: {}ms}}`)\n",
            after.as_millis()
        );
        println!(
            "Measured as above, once `wasmformer_plugin_loaded` is 0 for every plugin. CPU phase: the updates reach unloaded plugins, which are loaded again for them. Latency: before each probe update the bench waits {} ms, so every plugin is unloaded when it arrives (instantiate, `init`, then the call).\n",
            (after + Duration::from_millis(500)).as_millis()
        );
        println!(
            "| N plugins | RSS, unloaded | per extra unloaded plugin | threads | CPU per handler call | update → handled p50 | p99 | update → last plugin p50 | p99 | watch → handled p50 | p99 | calls not ok |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for row in &unloaded {
            let per_plugin = rss_per_extra_plugin(first_unloaded, row).map_or("—".into(), kib);
            println!(
                "| {} | {} | {per_plugin} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                row.plugins,
                mib(row.footprint.rss),
                row.footprint.threads,
                us(row.cpu.per_call()),
                ms(row.latency.each.0),
                ms(row.latency.each.1),
                ms(row.latency.all.0),
                ms(row.latency.all.1),
                ms(row.latency.from_watch.0),
                ms(row.latency.from_watch.1),
                row.failed
            );
        }
    }

    let bystanders = of_kind(VariantKind::Bystanders);
    if !bystanders.is_empty() {
        println!("\n### CPU per Pod update with bystanders\n");
        println!(
            "Plugin 0 handles the Pods; the other N − 1 handle ConfigMaps (one shared informer), which the bench does not change: they are loaded and subscribed but have nothing to do. CPU phase and latency as above, for plugin 0. \"vs N = 1\": CPU per Pod update against the host with plugin 0 alone (first table), same run.\n"
        );
        println!(
            "| N plugins | RSS | threads | handler calls | CPU per Pod update | vs N = 1 | update → handled p50 | p99 |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
        for row in &bystanders {
            println!(
                "| {} | {} | {} | {} | {} | {:.2}× | {} | {} |",
                row.plugins,
                mib(row.footprint.rss),
                row.footprint.threads,
                row.cpu.calls,
                us(row.cpu.per_update()),
                row.cpu.per_update().as_secs_f64() / first.cpu.per_update().as_secs_f64(),
                ms(row.latency.each.0),
                ms(row.latency.each.1)
            );
        }
    }

    println!("\n### The peers: one informer process per controller\n");
    println!(
        "Each process is its own informer on every Pod, started at once with the others; measured once each has printed every add, then {} s of quiet (RSS: median of five `VmRSS` samples per process, summed). client-go: the harness's typed SharedInformer (`tests/kube-apiserver/cmd/informer`, managedFields kept, as the server sends them); kube-rs: a `reflector` store of `Pod` fed by a `watcher` (`tests/benches/kube_informer.rs`, release build). Both print one JSON line per event on stdout: CPU per event includes that, where wasmformer's plugins do nothing. CPU phase: {} Pod updates.\n",
        options.settle.as_secs(),
        options.updates
    );
    println!(
        "| client | processes | ready after | RSS in all | per process | PSS in all | threads in all | CPU per Pod update (all processes) | CPU per event |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in peers {
        println!(
            "| {} | {} | {:.1} s | {} | {} | {} | {} | {} | {} |",
            row.client,
            row.processes,
            row.ready.as_secs_f64(),
            mib(row.footprint.rss),
            mib(row.footprint.rss / row.processes as u64),
            row.footprint.pss.map_or("—".into(), mib),
            row.footprint.threads,
            us(row.cpu.per_update()),
            us(row.cpu.per_call())
        );
    }

    // Ratios: wasmformer with N plugins against N peer processes.
    let peer = |client: &str, n: usize| {
        peers
            .iter()
            .find(|p| p.client == client && p.processes == n)
    };
    println!("\n### Side by side: one host with N plugins vs N processes\n");
    println!(
        "N processes' RSS: measured where the table above has them; otherwise **extrapolated linearly** from one process (N × RSS(1)) or from ten (N/10 × RSS(10)), as marked. The machine has {} GiB: 100 client-go processes were not started.\n",
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            })
            .map_or("?".into(), |kb| format!("{:.0}", kb / 1024.0 / 1024.0))
    );
    println!(
        "| N | wasmformer RSS | N × client-go(1) | ratio | N/10 × client-go(10) | ratio | N × kube-rs(1) | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let scaled = |row: Option<&PeerRow>, n: usize, from: usize, host: u64| match row {
        Some(p) => {
            let rss = p.footprint.rss as f64 * n as f64 / from as f64;
            let how = if n == from {
                "measured"
            } else {
                "extrapolated"
            };
            (
                format!("{} ({how})", mib(rss as u64)),
                format!("{:.3}×", host as f64 / rss),
            )
        }
        None => ("—".into(), "—".into()),
    };
    for row in &loaded {
        let host = row.footprint.rss;
        let (go1, go1_ratio) = scaled(peer("client-go", 1), row.plugins, 1, host);
        let (go10, go10_ratio) = scaled(peer("client-go", 10), row.plugins, 10, host);
        let (kube, kube_ratio) = scaled(peer("kube-rs", 1), row.plugins, 1, host);
        println!(
            "| {} | {} | {go1} | {go1_ratio} | {go10} | {go10_ratio} | {kube} | {kube_ratio} |",
            row.plugins,
            mib(host)
        );
    }

    println!("\n### Goals of issue 16\n");
    println!("| goal | measured | met |\n|---|---|---|");
    let at = |n: usize| loaded.iter().find(|r| r.plugins == n);
    match (at(100), peer("client-go", 1)) {
        (Some(host), Some(go)) => {
            let ratio = host.footprint.rss as f64 / (100.0 * go.footprint.rss as f64);
            println!(
                "| N = 100: the host ≤ 0.01× the memory of 100 client-go processes | {ratio:.3}× ({} vs 100 × {}, extrapolated) | {} |",
                mib(host.footprint.rss),
                mib(go.footprint.rss),
                met(ratio <= 0.01)
            );
        }
        _ => println!(
            "| N = 100: the host ≤ 0.01× the memory of 100 client-go processes | not measured (needs N = 100 and one client-go process) | — |"
        ),
    }
    match at(1000) {
        Some(host) => println!(
            "| N = 1000: ≤ 512 MiB in all | {} | {} |",
            mib(host.footprint.rss),
            met(host.footprint.rss <= 512 << 20)
        ),
        None => println!("| N = 1000: ≤ 512 MiB in all | not measured (--plugins) | — |"),
    }
    let last = loaded[loaded.len() - 1];
    if let Some(per_plugin) = rss_per_extra_plugin(first, last) {
        println!(
            "| an idle Rust plugin ≤ 256 KiB resident while loaded | {} per extra plugin (N = {} → {}) | {} |",
            kib(per_plugin),
            first.plugins,
            last.plugins,
            met(per_plugin <= 256.0 * 1024.0)
        );
        // The delivery pool's threads (`host.deliveryThreads`, the default here) and its timer.
        let pool = DeliveryPool::DEFAULT_THREADS as u64;
        let bound = first.footprint.threads + pool + 1;
        println!(
            "| threads do not grow with N | {} at N = {}, {} at N = {} | {} |",
            first.footprint.threads,
            first.plugins,
            last.footprint.threads,
            last.plugins,
            if last.footprint.threads <= bound {
                format!(
                    "yes: at most N = {}'s + the delivery pool ({pool}) + its timer",
                    first.plugins
                )
            } else {
                "no".into()
            }
        );
        match bystanders.iter().find(|r| r.plugins == last.plugins) {
            Some(row) => {
                let ratio =
                    row.cpu.per_update().as_secs_f64() / first.cpu.per_update().as_secs_f64();
                println!(
                    "| CPU per event grows with the plugins that handle it, not with those loaded | per Pod update {} with 1 plugin, {} with 1 handling and {} loaded ({ratio:.2}×) | {} |",
                    us(first.cpu.per_update()),
                    us(row.cpu.per_update()),
                    row.plugins,
                    if ratio <= 1.5 {
                        "yes (within 1.5×)"
                    } else {
                        "no"
                    }
                );
            }
            None => println!(
                "| CPU per event grows with the plugins that handle it, not with those loaded | {} per handler call at N = {}, {} at N = {} | not measured as stated (run with --bystanders) |",
                us(first.cpu.per_call()),
                first.plugins,
                us(last.cpu.per_call()),
                last.plugins,
            ),
        }
    }
    match (unloaded.first(), unloaded.last()) {
        (Some(first), Some(last)) if last.plugins > first.plugins => {
            let per_plugin = rss_per_extra_plugin(first, last).unwrap_or_default();
            println!(
                "| an idle plugin ≤ 16 KiB unloaded | {} per extra unloaded plugin (N = {} → {}) | {} |",
                kib(per_plugin),
                first.plugins,
                last.plugins,
                met(per_plugin <= 16.0 * 1024.0)
            );
            let p99 = unloaded
                .iter()
                .map(|r| r.latency.each.1)
                .max()
                .unwrap_or_default();
            let host_part = first.latency.from_watch.1;
            println!(
                "| p99 of an event to an unloaded plugin ≤ 5 ms (idle host) | {} from the watch at N = {} (the host's part); {} from the patch at the worst N (the API server's write and watch included, and every plugin loaded again at once) | {} |",
                ms(host_part),
                first.plugins,
                ms(p99),
                met(host_part <= Duration::from_millis(5))
            );
        }
        _ => println!(
            "| an idle plugin ≤ 16 KiB unloaded | not measured (run with --unload-after and two N) | — |"
        ),
    }

    print_loads_and_notes(&bench.loads, &bench.notes);
}

/// A goal's verdict.
fn met(ok: bool) -> &'static str {
    if ok { "yes" } else { "no" }
}

/// RSS per plugin beyond `first`'s: (RSS(row) − RSS(first)) / (N(row) − N(first)), in bytes;
/// `None` unless `row` has more plugins.
fn rss_per_extra_plugin(first: &HostRow, row: &HostRow) -> Option<f64> {
    (row.plugins > first.plugins).then(|| {
        (row.footprint.rss as f64 - first.footprint.rss as f64)
            / (row.plugins - first.plugins) as f64
    })
}
