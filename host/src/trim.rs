//! Giving freed heap back to the OS, after the bursts that free the most.
//!
//! glibc's malloc keeps freed memory inside its arenas, resident, unless it lies at the very top
//! of one. Three things free a lot at once and would leave it there:
//! - an unload drops the plugin's instance and its compiled code's metadata: tens of KiB of small
//!   allocations, freed on whichever delivery thread ran it (without a trim an unloaded plugin
//!   still cost about 100 KiB of RSS, of which 14 KiB was live: issue 16);
//! - a completed list drops its pages of JSON and its buffered objects (with 10,000 Pods the
//!   host's RSS was 83 and 86 MiB in two runs without this trim, 74, 80 and 81 MiB in three with
//!   it: issue 17, item 4);
//! - a plugin's queue that has drained a backlog, such as that list, gives back its capacity
//!   (about 1.2 MiB per plugin with 10,000 Pods).
//!
//! After any of them, [`request`] wakes one background thread that calls `malloc_trim(0)`, which
//! gives every arena's free pages back (`madvise`), at most once per [`MIN_INTERVAL`] and
//! [`DEBOUNCE`] after the first request, so a thousand plugins going idle together, or a hundred
//! informers syncing, cost one trim. Only with glibc; elsewhere (the musl static binary)
//! [`request`] does nothing.
//!
//! Every thread allocates from malloc's one main arena ([`one_arena`]). glibc gives each thread
//! that allocates its own arena (up to eight per core), and the informer's task moves between
//! tokio's workers: a list's objects and the transient pages they were decoded from then lie in
//! several arenas, each with its own free holes a trim cannot give back. With 10,000 Pods cached
//! the host's RSS was 54–64 MiB in three runs with glibc's arenas, 52.3–52.5 in three with one
//! (issue 17, item 4); with 100 plugins on 1,000 Pods, 38–43 MiB against 29 (issue 16). The
//! threads then share the arena's lock: malloc was 4 % of the host's time with 300 plugins
//! either way, yet the density bench measured 10.8–12.9 µs of host CPU per handler call with
//! arenas per thread and 12.6–13.5 with one (BENCHMARKS.md, "One malloc arena"). The
//! environment can choose more arenas ([`one_arena`]).
//!
//! The same thread runs other work that gives memory back and need not delay the thread that
//! asks for it ([`later`]): the code pages a plugin's `init` ran (`plugin::code`), the host's own
//! code once every plugin has synced (`resident`). A trim follows such work: the host's code is
//! found in `/proc/self/smaps`, read into a few MiB of heap that freed otherwise stayed resident
//! (with 10,000 Pods cached, 2–3 MiB of the host's 52–54).

use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// How long the trimmer waits after a request for more requests to gather.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// The least time between two trims (a trim walks every arena under its lock).
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// A piece of work for the background thread.
type Job = Box<dyn FnOnce() + Send>;

/// What the background thread has been asked for.
struct Pending {
    trim: bool,
    jobs: Vec<Job>,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    trim: false,
    jobs: Vec::new(),
});
static WAKE: Condvar = Condvar::new();

/// Asks for the heap's free pages to be given back soon (after an unload, a completed list or a
/// drained backlog).
pub(crate) fn request() {
    #[cfg(test)]
    REQUESTS.with(|requests| requests.set(requests.get() + 1));
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    start();
    PENDING.lock().expect("trim lock poisoned").trim = true;
    WAKE.notify_one();
}

/// Runs `job` on the background thread, [`DEBOUNCE`] or so from now; runs it here if the thread
/// cannot be started.
pub(crate) fn later(job: impl FnOnce() + Send + 'static) {
    if !start() {
        job();
        return;
    }
    PENDING
        .lock()
        .expect("trim lock poisoned")
        .jobs
        .push(Box::new(job));
    WAKE.notify_one();
}

/// Starts the background thread if it is not running; whether it runs.
fn start() -> bool {
    static STARTED: OnceLock<bool> = OnceLock::new();
    *STARTED.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("wasmformer-trim".into())
            .spawn(run);
        if let Err(error) = &spawned {
            tracing::warn!(%error, "cannot start the thread that gives freed memory back to the OS");
        }
        spawned.is_ok()
    })
}

#[cfg(test)]
std::thread_local! {
    static REQUESTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many trims this thread has asked for (tests: a current-thread runtime's tasks run on it).
#[cfg(test)]
pub(crate) fn requests_on_this_thread() -> u64 {
    REQUESTS.with(std::cell::Cell::get)
}

fn run() {
    loop {
        let mut pending = PENDING.lock().expect("trim lock poisoned");
        while !pending.trim && pending.jobs.is_empty() {
            pending = WAKE.wait(pending).expect("trim lock poisoned");
        }
        drop(pending);
        std::thread::sleep(DEBOUNCE);
        let (trim, jobs) = {
            let mut pending = PENDING.lock().expect("trim lock poisoned");
            (
                std::mem::take(&mut pending.trim),
                std::mem::take(&mut pending.jobs),
            )
        };
        // A job's own transient allocations (reading `/proc/self/smaps` takes a few MiB) are
        // freed after any trim asked for before it: trim after jobs too.
        let trim = trim || !jobs.is_empty();
        for job in jobs {
            job();
        }
        if !trim {
            continue;
        }
        let started = std::time::Instant::now();
        let released = trim_now();
        tracing::debug!(
            released,
            tookMs = started.elapsed().as_secs_f64() * 1e3,
            "freed heap given back to the OS"
        );
        std::thread::sleep(MIN_INTERVAL.saturating_sub(DEBOUNCE));
    }
}

/// Has every thread allocate from malloc's main arena, unless the environment chose how many
/// arenas there are (`GLIBC_TUNABLES=glibc.malloc.arena_max=N` or `MALLOC_ARENA_MAX`). Called
/// once at start, before other threads allocate. Only with glibc; elsewhere it does nothing.
pub fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let chosen = std::env::var("GLIBC_TUNABLES")
            .is_ok_and(|tunables| tunables.contains("glibc.malloc.arena_max"))
            || std::env::var_os("MALLOC_ARENA_MAX").is_some();
        if !chosen {
            // SAFETY: mallopt has no preconditions; threads that already have an arena keep it.
            unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
        }
    }
}

/// Gives every malloc arena's free pages back to the OS now; whether any were.
pub(crate) fn trim_now() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim has no preconditions; it takes each arena's lock.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod later_tests {
    /// A job handed to [`later`](super::later) runs, on the background thread, not the caller's.
    #[test]
    fn a_job_runs_on_the_background_thread() {
        let (sent, ran) = std::sync::mpsc::channel();
        super::later(move || {
            let thread = std::thread::current().name().map(str::to_owned);
            sent.send(thread).unwrap();
        });
        let thread = ran
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        assert_eq!(thread.as_deref(), Some("wasmformer-trim"));
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    fn resident_bytes() -> u64 {
        crate::metrics::process::ProcessSample::read()
            .resident_bytes
            .expect("VmRSS of /proc/self/status")
    }

    /// Allocates 64 MiB in blocks below the mmap threshold, then one more above them, and frees
    /// the 64 MiB: what stays resident until a trim. Returns the live block, so the arena's top
    /// is not free.
    fn free_64_mib_below_a_live_block() -> Vec<u8> {
        const BLOCKS: usize = 8192;
        let mut blocks: Vec<Vec<u8>> = (0..BLOCKS).map(|i| vec![i as u8; 8 << 10]).collect();
        let keep = vec![1u8; 8 << 10];
        blocks.clear();
        blocks.shrink_to_fit();
        keep
    }

    /// What a job run by [`later`] frees is given back after it, with no trim asked for: 64 MiB
    /// of small blocks freed below a live one (which the job hands out) leave the resident set
    /// within a few seconds.
    #[test]
    fn what_a_later_job_frees_is_given_back() {
        let (sent, received) = std::sync::mpsc::channel();
        later(move || {
            let keep = free_64_mib_below_a_live_block();
            sent.send((keep, resident_bytes())).unwrap();
        });
        let (keep, before) = received
            .recv_timeout(Duration::from_secs(10))
            .expect("the job ran");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut after = resident_bytes();
        while before.saturating_sub(after) < 32 << 20 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            after = resident_bytes();
        }
        drop(std::hint::black_box(keep));
        assert!(
            before.saturating_sub(after) >= 32 << 20,
            "{} KiB of the 64 MiB the job freed given back",
            before.saturating_sub(after) >> 10
        );
    }

    /// Freed small allocations below a live one stay resident until trimmed (what an unloaded
    /// plugin's metadata was), and the trim gives them back.
    #[test]
    fn a_trim_gives_freed_heap_back() {
        let (before, after) = std::thread::spawn(|| {
            let keep = free_64_mib_below_a_live_block();
            let before = resident_bytes();
            trim_now();
            let after = resident_bytes();
            drop(std::hint::black_box(keep));
            (before, after)
        })
        .join()
        .unwrap();
        assert!(
            before.saturating_sub(after) >= 32 << 20,
            "trim gave back {} KiB of 64 MiB freed",
            before.saturating_sub(after) >> 10
        );
    }
}
