//! The runtime benchmark's small timing harness: warm up, size batches to about
//! [`TARGET_BATCH`], time many batches with `Instant`, and report statistics of the batches'
//! ns/op. [`measure_pair`] times two operations in alternating batches, so that a ratio or a
//! difference between them is not skewed by the machine's load changing between the two.

use std::time::{Duration, Instant};

/// Warm-up time per benchmark, also used to size the batches.
const WARMUP: Duration = Duration::from_millis(300);
/// Aimed-at duration of one timed batch: short, so that most batches run without being preempted
/// on a shared machine and the median shows the uncontended cost.
const TARGET_BATCH: Duration = Duration::from_micros(200);
/// Timed batches are taken until this much time has passed (and at least `MIN_BATCHES`).
const MEASURE: Duration = Duration::from_secs(2);
const MIN_BATCHES: usize = 15;
const MAX_BATCHES: usize = 5000;

/// Statistics of many samples (ns per operation, or a ratio).
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub min: f64,
    pub q25: f64,
    pub median: f64,
    pub q75: f64,
    pub p99: f64,
    /// How many samples (batches).
    pub batches: usize,
    /// Operations per batch.
    pub per_batch: u64,
}

impl Stats {
    fn of(mut samples: Vec<f64>, per_batch: u64) -> Self {
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Self {
            min: at(0.0),
            q25: at(0.25),
            median: at(0.5),
            q75: at(0.75),
            p99: at(0.99),
            batches: samples.len(),
            per_batch,
        }
    }
}

/// Two operations `a` and `b` timed in alternating batches: statistics of the per-pair `a / b`
/// and `a − b` (ns per operation).
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    pub ratio: Stats,
    pub difference: Stats,
}

/// `WASMFORMER_BENCH_ITERATIONS=N`: run each benchmark's operation exactly `N` times, once, with
/// no warm-up (for profilers such as `valgrind --tool=callgrind`, where time means nothing).
/// [`measure_pair`] ignores it.
fn fixed_iterations() -> Option<u64> {
    std::env::var("WASMFORMER_BENCH_ITERATIONS")
        .ok()
        .map(|n| n.parse().expect("WASMFORMER_BENCH_ITERATIONS is a number"))
}

/// Times `op`, one operation per call.
pub fn measure(mut op: impl FnMut()) -> Stats {
    measure_batches(|iters| timed(&mut op, iters))
}

/// Times `batch(iters)`, which runs `iters` operations and returns how long they took (so that
/// per-batch setup and teardown can stay outside the timing).
pub fn measure_batches(mut batch: impl FnMut(u64) -> Duration) -> Stats {
    if let Some(iters) = fixed_iterations() {
        return Stats::of(vec![per_op(batch(iters), iters)], iters);
    }
    let iters = calibrate(&mut batch);
    let mut samples = Vec::new();
    let measuring = Instant::now();
    while samples.len() < MAX_BATCHES
        && (samples.len() < MIN_BATCHES || measuring.elapsed() < MEASURE)
    {
        samples.push(per_op(batch(iters), iters));
    }
    Stats::of(samples, iters)
}

/// Times `a` and `b` in alternating batches (see [`Pair`]).
pub fn measure_pair(mut a: impl FnMut(), mut b: impl FnMut()) -> Pair {
    let iters_a = calibrate(&mut |n| timed(&mut a, n));
    let iters_b = calibrate(&mut |n| timed(&mut b, n));
    let (mut ratios, mut differences) = (Vec::new(), Vec::new());
    let measuring = Instant::now();
    while ratios.len() < MAX_BATCHES
        && (ratios.len() < MIN_BATCHES || measuring.elapsed() < 2 * MEASURE)
    {
        let time_a = per_op(timed(&mut a, iters_a), iters_a);
        let time_b = per_op(timed(&mut b, iters_b), iters_b);
        ratios.push(time_a / time_b);
        differences.push(time_a - time_b);
    }
    Pair {
        ratio: Stats::of(ratios, iters_a),
        difference: Stats::of(differences, iters_a),
    }
}

/// Warms up, doubling the batch until it takes about [`TARGET_BATCH`], and returns the batch size
/// the fastest warm-up batch long enough to time suggests (a preempted one would suggest too few).
fn calibrate(batch: &mut impl FnMut(u64) -> Duration) -> u64 {
    let started = Instant::now();
    let mut iters = 1u64;
    let mut fastest = Duration::MAX;
    while started.elapsed() < WARMUP {
        let took = batch(iters);
        if took >= TARGET_BATCH / 4 || iters == 1 {
            fastest = fastest.min(took / iters as u32);
        }
        if took < TARGET_BATCH / 2 {
            iters *= 2;
        }
    }
    (TARGET_BATCH.as_nanos() / fastest.as_nanos().max(1)).clamp(1, 1 << 24) as u64
}

fn timed(op: &mut impl FnMut(), iters: u64) -> Duration {
    let t = Instant::now();
    for _ in 0..iters {
        op();
    }
    t.elapsed()
}

fn per_op(took: Duration, iters: u64) -> f64 {
    took.as_nanos() as f64 / iters as f64
}
