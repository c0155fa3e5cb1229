//! The standard process metrics of Prometheus client libraries, read from `/proc/self` at scrape
//! time (Linux; elsewhere they are absent): `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_cpu_seconds_total`, `process_open_fds`,
//! `process_threads`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// What `/proc/self` says.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProcessSample {
    /// Resident set size.
    pub resident_bytes: Option<u64>,
    /// Virtual memory size.
    pub virtual_bytes: Option<u64>,
    /// User and system CPU time.
    pub cpu_seconds: Option<f64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// Threads.
    pub threads: Option<u64>,
}

impl ProcessSample {
    /// Reads `/proc/self`; what cannot be read is `None`.
    pub fn read() -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |field: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(field))?;
            line[field.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
                .map(|k| k * 1024)
        };
        let threads = status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok());
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as u64);
        Self {
            resident_bytes: kib("VmRSS:"),
            virtual_bytes: kib("VmSize:"),
            cpu_seconds: cpu_seconds(),
            open_fds,
            threads,
        }
    }
}

/// utime + stime from `/proc/self/stat` (fields 14 and 15, after the parenthesised command).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_comm = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions; it only reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| ticks as f64 / per_second as f64)
}

#[derive(Debug)]
pub(super) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sample = ProcessSample::read();
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                sample.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                sample.virtual_bytes,
            ),
            ("process_open_fds", "Open file descriptors", sample.open_fds),
            ("process_threads", "OS threads", sample.threads),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let metric = ConstGauge::new(value as i64);
                metric.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
            }
        }
        if let Some(seconds) = sample.cpu_seconds {
            let metric = ConstCounter::new(seconds);
            metric.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent in seconds",
                None,
                MetricType::Counter,
            )?)?;
        }
        Ok(())
    }
}
