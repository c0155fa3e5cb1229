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
    /// The pooling allocator's reservations (mappings of at least 1 GiB: instance data and
    /// tables) and its used memory slots (the accessible pages right below each slot's
    /// reservation, the copy-on-write memory images included): wasm linear memories.
    pub wasm_memory: u64,
    /// The compiled plugins: wasmtime's copies of their code and read-only data (anonymous
    /// executable or read-only mappings), or `.cwasm` files where mapped.
    pub wasm_code: u64,
    /// The executable and shared libraries.
    pub code: u64,
}

/// One mapping of `/proc/<pid>/smaps`.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// `r-xp` and the like.
    pub perms: String,
    /// The file mapped, or `[heap]` and the like, or empty.
    pub path: String,
    /// Resident bytes.
    pub rss: u64,
}

/// The mappings of `pid`, in address order.
pub fn mappings(pid: u32) -> Result<Vec<Mapping>> {
    Ok(mappings_of(&std::fs::read_to_string(format!(
        "/proc/{pid}/smaps"
    ))?))
}

/// The RSS of `pid` by kind of mapping.
pub fn smaps_breakdown(pid: u32) -> Result<Breakdown> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    Ok(breakdown_of(&smaps))
}

/// Resident bytes of `pid`'s mappings of the file `path` (each of its mappings, all summed).
pub fn file_rss(pid: u32, path: &std::path::Path) -> Result<u64> {
    let path = path.to_string_lossy();
    Ok(mappings(pid)?
        .iter()
        .filter(|m| m.path == path)
        .map(|m| m.rss)
        .sum())
}

/// The mappings of a `/proc/<pid>/smaps` text, in address order.
fn mappings_of(smaps: &str) -> Vec<Mapping> {
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
    mappings
}

/// The RSS of the mappings of a `/proc/<pid>/smaps` text by kind.
fn breakdown_of(smaps: &str) -> Breakdown {
    let mappings = mappings_of(smaps);
    // wasmtime's pooling allocator reserves each slot's address space at once; a used memory
    // slot is its accessible pages (anonymous read-write, with the memory image mapped at the
    // start) right below the rest of its reservation (inaccessible, at least 1 GiB). A glibc
    // arena starts with its used pages and ends with its reserve: one right above or below a
    // reservation is not taken for a slot (unless it has grown to its full 64 MiB).
    let image = |m: &Mapping| m.path.starts_with("/memfd:wasm-memory-image");
    let big = |m: &Mapping| m.end - m.start >= 1 << 30;
    let mut in_pool: Vec<bool> = mappings.iter().map(|m| big(m) || image(m)).collect();
    for i in 0..mappings.len() {
        if !(big(&mappings[i]) && mappings[i].perms == "---p") {
            continue;
        }
        let mut j = i;
        while j > 0
            && mappings[j - 1].end == mappings[j].start
            && !big(&mappings[j - 1])
            && (image(&mappings[j - 1])
                || (mappings[j - 1].path.is_empty() && mappings[j - 1].perms == "rw-p"))
        {
            in_pool[j - 1] = true;
            j -= 1;
        }
    }
    let mut breakdown = Breakdown::default();
    for (mapping, in_pool) in mappings.iter().zip(in_pool) {
        let anonymous = mapping.path.is_empty();
        let slot = if mapping.path.ends_with(".cwasm")
            || (anonymous && !in_pool && matches!(mapping.perms.as_str(), "r-xp" | "r--p"))
        {
            &mut breakdown.wasm_code
        } else if in_pool {
            &mut breakdown.wasm_memory
        } else if !anonymous && mapping.path.starts_with('/') {
            &mut breakdown.code
        } else {
            &mut breakdown.heap
        };
        *slot += mapping.rss;
    }
    breakdown
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

/// The 1, 5 and 15 minute load averages of `/proc/loadavg`, as `2.01 1.72 2.54` (empty where it
/// cannot be read): benchmarks record it after each phase, the machine being shared.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A benchmark report's closing lines: the load average after each `(phase, load)`, then each
/// note.
pub fn print_loads_and_notes(loads: &[(String, String)], notes: &[String]) {
    let loads: Vec<String> = loads
        .iter()
        .map(|(phase, load)| format!("{phase}: {load}"))
        .collect();
    println!(
        "\nLoad average (1, 5, 15 min) after each phase — {}.",
        loads.join("; ")
    );
    for note in notes {
        println!("\nNote: {note}.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One mapping of an smaps text: `start` and `size` in KiB, its RSS in KiB.
    fn mapping(start: u64, size: u64, perms: &str, path: &str, rss: u64) -> String {
        format!(
            "{:x}-{:x} {perms} 00000000 00:00 0 {path}\nSize: {size} kB\nRss: {rss} kB\n",
            start * 1024,
            (start + size) * 1024
        )
    }

    #[test]
    fn wasm_slots_code_and_arenas_are_told_apart() {
        const GIB: u64 = 1 << 20;
        let smaps = [
            // A thread stack and its guard page.
            mapping(0, 4, "---p", "", 0),
            mapping(4, 2048, "rw-p", "", 16),
            // The pool: a slot (stack pages, memory image, heap pages, reserve) ...
            mapping(GIB, 32_768, "---p", "", 0),
            mapping(GIB + 32_768, 1024, "rw-p", "", 4),
            mapping(
                GIB + 33_792,
                36,
                "rw-p",
                "/memfd:wasm-memory-image (deleted)",
                36,
            ),
            mapping(GIB + 33_828, 28, "rw-p", "", 8),
            mapping(GIB + 33_856, 4 * GIB, "---p", "", 0),
            // ... then a glibc arena right above the reservation: the cache.
            mapping(5 * GIB + 33_856, 30_000, "rw-p", "", 30_000),
            mapping(5 * GIB + 63_856, 35_000, "---p", "", 0),
            // A compiled plugin: code and read-only data.
            mapping(8 * GIB, 300, "r-xp", "", 300),
            mapping(8 * GIB + 300, 216, "r--p", "", 216),
            // The executable.
            mapping(9 * GIB, 20_000, "r-xp", "/usr/bin/wasmformer", 20_000),
        ]
        .concat();
        let b = breakdown_of(&smaps);
        assert_eq!(b.wasm_memory, (4 + 36 + 8) * 1024);
        assert_eq!(b.heap, (16 + 30_000) * 1024);
        assert_eq!(b.wasm_code, (300 + 216) * 1024);
        assert_eq!(b.code, 20_000 * 1024);
    }
}
