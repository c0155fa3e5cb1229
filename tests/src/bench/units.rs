//! Units and percentiles, as the benchmark reports print them.

use std::time::Duration;

/// Bytes in a MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

/// The `q` quantile (0..=1) of sorted values, by nearest rank; zero for none.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// The median of `values` (of an even count, the upper one); panics on none.
pub fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// [`median`] of numbers, in `f64::total_cmp`'s order (a NaN sorts last).
pub fn median_f64(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// p50 and p99 of `values`.
pub fn p50_p99(mut values: Vec<Duration>) -> (Duration, Duration) {
    values.sort();
    (percentile(&values, 0.5), percentile(&values, 0.99))
}

/// `12.34 ms` below 10 ms, `123 ms` above.
pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// Whole MiB.
pub fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / MIB)
}

/// KiB with one decimal.
pub fn kib(bytes: f64) -> String {
    format!("{:.1} KiB", bytes / 1024.0)
}
