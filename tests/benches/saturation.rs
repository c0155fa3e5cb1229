//! The saturation benchmark of issue 17 (items 3 and 1): how many objects per second one informer
//! carries into the cache and on to its handlers when the server sends them as fast as the client
//! takes them, and what each costs in CPU. Run by `scripts/bench-informer --saturation`; prints
//! markdown tables on stdout and progress on stderr.
//!
//! The server is `watchserver` (`tests/kube-apiserver/bench/watchserver`), in two stages:
//! - **watch**: an empty list, then a watch streaming `--pods` ADDED events of the realistic Pod
//!   of `../shared/fixtures` (distinct names over `--namespaces` namespaces);
//! - **list**: the `--pods` Pods in the list (pages of 500), then a watch with no event: the
//!   initial list, without the real API server's own cost of serving it.
//!
//! Everything is encoded beforehand by apimachinery's own serializers in the content type the
//! client asks for. Each client in turn, started afresh, `--runs` times in alternation:
//!
//! - **wasmformer**: `target/release/wasmformer run` with three plugin entries of the no-op
//!   `bench-empty` guest on every Pod (one informer, one cache, three deliveries per event);
//!   done when `/status` (polled every 10 ms) shows each plugin's `calls` at `--pods`;
//! - **kube-rs**: the `kube-informer` bench target with `--count`: `reflector(writer, watcher)`
//!   and one consumer of its applied objects;
//! - **client-go**, JSON and protobuf: the `handlers` program (`tests/kube-apiserver/bench/
//!   handlers`): a typed SharedInformer with three handlers that only count.
//!
//! Each is timed from the moment the server takes its watch (or list) request to the moment it
//! says it is done; its CPU time (`/proc/<pid>/stat`) over the same window gives CPU per object,
//! which the load on the machine disturbs less than the rate. The bench also times one
//! `serde_json::Value` parse of the Pod's JSON as served, in its own process: item 1's floor.
//!
//! `cargo bench -p wasmformer-tests --bench saturation [-- --pods 50000 --runs 3 --namespaces 4
//! --stages watch,list]`.
//! Needs `target/release/wasmformer`, `$WASMFORMER_KUBE_INFORMER` (the kube-rs peer) and
//! `$WASMFORMER_BENCH_PROGRAMS_DIR` (`tests/kube-apiserver/build.sh --bench`), which the script
//! provides.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use wasmformer_tests::bench::host::{HostProcess, HostSetup};
use wasmformer_tests::bench::peer::InformerPeer;
use wasmformer_tests::bench::pods::parse_time;
use wasmformer_tests::bench::proc::{
    cpu_time, load_average, print_loads_and_notes, proc_mem, stop_child,
};
use wasmformer_tests::bench::units::{median_f64, mib};
use wasmformer_tests::{guests, shared_dir};

/// Handlers (plugins) fed by the one watch, for wasmformer and client-go.
const HANDLERS: usize = 3;

/// How long one client may take for every event before the run fails.
const TIMEOUT: Duration = Duration::from_secs(300);

struct Options {
    pods: usize,
    runs: usize,
    namespaces: usize,
    stages: Vec<Stage>,
}

/// Where the server puts the Pods.
#[derive(Clone, Copy, PartialEq)]
enum Stage {
    Watch,
    List,
}

impl Stage {
    /// Its `watchserver --mode`, and the server's line that starts a client's clock.
    fn name(self) -> &'static str {
        match self {
            Stage::Watch => "watch",
            Stage::List => "list",
        }
    }
}

impl Options {
    fn from_args() -> Result<Self> {
        let mut options = Self {
            pods: 50_000,
            runs: 3,
            namespaces: 4,
            stages: vec![Stage::Watch, Stage::List],
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = |name: &str| -> Result<usize> {
                args.next()
                    .with_context(|| format!("{name} needs a value"))?
                    .parse()
                    .with_context(|| format!("{name} takes a number"))
            };
            match arg.as_str() {
                "--pods" => options.pods = value("--pods")?,
                "--runs" => options.runs = value("--runs")?,
                "--namespaces" => options.namespaces = value("--namespaces")?,
                "--stages" => {
                    let stages = args.next().context("--stages needs a value")?;
                    options.stages = stages
                        .split(',')
                        .map(|s| match s {
                            "watch" => Ok(Stage::Watch),
                            "list" => Ok(Stage::List),
                            other => bail!("unknown stage {other} (watch, list)"),
                        })
                        .collect::<Result<_>>()?;
                }
                // `cargo bench` passes `--bench` to every target.
                "--bench" => {}
                other => bail!(
                    "unknown option {other} (--pods N, --runs N, --namespaces N, --stages watch,list)"
                ),
            }
        }
        ensure!(
            options.pods > 0
                && options.runs > 0
                && options.namespaces > 0
                && !options.stages.is_empty(),
            "--pods, --runs and --namespaces must be at least 1, --stages not empty"
        );
        Ok(options)
    }
}

// ---------------------------------------------------------------------------------------------
// The server

/// The `watchserver` child process and the lines it printed, each with the instant it was read.
struct WatchServer {
    child: Child,
    address: String,
    lines: Arc<Mutex<Vec<(Instant, Value)>>>,
}

impl WatchServer {
    fn start(programs: &Path, options: &Options, stage: Stage) -> Result<Self> {
        let since = Instant::now();
        let mut child = Command::new(programs.join("watchserver"))
            .arg("--mode")
            .arg(stage.name())
            .arg("--pods")
            .arg(options.pods.to_string())
            .arg("--namespaces")
            .arg(options.namespaces.to_string())
            .arg("--fixture")
            .arg(shared_dir().join("fixtures/pod-realistic.json"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("start watchserver")?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (stdout, shared) = (child.stdout.take().unwrap(), lines.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(value) = serde_json::from_str(&line) {
                    shared.lock().unwrap().push((Instant::now(), value));
                }
            }
        });
        let mut server = Self {
            child,
            address: String::new(),
            lines,
        };
        // Encoding every event first takes a few seconds per 10k Pods.
        let deadline = Instant::now() + Duration::from_secs(600);
        server.address = loop {
            if let Some((_, line)) = server.first("listening", since) {
                break line["address"].as_str().unwrap_or_default().to_owned();
            }
            if let Some(status) = server.child.try_wait()? {
                bail!("watchserver exited ({status}) before listening");
            }
            ensure!(Instant::now() < deadline, "watchserver is not listening");
            std::thread::sleep(Duration::from_millis(50));
        };
        Ok(server)
    }

    /// The first line with `event` read at or after `since`.
    fn first(&self, event: &str, since: Instant) -> Option<(Instant, Value)> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .find(|(at, line)| *at >= since && line["event"] == event)
            .cloned()
    }

    /// A kubeconfig for it: plain HTTP and no credentials, as the dev cluster's.
    fn kubeconfig(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join("watchserver.kubeconfig");
        wasmformer_devcluster::kubeconfig::write(&path, &format!("http://{}", self.address))?;
        Ok(path)
    }
}

impl Drop for WatchServer {
    fn drop(&mut self) {
        stop_child(&mut self.child);
    }
}

// ---------------------------------------------------------------------------------------------
// The clients

#[derive(Clone, Copy, PartialEq)]
enum Contender {
    Wasmformer,
    KubeRs,
    ClientGo { protobuf: bool },
}

impl Contender {
    const ALL: [Contender; 4] = [
        Contender::Wasmformer,
        Contender::KubeRs,
        Contender::ClientGo { protobuf: false },
        Contender::ClientGo { protobuf: true },
    ];

    fn name(self) -> &'static str {
        match self {
            Contender::Wasmformer => "wasmformer, 3 no-op plugins",
            Contender::KubeRs => "kube-rs, reflector + 1 consumer",
            Contender::ClientGo { .. } => "client-go, 3 no-op handlers",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Contender::ClientGo { protobuf: true } => "protobuf",
            _ => "JSON",
        }
    }

    fn handlers(self) -> usize {
        match self {
            Contender::KubeRs => 1,
            _ => HANDLERS,
        }
    }
}

/// A started client: something to ask whether it is done, and its pid.
enum Running {
    Host(HostProcess),
    Peer(InformerPeer),
}

impl Running {
    fn pid(&self) -> u32 {
        match self {
            Running::Host(host) => host.pid(),
            Running::Peer(peer) => peer.pid(),
        }
    }

    /// When it finished handling `pods` events in every handler, if it has.
    fn done(&mut self, pods: usize) -> Result<Option<Instant>> {
        match self {
            Running::Host(host) => {
                if let Some(status) = host.try_wait()? {
                    let log = std::fs::read_to_string(host.log()).unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(20).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    bail!(
                        "wasmformer run exited ({status}); its log ends:\n{}",
                        tail.join("\n")
                    );
                }
                // The admin endpoint may come up after the watch has started.
                let Ok(status) = host.status() else {
                    return Ok(None);
                };
                let plugins = status["plugins"]
                    .as_array()
                    .context("no plugins in /status")?;
                let calls = plugins.iter().map(|p| p["calls"].as_u64().unwrap_or(0));
                let finished = plugins.len() == HANDLERS && calls.min() >= Some(pods as u64);
                Ok(finished.then(Instant::now))
            }
            Running::Peer(peer) => Ok(peer.with(|state| state.done)),
        }
    }
}

struct Bench<'a> {
    options: &'a Options,
    stage: Stage,
    work: tempfile::TempDir,
    programs: PathBuf,
    kube_informer: PathBuf,
    server: WatchServer,
    kubeconfig: PathBuf,
}

/// One client's run.
struct Measured {
    client: Contender,
    /// From the server taking the watch (or first list) request to the last handler call.
    elapsed: Duration,
    /// CPU time of the client's process over that window.
    cpu: Duration,
    /// Peak RSS of the client's process.
    peak: u64,
}

impl Bench<'_> {
    fn start(&self, client: Contender) -> Result<Running> {
        Ok(match client {
            Contender::Wasmformer => {
                let plugins = (0..HANDLERS)
                    .map(|i| {
                        format!(
                            "  - name: noop-{i}\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n",
                            guests::BENCH_EMPTY
                        )
                    })
                    .collect();
                let setup = HostSetup {
                    plugins,
                    host: String::new(),
                    args: &[],
                };
                Running::Host(HostProcess::start(
                    self.work.path(),
                    &self.kubeconfig,
                    setup,
                )?)
            }
            Contender::KubeRs => {
                let mut command = Command::new(&self.kube_informer);
                command
                    .arg("--kubeconfig")
                    .arg(&self.kubeconfig)
                    .arg("--count")
                    .arg(self.options.pods.to_string());
                Running::Peer(InformerPeer::start("the kube-rs peer", command, false)?)
            }
            Contender::ClientGo { protobuf } => {
                let mut command = Command::new(self.programs.join("handlers"));
                command
                    .arg("--kubeconfig")
                    .arg(&self.kubeconfig)
                    .arg("--pods")
                    .arg(self.options.pods.to_string())
                    .arg("--handlers")
                    .arg(HANDLERS.to_string())
                    .arg("--encoding")
                    .arg(if protobuf { "protobuf" } else { "json" })
                    // The bench compares watch streams: no streaming list.
                    .env("KUBE_FEATURE_WatchListClient", "false");
                Running::Peer(InformerPeer::start("the client-go peer", command, false)?)
            }
        })
    }

    fn measure(&self, client: Contender) -> Result<Measured> {
        let started = Instant::now();
        let mut running = self.start(client)?;
        let pid = running.pid();
        let deadline = started + TIMEOUT;
        let (watch_at, cpu_at_watch) = loop {
            if let Some((at, line)) = self.server.first(self.stage.name(), started) {
                ensure!(
                    line["contentType"].as_str().unwrap_or_default().contains(
                        if client.content_type() == "protobuf" {
                            "protobuf"
                        } else {
                            "json"
                        }
                    ),
                    "{}: asked for {} instead of {}",
                    client.name(),
                    line["contentType"],
                    client.content_type()
                );
                break (at, cpu_time(pid)?);
            }
            ensure!(
                Instant::now() < deadline,
                "{}: no {} request",
                client.name(),
                self.stage.name()
            );
            std::thread::sleep(Duration::from_millis(2));
        };
        let done_at = loop {
            if let Some(at) = running.done(self.options.pods)? {
                break at;
            }
            ensure!(
                Instant::now() < deadline,
                "{}: not done after {TIMEOUT:?}",
                client.name()
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let cpu = cpu_time(pid)?.saturating_sub(cpu_at_watch);
        let peak = proc_mem(pid)?.hwm;
        Ok(Measured {
            client,
            elapsed: done_at.saturating_duration_since(watch_at),
            cpu,
            peak,
        })
    }
}

fn main() -> Result<()> {
    let options = Options::from_args()?;
    let Some(kube_informer) = std::env::var_os("WASMFORMER_KUBE_INFORMER") else {
        eprintln!(
            "saturation: run by scripts/bench-informer --saturation ($WASMFORMER_KUBE_INFORMER is not set)"
        );
        return Ok(());
    };
    let programs = PathBuf::from(std::env::var_os("WASMFORMER_BENCH_PROGRAMS_DIR").context(
        "$WASMFORMER_BENCH_PROGRAMS_DIR is not set (tests/kube-apiserver/build.sh --bench)",
    )?);
    let parse = one_parse();
    let mut loads = vec![("start".to_owned(), load_average())];
    let mut stages = Vec::new();
    for &stage in &options.stages {
        eprintln!(
            "{}: encoding {} Pods in JSON and protobuf for the server",
            stage.name(),
            options.pods
        );
        let server = WatchServer::start(&programs, &options, stage)?;
        let work = tempfile::tempdir()?;
        let kubeconfig = server.kubeconfig(work.path())?;
        let bench = Bench {
            options: &options,
            stage,
            work,
            programs: programs.clone(),
            kube_informer: kube_informer.clone().into(),
            server,
            kubeconfig,
        };
        let mut measured = Vec::new();
        for run in 1..=options.runs {
            for client in Contender::ALL {
                let m = bench.measure(client)?;
                eprintln!(
                    "{} run {run}: {} ({}): {:.2} s, CPU {:.2} s",
                    stage.name(),
                    client.name(),
                    client.content_type(),
                    m.elapsed.as_secs_f64(),
                    m.cpu.as_secs_f64()
                );
                measured.push(m);
            }
            loads.push((format!("{} run {run}", stage.name()), load_average()));
        }
        stages.push((stage, measured));
    }
    print_report(&options, parse, &stages);
    print_loads_and_notes(&loads, &[]);
    Ok(())
}

/// The median time of one `serde_json::Value` parse of the realistic Pod as a server sends it
/// (compact, managedFields kept), over batches of 2,000.
fn one_parse() -> Duration {
    let text = serde_json::to_string(&wasmformer_tests::realistic_pod()).unwrap();
    parse_time(&text, 15, 2_000).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The report

fn print_report(options: &Options, parse: Duration, stages: &[(Stage, Vec<Measured>)]) {
    for (stage, measured) in stages {
        match stage {
            Stage::Watch => {
                println!("### Saturation: one watch, as fast as the client takes it\n");
                println!(
                    "{} ADDED events of the realistic Pod (managedFields kept, as a server sends them) over one watch from `watchserver` (an empty list first). Timed from the server taking the watch request to the last handler call.",
                    options.pods
                );
            }
            Stage::List => {
                println!("### Initial list, without the API server's cost\n");
                println!(
                    "{} realistic Pods in the list from `watchserver`, in pages of 500 (the page size every client here asks for), then a watch with no event. Timed from the server taking the first page's request to the last handler call of the initial adds.",
                    options.pods
                );
            }
        }
        println!(
            "Every frame encoded beforehand by apimachinery's serializers, so the server costs little; client and server share the 2 cores. Each client started afresh, {} runs in alternation; medians, with every run's rate in the last column (wasmformer: `/status` polled every 10 ms). CPU is the client process's over the timed window; one `serde_json::Value` parse of the Pod's JSON takes {:.1} µs in the bench's own process.\n",
            options.runs,
            parse.as_secs_f64() * 1e6
        );
        print_table(options, parse, *stage, measured);
    }
}

fn print_table(options: &Options, parse: Duration, stage: Stage, measured: &[Measured]) {
    println!(
        "| client | content type | objects/s per handler | handler calls/s | CPU per object | ÷ one parse | peak RSS | each run, objects/s per handler |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|---|");
    let rate = |m: &Measured| options.pods as f64 / m.elapsed.as_secs_f64();
    let mut medians = Vec::new();
    for client in Contender::ALL {
        let runs: Vec<&Measured> = measured.iter().filter(|m| m.client == client).collect();
        let per_handler = median_f64(runs.iter().map(|m| rate(m)).collect());
        let cpu = median_f64(
            runs.iter()
                .map(|m| m.cpu.as_secs_f64() / options.pods as f64)
                .collect(),
        );
        let peak = median_f64(runs.iter().map(|m| m.peak as f64).collect());
        let each: Vec<String> = runs.iter().map(|m| format!("{:.0}", rate(m))).collect();
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.1} µs | {:.1}× | {} | {} |",
            client.name(),
            client.content_type(),
            per_handler,
            per_handler * client.handlers() as f64,
            cpu * 1e6,
            cpu / parse.as_secs_f64(),
            mib(peak as u64),
            each.join(", ")
        );
        medians.push((client, per_handler, cpu));
    }
    let of = |client: Contender| {
        medians
            .iter()
            .find(|(c, ..)| *c == client)
            .map(|&(_, rate, cpu)| (rate, cpu))
            .unwrap()
    };
    let (ours, our_cpu) = of(Contender::Wasmformer);
    let client_go_json = Contender::ClientGo { protobuf: false };
    let goals: &[(&str, Contender, f64)] = match stage {
        Stage::Watch => &[
            ("≥ 3× client-go (JSON)", client_go_json, 3.0),
            ("≥ 1× kube-rs, feeding 3 plugins", Contender::KubeRs, 1.0),
            (
                "client-go (protobuf), for reference",
                Contender::ClientGo { protobuf: true },
                0.0,
            ),
        ],
        Stage::List => &[
            ("client-go (JSON), for reference", client_go_json, 0.0),
            (
                "client-go (protobuf), for reference",
                Contender::ClientGo { protobuf: true },
                0.0,
            ),
            ("kube-rs, for reference", Contender::KubeRs, 0.0),
        ],
    };
    println!(
        "\n| against | wasmformer's rate per handler, ratio | its CPU per object, ratio | goal met |"
    );
    println!("|---|--:|--:|---|");
    for &(goal, peer, at_least) in goals {
        let (theirs, their_cpu) = of(peer);
        let ratio = ours / theirs;
        println!(
            "| {goal} | {ratio:.2}× | {:.2}× | {} |",
            our_cpu / their_cpu,
            if at_least == 0.0 {
                "—"
            } else if ratio >= at_least {
                "yes"
            } else {
                "no"
            }
        );
    }
    if stage == Stage::List {
        println!(
            "\nItem 1's CPU goal, host CPU per object ≤ 1.5× one parse: {:.1}× ({}).\n",
            our_cpu / parse.as_secs_f64(),
            if our_cpu <= 1.5 * parse.as_secs_f64() {
                "met"
            } else {
                "missed"
            }
        );
    } else {
        println!();
    }
}
