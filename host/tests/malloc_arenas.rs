//! One malloc arena (`host/src/trim.rs`, `one_arena`): a running host's threads all allocate from
//! malloc's main arena, unless the environment chose how many arenas there are.

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
            "the host never synced: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    host
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
