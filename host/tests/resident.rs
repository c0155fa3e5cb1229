//! Code resident only where it runs (issue 16; `host/src/resident.rs`): once a host has started,
//! its own executable's code and a plugin's compiled code are mapped in pieces, and what its start
//! and the plugin's `init` ran is given back.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasmformer_tests::guests;

/// Kills the host when the test ends, passing or not.
struct Host(Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The executable mappings of `pid` whose file satisfies `file`: (size, resident) in bytes.
fn code_mappings(pid: u32, file: impl Fn(&str) -> bool) -> Vec<(u64, u64)> {
    wasmformer_tests::bench::proc::mappings(pid)
        .unwrap()
        .into_iter()
        .filter(|m| m.perms == "r-xp" && file(&m.path))
        .map(|m| (m.end - m.start, m.rss))
        .collect()
}

#[test]
fn a_started_host_keeps_its_code_and_its_plugins_resident_only_where_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("probe.yaml");
    std::fs::write(
        &config,
        format!(
            "plugins:\n  - name: probe\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n    config: {{probe: none}}\n",
            guests::BENCH_PROBE
        ),
    )
    .unwrap();
    let log_path = dir.path().join("host.log");
    let host = Host(
        Command::new(env!("CARGO_BIN_EXE_wasmformer"))
            .args(["dev", "--no-controllers", "--run-for", "120s", "--config"])
            .arg(&config)
            .arg("--kubeconfig-out")
            .arg(dir.path().join("dev.kubeconfig"))
            .env("RUST_LOG", "info,wasmformer::resident=debug")
            .env("WASMFORMER_CACHE_DIR", dir.path().join("cache"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .expect("start wasmformer dev"),
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let started = Instant::now();
    while !log().contains("the host's code given back") {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the host never gave its code back: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = host.0.id();

    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let exe = exe.to_string_lossy().into_owned();
    let own = code_mappings(pid, |path| path == exe);
    let (size, resident) = own
        .iter()
        .fold((0, 0), |(s, r), (size, rss)| (s + size, r + rss));
    assert!(
        own.len() > 100,
        "the executable's code in {} mappings",
        own.len()
    );
    assert!(
        resident < size / 4,
        "{resident} bytes of the executable's {size} of code resident once started"
    );

    let plugin = code_mappings(pid, |path| path.ends_with(".cwasm"));
    let (size, resident) = plugin
        .iter()
        .fold((0, 0), |(s, r), (size, rss)| (s + size, r + rss));
    assert_eq!(
        plugin.len() as u64,
        size / 4096,
        "the plugin's code in a mapping per page"
    );
    assert!(
        resident < size / 4,
        "{resident} bytes of the plugin's {size} of code resident after its init"
    );
}
