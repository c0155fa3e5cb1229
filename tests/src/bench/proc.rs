//! A process's memory, threads and CPU time, from `/proc/<pid>`; and stopping a child politely.

use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// `VmRSS` and `VmHWM` of a process, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcMem {
    pub rss: u64,
    pub hwm: u64,
}

/// A `kB` field of `/proc/<pid>/status` (or `smaps_rollup`), in bytes; 0 when absent.
fn kb_field(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

fn status(pid: u32) -> Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))
}

/// `VmRSS` and `VmHWM` of `pid`.
pub fn proc_mem(pid: u32) -> Result<ProcMem> {
    let status = status(pid)?;
    Ok(ProcMem {
        rss: kb_field(&status, "VmRSS:"),
        hwm: kb_field(&status, "VmHWM:"),
    })
}

/// `Pss` of `/proc/<pid>/smaps_rollup` in bytes: RSS with each shared page divided among the
/// processes that map it; `None` where the kernel does not offer it.
pub fn pss(pid: u32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup
        .lines()
        .any(|l| l.starts_with("Pss:"))
        .then(|| kb_field(&rollup, "Pss:"))
}

/// `Threads` of `/proc/<pid>/status`.
pub fn threads(pid: u32) -> Result<u64> {
    let status = status(pid)?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .with_context(|| format!("no Threads in /proc/{pid}/status"))
}

/// User + system CPU time of `pid` so far (`utime` + `stime` of `/proc/<pid>/stat`, in clock
/// ticks of usually 10 ms).
pub fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces: count from the `)` that closes it.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc/PID/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); utime and stime are fields 14 and 15.
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i - 3)
            .and_then(|f| f.parse().ok())
            .context("malformed /proc/PID/stat")
    };
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(Duration::from_secs_f64(
        (ticks(14)? + ticks(15)?) as f64 / per_second,
    ))
}

/// Resets `VmHWM` to the current RSS (`echo 5 > /proc/PID/clear_refs`).
pub fn reset_peak(pid: u32) -> Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .with_context(|| format!("reset the peak RSS of {pid}"))
}

/// RSS of the host by kind of mapping (from `/proc/<pid>/smaps`), in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Breakdown {
    /// Anonymous memory outside wasm reservations: malloc (cache, kube, tokio, wasmtime's
    /// metadata), thread stacks.
    pub heap: u64,
    /// The pooling allocator's reservations (contiguous anonymous mappings of at least 1 GiB in
    /// all, however wasmtime has split them): wasm linear memories, tables and instance data;
    /// and the copy-on-write memory images (`memfd:wasm-memory-image`).
    pub wasm_memory: u64,
    /// The compiled plugins: wasmtime's copies of their code and read-only data (anonymous
    /// executable or read-only mappings), or `.cwasm` files where mapped.
    pub wasm_code: u64,
    /// The executable and shared libraries.
    pub code: u64,
}

/// One mapping of `/proc/<pid>/smaps`.
struct Mapping {
    start: u64,
    end: u64,
    perms: String,
    path: String,
    rss: u64,
}

/// The RSS of `pid` by kind of mapping.
pub fn smaps_breakdown(pid: u32) -> Result<Breakdown> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let mut mappings: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if first.contains('-') && !first.ends_with(':') {
            let (start, end) = first.split_once('-').unwrap();
            mappings.push(Mapping {
                start: u64::from_str_radix(start, 16).unwrap_or(0),
                end: u64::from_str_radix(end, 16).unwrap_or(0),
                perms: fields.next().unwrap_or_default().to_owned(),
                path: fields.nth(3).unwrap_or_default().to_owned(),
                rss: 0,
            });
        } else if first == "Rss:"
            && let Some(mapping) = mappings.last_mut()
        {
            mapping.rss = fields
                .next()
                .and_then(|kb| kb.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024;
        }
    }
    mappings.sort_by_key(|m| m.start);
    // Runs of adjacent anonymous data mappings (read-write or inaccessible): a run of 1 GiB or
    // more is a pool reservation that wasmtime split by mapping slots into it.
    let data = |m: &Mapping| m.path.is_empty() && matches!(m.perms.as_str(), "rw-p" | "---p");
    let mut in_pool = vec![false; mappings.len()];
    let mut run_start = 0;
    for i in 0..=mappings.len() {
        let continues = i < mappings.len()
            && i > run_start
            && data(&mappings[i])
            && data(&mappings[i - 1])
            && mappings[i - 1].end == mappings[i].start;
        if continues {
            continue;
        }
        if i > run_start
            && data(&mappings[run_start])
            && mappings[i - 1].end - mappings[run_start].start >= 1 << 30
        {
            in_pool[run_start..i].fill(true);
        }
        run_start = i;
    }
    let mut breakdown = Breakdown::default();
    for (mapping, in_pool) in mappings.iter().zip(in_pool) {
        let anonymous = mapping.path.is_empty();
        let slot = if mapping.path.ends_with(".cwasm")
            || (anonymous && !in_pool && matches!(mapping.perms.as_str(), "r-xp" | "r--p"))
        {
            &mut breakdown.wasm_code
        } else if in_pool || mapping.path.starts_with("/memfd:wasm-memory-image") {
            &mut breakdown.wasm_memory
        } else if !anonymous && mapping.path.starts_with('/') {
            &mut breakdown.code
        } else {
            &mut breakdown.heap
        };
        *slot += mapping.rss;
    }
    Ok(breakdown)
}

/// Polls `VmRSS` of a process every 10 ms and keeps the maximum.
pub struct PeakSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl PeakSampler {
    /// Starts polling `pid`.
    pub fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                if let Ok(mem) = proc_mem(pid) {
                    peak = peak.max(mem.rss);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        });
        Self { stop, thread }
    }

    /// Stops polling; the largest `VmRSS` seen.
    pub fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler thread")
    }
}

/// The median `VmRSS` of five samples 400 ms apart.
pub fn steady_rss(pid: u32) -> Result<u64> {
    let mut samples = Vec::new();
    for _ in 0..5 {
        samples.push(proc_mem(pid)?.rss);
        std::thread::sleep(Duration::from_millis(400));
    }
    samples.sort();
    Ok(samples[2])
}

/// Stops a child with SIGTERM, then SIGKILL after 20 s.
pub fn stop_child(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
