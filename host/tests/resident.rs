//! What a started host keeps resident (issues 16 and 17):
//! - code only where it runs (`host/src/resident.rs`): once a host has started, its own
//!   executable's code and a plugin's compiled code are mapped in pieces, and what its start and
//!   the plugin's `init` ran is given back;
//! - one malloc arena (`host/src/trim.rs`, `one_arena`): its threads all allocate from malloc's
//!   main arena, unless the environment chose how many arenas there are.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasmformer_tests::bench::proc::mappings;
use wasmformer_tests::guests;

/// The size and alignment of each heap of a glibc thread arena (`HEAP_MAX_SIZE` on 64 bits).
const ARENA_HEAP: u64 = 64 << 20;

/// Kills the host when the test ends, passing or not.
struct Host(Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `wasmformer dev` with one plugin on Pods (so the delivery pool, tokio's workers and the
/// informer have all allocated) and waits until every plugin has synced; `env` is added to its
/// environment.
fn started_host(dir: &std::path::Path, env: &[(&str, &str)]) -> Host {
    let config = dir.join("host.yaml");
    std::fs::write(
        &config,
        format!(
            "plugins:\n  - name: probe\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n    config: {{probe: none}}\n",
            guests::BENCH_PROBE
        ),
    )
    .unwrap();
    let log_path = dir.join("host.log");
    let host = Host(
        Command::new(env!("CARGO_BIN_EXE_wasmformer"))
            .args(["dev", "--no-controllers", "--run-for", "120s", "--config"])
            .arg(&config)
            .arg("--kubeconfig-out")
            .arg(dir.join("dev.kubeconfig"))
            .env("RUST_LOG", "info,wasmformer::resident=debug")
            .env("WASMFORMER_CACHE_DIR", dir.join("cache"))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .expect("start wasmformer dev"),
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let started = Instant::now();
    // Logged once every plugin has synced.
    while !log().contains("the host's code given back") {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the host never synced (it logs \"the host's code given back\" then): {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    host
}

/// The executable mappings of `pid` whose file satisfies `file`: (size, resident) in bytes.
fn code_mappings(pid: u32, file: impl Fn(&str) -> bool) -> Vec<(u64, u64)> {
    mappings(pid)
        .unwrap()
        .into_iter()
        .filter(|m| m.perms == "r-xp" && file(&m.path))
        .map(|m| (m.end - m.start, m.rss))
        .collect()
}

#[test]
fn a_started_host_keeps_its_code_and_its_plugins_resident_only_where_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let host = started_host(dir.path(), &[]);
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

/// How many glibc thread arenas `pid` has: anonymous read-write mappings at a 64 MiB boundary
/// that, with the inaccessible rest of their reservation after them, span exactly 64 MiB.
fn thread_arenas(pid: u32) -> usize {
    let maps = mappings(pid).unwrap();
    maps.iter()
        .zip(maps.iter().skip(1).map(Some).chain([None]))
        .filter(|(m, next)| {
            let anonymous = m.path.is_empty() && m.perms == "rw-p";
            let whole = m.end - m.start == ARENA_HEAP
                || next.is_some_and(|n| {
                    n.path.is_empty()
                        && n.perms == "---p"
                        && n.start == m.end
                        && n.end == m.start + ARENA_HEAP
                });
            anonymous && m.start % ARENA_HEAP == 0 && whole
        })
        .count()
}

#[test]
fn a_running_host_allocates_from_one_arena() {
    let dir = tempfile::tempdir().unwrap();
    let host = started_host(dir.path(), &[]);
    assert_eq!(thread_arenas(host.0.id()), 0, "thread arenas in the host");
}

/// The environment's choice stands: with up to eight arenas, the host's threads make their own
/// (this also shows that [`thread_arenas`] finds them).
#[test]
fn an_arena_count_in_the_environment_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let host = started_host(
        dir.path(),
        &[("GLIBC_TUNABLES", "glibc.malloc.arena_max=8")],
    );
    assert!(
        thread_arenas(host.0.id()) > 0,
        "no thread arena in a host told to use up to 8"
    );
}
