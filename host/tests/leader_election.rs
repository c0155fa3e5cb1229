//! Leader election on the real kube-apiserver: two `wasmformer run` processes share one Lease;
//! only the leader calls handlers. SIGKILL the leader: the follower takes over once the Lease
//! expires; SIGTERM the leader: it drains, releases the Lease and the follower takes over within
//! about `retryPeriod`. Every change made around a takeover is handled exactly once, by exactly
//! one host, and the two never handle at the same time. The failover times are printed, not
//! asserted (`cargo test -p wasmformer --test integration leader_election:: -- --nocapture`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::guests;

const WAIT: Duration = Duration::from_secs(90);

/// One handler call the recorder logged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    host: String,
    event: String,
    name: String,
    resource_version: String,
    initial: bool,
    at: String,
}

/// A `wasmformer run` process and the calls its recorder logged.
struct Host {
    child: Child,
    admin: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Host {
    fn start(server: &KubeApiserver, dir: &std::path::Path, ns: &str, identity: &str) -> Self {
        let plugins = format!(
            "  - name: rec\n    wasm: {wasm}\n    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {ns}}}]\n    config: {{tag: {identity}}}\n",
            wasm = guests::RECORDER,
        );
        Self::launch(server, dir, ns, identity, "host", &plugins)
    }

    /// `wasmformer run` as `identity`, electing with `scope` (`host` or `plugin`), with
    /// `plugins` (the YAML list's entries).
    fn launch(
        server: &KubeApiserver,
        dir: &std::path::Path,
        ns: &str,
        identity: &str,
        scope: &str,
        plugins: &str,
    ) -> Self {
        let admin = free_port();
        let token = dir.join("admin-token");
        std::fs::write(&token, "secret\n").unwrap();
        let config = dir.join(format!("{identity}.yaml"));
        std::fs::write(
            &config,
            format!(
                "cluster: {{kubeconfig: {kubeconfig}}}\n\
                 host:\n  adminAddress: 127.0.0.1:{admin}\n  adminTokenFile: {token}\n  watchConfig: false\n  shutdownTimeout: 5s\n  \
                 leaderElection: {{enabled: true, leaseName: wasmformer, namespace: {ns}, leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 1s, identity: {identity}, scope: {scope}}}\n\
                 plugins:\n{plugins}",
                kubeconfig = server.kubeconfig("admin").display(),
                token = token.display(),
            ),
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_wasmformer"))
            .args(["--log-format", "json", "run", "--config"])
            .arg(&config)
            .env(
                "WASMFORMER_CACHE_DIR",
                std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-cache"),
            )
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run wasmformer");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            admin,
            lines,
        }
    }

    /// The recorder's calls, in the order logged.
    fn calls(&self) -> Vec<Call> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| {
                let line: Value = serde_json::from_str(line).ok()?;
                let message = line.pointer("/fields/message")?.as_str()?;
                let call: Value = serde_json::from_str(message).ok()?;
                Some(Call {
                    host: call["tag"].as_str()?.to_owned(),
                    event: call["event"].as_str()?.to_owned(),
                    name: call["name"].as_str()?.to_owned(),
                    resource_version: call["resourceVersion"].as_str()?.to_owned(),
                    initial: call["initial"].as_bool().unwrap_or(false),
                    at: line["timestamp"].as_str()?.to_owned(),
                })
            })
            .collect()
    }

    /// `POST /reload?plugin=NAME`: the plugin's outcome (`unchanged`, `standby`, …).
    fn reload(&self, plugin: &str) -> String {
        let url = format!("http://127.0.0.1:{}/reload?plugin={plugin}", self.admin);
        let mut response = ureq::post(&url)
            .header("Authorization", "Bearer secret")
            .send_empty()
            .expect("POST /reload");
        let report: Value =
            serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
        report["plugins"][0]["outcome"].as_str().unwrap().to_owned()
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// `/status`'s `leadership`, if the admin endpoint answers.
    fn leadership(&self) -> Option<Value> {
        let url = format!("http://127.0.0.1:{}/status", self.admin);
        let mut response = ureq::get(&url).call().ok()?;
        let status: Value =
            serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()?;
        Some(status["leadership"].clone())
    }

    /// The value of the unlabelled metric `name` on `/metrics`.
    fn metric(&self, name: &str) -> Option<f64> {
        let url = format!("http://127.0.0.1:{}/metrics", self.admin);
        let text = ureq::get(&url)
            .call()
            .ok()?
            .body_mut()
            .read_to_string()
            .ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    fn is_leader(&self) -> bool {
        self.leadership()
            .is_some_and(|l| l["leader"] == json!(true))
    }

    fn wait_until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done(self) {
            assert!(Instant::now() < deadline, "{what}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "did not exit:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn cm(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": value}})).unwrap()
}

/// Creates or replaces ConfigMap `name`; returns its new resourceVersion.
fn write(tokio: &tokio::runtime::Runtime, api: &Api<ConfigMap>, name: &str, value: &str) -> String {
    tokio.block_on(async {
        let mut object = cm(name, value);
        let written = match api.get_opt(name).await.unwrap() {
            Some(existing) => {
                object.metadata.resource_version = existing.metadata.resource_version;
                api.replace(name, &PostParams::default(), &object).await
            }
            None => api.create(&PostParams::default(), &object).await,
        };
        written.unwrap().metadata.resource_version.unwrap()
    })
}

/// Calls of the change `(name, resourceVersion)` across `hosts`.
fn calls_of<'a>(calls: &'a [Call], name: &str, rv: &str) -> Vec<&'a Call> {
    calls
        .iter()
        .filter(|c| c.name == name && c.resource_version == rv)
        .collect()
}

#[test]
fn one_leader_handles_and_a_follower_takes_over_on_sigkill_and_sigterm() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let server = KubeApiserver::shared();
    let ns = tokio.block_on(server.namespace("leader"));
    let api: Api<ConfigMap> = Api::namespaced(tokio.block_on(server.admin()), &ns);
    let dir = tempfile::tempdir().unwrap();
    let mut changes: Vec<(String, String)> = Vec::new();
    for i in 0..5 {
        let name = format!("before-{i}");
        changes.push((name.clone(), write(&tokio, &api, &name, "0")));
    }

    // A leads; B follows with a warm cache and calls nothing.
    let mut a = Host::start(server, dir.path(), &ns, "host-a");
    a.wait_until("host-a leads", Host::is_leader);
    a.wait_until("host-a handles the initial list", |h| h.calls().len() >= 5);
    let mut b = Host::start(server, dir.path(), &ns, "host-b");
    b.wait_until("host-b follows", |h| {
        h.leadership()
            .is_some_and(|l| l["leader"] == json!(false) && l["holder"] == json!("host-a"))
    });
    let ready = |h: &Host| {
        ureq::get(&format!("http://127.0.0.1:{}/readyz", h.admin))
            .call()
            .is_ok()
    };
    b.wait_until("host-b is ready (its cache synced)", ready);
    assert_eq!(b.metric("wasmformer_leader"), Some(0.0), "a follower");
    assert_eq!(a.metric("wasmformer_leader"), Some(1.0), "the leader");
    assert_eq!(a.metric("wasmformer_leader_transitions_total"), Some(1.0));
    assert!(b.calls().is_empty(), "a follower calls no handler");
    let rv = write(&tokio, &api, "while-a-leads", "1");
    a.wait_until("host-a handles a change", |h| {
        !calls_of(&h.calls(), "while-a-leads", &rv).is_empty()
    });
    changes.push(("while-a-leads".into(), rv));

    // SIGKILL A: no release; B takes over when the Lease expires.
    a.signal(libc::SIGKILL);
    let killed = Instant::now();
    a.wait();
    let rv = write(&tokio, &api, "during-kill-takeover", "1");
    let during_kill = ("during-kill-takeover".to_owned(), rv);
    b.wait_until("host-b takes over after SIGKILL", Host::is_leader);
    let kill_failover = killed.elapsed();
    b.wait_until("host-b handles the change made during the takeover", |h| {
        !calls_of(&h.calls(), &during_kill.0, &during_kill.1).is_empty()
    });
    assert_eq!(b.metric("wasmformer_leader"), Some(1.0), "the new leader");
    assert_eq!(b.leadership().unwrap()["holder"], json!("host-b"));
    let rv = write(&tokio, &api, "while-a-leads", "2");
    b.wait_until("host-b handles a change after the takeover", |h| {
        !calls_of(&h.calls(), "while-a-leads", &rv).is_empty()
    });
    let after_kill = ("while-a-leads".to_owned(), rv);

    // A comes back as follower; SIGTERM B: it drains, releases, and A2 takes over.
    let a2 = Host::start(server, dir.path(), &ns, "host-a2");
    a2.wait_until("host-a2 follows", |h| {
        h.leadership()
            .is_some_and(|l| l["leader"] == json!(false) && l["holder"] == json!("host-b"))
    });
    a2.wait_until("host-a2 is ready", ready);
    b.signal(libc::SIGTERM);
    let terminated = Instant::now();
    let rv = write(&tokio, &api, "during-term-takeover", "1");
    let during_term = ("during-term-takeover".to_owned(), rv);
    a2.wait_until("host-a2 takes over after SIGTERM", Host::is_leader);
    let term_failover = terminated.elapsed();
    assert!(
        b.wait().success(),
        "host-b exits 0 on SIGTERM:\n{}",
        b.log()
    );
    a2.wait_until("host-a2 handles the change made during the takeover", |h| {
        !calls_of(&h.calls(), &during_term.0, &during_term.1).is_empty()
    });
    let rv = write(&tokio, &api, "after-term", "1");
    a2.wait_until("host-a2 handles a change after the takeover", |h| {
        !calls_of(&h.calls(), "after-term", &rv).is_empty()
    });
    let after_term = ("after-term".to_owned(), rv);

    let (a_calls, b_calls, a2_calls) = (a.calls(), b.calls(), a2.calls());
    let all: Vec<Call> = [a_calls.clone(), b_calls.clone(), a2_calls.clone()].concat();
    // Every change made around or after a takeover is handled exactly once, by one host; a later
    // leader may only re-deliver it as state, as an initial add from its warm cache when it takes
    // over (a new leader, like a restarted host, starts from the whole cache).
    let mut sorted = all.clone();
    sorted.sort_by(|x, y| x.at.cmp(&y.at));
    for ((name, rv), first_by) in [
        (&during_kill, "host-b"),
        (&after_kill, "host-b"),
        (&during_term, ""),
        (&after_term, "host-a2"),
    ] {
        let calls = calls_of(&sorted, name, rv);
        assert!(!calls.is_empty(), "{name}@{rv} was handled");
        if !first_by.is_empty() {
            assert_eq!(calls[0].host, first_by, "{name}@{rv}: {calls:#?}");
        }
        for (i, later) in calls.iter().enumerate().skip(1) {
            assert!(
                later.initial && calls[..i].iter().all(|earlier| earlier.host != later.host),
                "{name}@{rv} handled once, then only re-delivered by a new leader: {calls:#?}"
            );
        }
    }
    // No live event is handled by two hosts: a takeover re-delivers state only as initial adds.
    let live: Vec<&Call> = all.iter().filter(|c| !c.initial).collect();
    for call in &live {
        let same: Vec<_> = live
            .iter()
            .filter(|c| {
                (&c.event, &c.name, &c.resource_version)
                    == (&call.event, &call.name, &call.resource_version)
            })
            .collect();
        assert_eq!(same.len(), 1, "one live call of {call:?}: {same:#?}");
    }
    // B followed while A led: nothing before the takeover; and B's last call precedes A2's first.
    let b_first = b_calls.iter().map(|c| &c.at).min().expect("host-b handled");
    let a_last = a_calls.iter().map(|c| &c.at).max().expect("host-a handled");
    assert!(a_last < b_first, "host-b handled only after host-a died");
    let b_last = b_calls.iter().map(|c| &c.at).max().unwrap();
    let a2_first = a2_calls
        .iter()
        .map(|c| &c.at)
        .min()
        .expect("host-a2 handled");
    assert!(
        b_last < a2_first,
        "host-a2 handled only after host-b stopped"
    );
    // The new leader started from its warm cache: every object it saw arrived first as an
    // initial add.
    assert!(
        b_calls.iter().take(changes.len()).all(|c| c.initial),
        "{b_calls:#?}"
    );
    assert!(
        b.log().contains("lease released"),
        "host-b released the Lease on SIGTERM:\n{}",
        b.log()
    );
    println!(
        "failover after SIGKILL: {:.2}s (leaseDuration 4s + retryPeriod 1s); after SIGTERM: {:.2}s (retryPeriod 1s)",
        kill_failover.as_secs_f64(),
        term_failover.as_secs_f64()
    );
    drop(a);
}

/// The plugins `host` leads and runs, from `/status`: its Lease is this replica's
/// (`leadership.plugins[].leader`) and the plugin has started and delivered the warm cache
/// (`plugins[].version` set, `synced`), so a change made now reaches it as a live event.
fn led(host: &Host) -> Option<std::collections::BTreeSet<String>> {
    let url = format!("http://127.0.0.1:{}/status", host.admin);
    let mut response = ureq::get(&url).call().ok()?;
    let status: Value = serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()?;
    let running = |name: &str| {
        status["plugins"].as_array().is_some_and(|plugins| {
            plugins.iter().any(|p| {
                p["name"] == json!(name) && p["version"] != json!("") && p["synced"] == json!(true)
            })
        })
    };
    Some(
        status["leadership"]["plugins"]
            .as_array()?
            .iter()
            .filter(|p| p["leader"] == json!(true))
            .filter_map(|p| p["name"].as_str())
            .filter(|name| running(name))
            .map(str::to_owned)
            .collect(),
    )
}

/// Waits until `hosts` lead disjoint sets of plugins, of the sizes `sizes`, covering all of
/// `plugins`; returns each host's set.
fn wait_for_split(
    hosts: &[&Host],
    plugins: &[String],
    sizes: &[usize],
) -> Vec<std::collections::BTreeSet<String>> {
    let deadline = Instant::now() + WAIT;
    loop {
        let sets: Vec<_> = hosts.iter().map(|h| led(h).unwrap_or_default()).collect();
        let union: std::collections::BTreeSet<&String> = sets.iter().flatten().collect();
        let total: usize = sets.iter().map(|s| s.len()).sum();
        let sized = sets.iter().map(|s| s.len()).collect::<Vec<_>>() == sizes;
        if sized && total == plugins.len() && union.len() == plugins.len() {
            return sets;
        }
        assert!(
            Instant::now() < deadline,
            "no split {sizes:?} of {plugins:?}: {sets:?}\n{}",
            hosts.iter().map(|h| h.log()).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A recorder call's `(host, plugin)`: the tag is `<host>/<plugin>`.
fn host_and_plugin(call: &Call) -> (&str, &str) {
    call.host.split_once('/').expect("tag host/plugin")
}

/// `scope: plugin`: a replica alone leads six plugins; two more join and the three split them
/// 2/2/2 (the first hands four back; each plugin handled by exactly one replica); SIGKILL one and
/// its two plugins move to the others (3/3), and every change made after the takeover is handled
/// exactly once per plugin, by its new owner; SIGTERM another and it releases every Lease.
#[test]
fn replicas_share_six_plugins_evenly_and_a_killed_replicas_plugins_move_to_the_others() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let server = KubeApiserver::shared();
    let ns = tokio.block_on(server.namespace("share"));
    let api: Api<ConfigMap> = Api::namespaced(tokio.block_on(server.admin()), &ns);
    let dir = tempfile::tempdir().unwrap();
    let plugins: Vec<String> = (0..6).map(|i| format!("rec-{i}")).collect();
    for i in 0..3 {
        write(&tokio, &api, &format!("before-{i}"), "0");
    }
    let config_for = |identity: &str| -> String {
        plugins
            .iter()
            .map(|p| {
                format!(
                    "  - name: {p}\n    wasm: {wasm}\n    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {ns}}}]\n    config: {{tag: {identity}/{p}}}\n",
                    wasm = guests::RECORDER,
                )
            })
            .collect()
    };
    let launch = |identity: &str| {
        Host::launch(
            server,
            dir.path(),
            &ns,
            identity,
            "plugin",
            &config_for(identity),
        )
    };
    // A, alone, leads all six.
    let a = launch("host-a");
    wait_for_split(&[&a], &plugins, &[6]);
    // B and C join together: A hands back four, and the split settles at 2/2/2 — neither
    // newcomer takes more than its fair share.
    let started = Instant::now();
    let (b, mut c) = (launch("host-b"), launch("host-c"));
    let split = wait_for_split(&[&a, &b, &c], &plugins, &[2, 2, 2]);
    let split_after = started.elapsed();
    assert_eq!(
        a.log().matches("plugin handed back").count(),
        4,
        "host-a handed back four plugins:\n{}",
        a.log()
    );
    for host in [&a, &b, &c] {
        let leadership = host.leadership().unwrap();
        assert_eq!(leadership["scope"], json!("plugin"));
        assert_eq!(leadership["replicas"], json!(3), "{leadership:#}");
        assert_eq!(leadership["fairShare"], json!(2), "{leadership:#}");
        assert_eq!(host.metric("wasmformer_leader"), Some(1.0));
        let ready = ureq::get(&format!("http://127.0.0.1:{}/readyz", host.admin)).call();
        assert!(ready.is_ok(), "ready: its plugins and warm caches synced");
    }
    for host in [&a, &b, &c] {
        let url = format!("http://127.0.0.1:{}/status", host.admin);
        let status: Value = serde_json::from_str(
            &ureq::get(&url)
                .call()
                .unwrap()
                .body_mut()
                .read_to_string()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            status["plugins"].as_array().map(Vec::len),
            Some(6),
            "every replica lists every plugin, those it stands by for included: {status:#}"
        );
    }
    // The status page says which plugins A leads and lists all six.
    let dom =
        wasmformer_tests::chromium(&format!("http://127.0.0.1:{}/", a.admin), &["--dump-dom"]);
    let leads = split[0].iter().cloned().collect::<Vec<_>>().join(", ");
    assert!(
        dom.contains(&format!(
            "host-a leads {leads} (3 replicas, fair share 2); stands by for"
        )),
        "{dom}"
    );
    assert_eq!(dom.matches("data-plugin=").count(), 6, "{dom}");
    let not_of_a = plugins.iter().find(|p| !split[0].contains(*p)).unwrap();
    assert_eq!(
        a.reload(not_of_a),
        "standby",
        "a plugin another replica leads"
    );
    assert_eq!(
        a.metric(&format!(
            "wasmformer_plugin_leader{{plugin=\"{not_of_a}\"}}"
        )),
        Some(0.0)
    );
    let first_of_a = split[0].iter().next().unwrap();
    assert_eq!(a.reload(first_of_a), "unchanged", "a plugin it leads");
    assert_eq!(
        a.metric(&format!(
            "wasmformer_plugin_leader{{plugin=\"{first_of_a}\"}}"
        )),
        Some(1.0)
    );
    // Every plugin handles a change once, on the replica that leads it.
    let owners = |sets: &[std::collections::BTreeSet<String>], ids: &[&str]| {
        let mut owners = std::collections::BTreeMap::new();
        for (set, id) in sets.iter().zip(ids) {
            for plugin in set {
                owners.insert(plugin.clone(), (*id).to_owned());
            }
        }
        owners
    };
    let split_owners = owners(&split, &["host-a", "host-b", "host-c"]);
    let all_calls =
        |hosts: &[&Host]| -> Vec<Call> { hosts.iter().flat_map(|h| h.calls()).collect() };
    let handled_by_each_plugin = |calls: &[Call], name: &str, rv: &str| {
        calls_of(calls, name, rv)
            .iter()
            .map(|c| host_and_plugin(c).1.to_owned())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            == plugins.len()
    };
    let rv = write(&tokio, &api, "after-split", "1");
    let deadline = Instant::now() + WAIT;
    while !handled_by_each_plugin(&all_calls(&[&a, &b, &c]), "after-split", &rv) {
        assert!(
            Instant::now() < deadline,
            "after-split handled by every plugin"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let calls = all_calls(&[&a, &b, &c]);
    for plugin in &plugins {
        let by: Vec<&str> = calls_of(&calls, "after-split", &rv)
            .iter()
            .filter(|c| host_and_plugin(c).1 == plugin)
            .map(|c| host_and_plugin(c).0)
            .collect();
        assert_eq!(
            by,
            [split_owners[plugin].as_str()],
            "{plugin} handled once, by its leader"
        );
    }

    // SIGKILL C: its two plugins move to A and B, which end with three each.
    c.signal(libc::SIGKILL);
    let killed = Instant::now();
    c.wait();
    let rv = write(&tokio, &api, "during-takeover", "1");
    let during = ("during-takeover".to_owned(), rv);
    let moved = wait_for_split(&[&a, &b], &plugins, &[3, 3]);
    let moved_after = killed.elapsed();
    for (before, after) in split[..2].iter().zip(&moved) {
        assert!(
            before.is_subset(after),
            "a survivor keeps its plugins: {before:?} ⊄ {after:?}"
        );
    }
    let moved_owners = owners(&moved, &["host-a", "host-b"]);
    let rv = write(&tokio, &api, "after-takeover", "1");
    let after = ("after-takeover".to_owned(), rv);
    let deadline = Instant::now() + WAIT;
    while ![&during, &after]
        .iter()
        .all(|(name, rv)| handled_by_each_plugin(&all_calls(&[&a, &b]), name, rv))
    {
        assert!(
            Instant::now() < deadline,
            "the changes around the takeover handled by every plugin:\n{}\n{}",
            a.log(),
            b.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let survivors = all_calls(&[&a, &b]);
    for plugin in &plugins {
        let owner = moved_owners[plugin].as_str();
        // Made after the takeover: handled once, live, by the new owner.
        let by: Vec<(&str, bool)> = calls_of(&survivors, &after.0, &after.1)
            .iter()
            .filter(|c| host_and_plugin(c).1 == plugin)
            .map(|c| (host_and_plugin(c).0, c.initial))
            .collect();
        assert_eq!(
            by,
            [(owner, false)],
            "{plugin}: after-takeover handled once by {owner}"
        );
        // Made during it: not lost — the new owner handled it (live, or as an initial add from
        // its warm cache when it took over), and no one else did after the kill.
        let by: Vec<&str> = calls_of(&survivors, &during.0, &during.1)
            .iter()
            .filter(|c| host_and_plugin(c).1 == plugin)
            .map(|c| host_and_plugin(c).0)
            .collect();
        assert_eq!(
            by,
            [owner],
            "{plugin}: during-takeover handled once by {owner}"
        );
    }
    // No live event is handled twice by one plugin, across all replicas.
    let everything = [survivors, c.calls()].concat();
    let live: Vec<&Call> = everything.iter().filter(|c| !c.initial).collect();
    for call in &live {
        let same = live
            .iter()
            .filter(|o| {
                host_and_plugin(o).1 == host_and_plugin(call).1
                    && (&o.event, &o.name, &o.resource_version)
                        == (&call.event, &call.name, &call.resource_version)
            })
            .count();
        assert_eq!(same, 1, "one live call of {call:?}");
    }

    // SIGTERM B: it drains and releases every Lease it holds (its plugins' and its membership),
    // so A, alone, takes all six without waiting for an expiry.
    let mut b = b;
    b.signal(libc::SIGTERM);
    assert!(
        b.wait().success(),
        "host-b exits 0 on SIGTERM:\n{}",
        b.log()
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(tokio.block_on(server.admin()), &ns);
    let held_by_b: Vec<String> = tokio
        .block_on(leases.list(&Default::default()))
        .unwrap()
        .items
        .into_iter()
        .filter(|l| l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some("host-b"))
        .filter_map(|l| l.metadata.name)
        .collect();
    assert!(
        held_by_b.is_empty(),
        "host-b released every Lease: {held_by_b:?}"
    );
    wait_for_split(&[&a], &plugins, &[6]);
    println!(
        "scope plugin: 6/0/0 rebalanced to 2/2/2 {:.2}s after two replicas joined; a killed replica's plugins running elsewhere after {:.2}s (leaseDuration 4s, retryPeriod 1s)",
        split_after.as_secs_f64(),
        moved_after.as_secs_f64()
    );
    drop(a);
}
