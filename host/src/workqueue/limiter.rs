//! [`RateLimiter`]: how long a key waits before it is retried, as client-go's
//! `DefaultControllerRateLimiter`: the longer of a per-key exponential failure backoff
//! ([`ExponentialBackoff`], `ItemExponentialFailureRateLimiter`) and an overall token bucket
//! ([`BucketLimiter`], `BucketRateLimiter` over `rate.Limiter`).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The limiter's settings; [`Default`] is client-go's `DefaultControllerRateLimiter`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimits {
    /// The first retry's delay (doubles with each further failure of the key).
    pub base: Duration,
    /// The longest delay of one key.
    pub max: Duration,
    /// Retries per second over all keys, on average.
    pub qps: f64,
    /// Retries allowed at once over all keys.
    pub burst: u32,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(5),
            max: Duration::from_secs(1000),
            qps: 10.0,
            burst: 100,
        }
    }
}

/// Per-key exponential backoff: the `n`th failure in a row of a key waits `base · 2ⁿ⁻¹`, at most
/// `max`.
#[derive(Debug, Clone)]
pub struct ExponentialBackoff<K> {
    base: Duration,
    max: Duration,
    failures: HashMap<K, u32>,
    /// The same counts, most first (ties in key order), for [`ExponentialBackoff::most_failing`].
    ranked: BTreeSet<(Reverse<u32>, K)>,
}

impl<K: Clone + Eq + Hash + Ord> ExponentialBackoff<K> {
    /// No key has failed yet.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: HashMap::new(),
            ranked: BTreeSet::new(),
        }
    }

    /// Counts a failure of `key` and returns its delay.
    pub fn when(&mut self, key: &K) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        let exponent = *failures;
        *failures = failures.saturating_add(1);
        let failures = *failures;
        if exponent > 0 {
            self.ranked.remove(&(Reverse(exponent), key.clone()));
        }
        self.ranked.insert((Reverse(failures), key.clone()));
        // In whole nanoseconds (client-go computes in float nanoseconds): no rounding, and past
        // 2⁶⁴ times the base the cap has long been reached.
        if exponent >= 64 {
            return self.max;
        }
        let delay = self.base.as_nanos().saturating_mul(1u128 << exponent);
        if delay >= self.max.as_nanos() {
            return self.max;
        }
        Duration::from_nanos(delay as u64)
    }

    /// How many failures of `key` were counted since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    /// Forgets `key`'s failures.
    pub fn forget(&mut self, key: &K) {
        if let Some((key, failures)) = self.failures.remove_entry(key) {
            self.ranked.remove(&(Reverse(failures), key));
        }
    }

    /// Keys with at least one failure counted.
    pub fn failing(&self) -> usize {
        self.failures.len()
    }

    /// Every key's failure count, to carry over to another queue.
    pub fn counts(&self) -> impl Iterator<Item = (&K, u32)> {
        self.failures.iter().map(|(k, n)| (k, *n))
    }

    /// Keys with failures counted and their counts, most first (ties in key order).
    pub fn most_failing(&self) -> impl Iterator<Item = (&K, u32)> {
        self.ranked.iter().map(|(Reverse(n), k)| (k, *n))
    }

    /// Gives back the room of keys no longer failing, down to `capacity`.
    pub fn shrink_to(&mut self, capacity: usize) {
        self.failures.shrink_to(capacity);
    }

    /// Sets `key`'s failure count (carried over from another queue).
    pub fn set_count(&mut self, key: K, failures: u32) {
        if failures == 0 {
            return;
        }
        if let Some(before) = self.failures.insert(key.clone(), failures) {
            self.ranked.remove(&(Reverse(before), key.clone()));
        }
        self.ranked.insert((Reverse(failures), key));
    }
}

/// A token bucket of `burst` tokens refilled at `qps` a second, reserving ahead as Go's
/// `rate.Limiter.Reserve` does: a key that finds the bucket empty waits for its own token.
#[derive(Debug, Clone)]
pub struct BucketLimiter {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl BucketLimiter {
    /// A full bucket.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: if qps > 0.0 { qps } else { f64::MIN_POSITIVE },
            burst,
            tokens: burst,
            last: None,
        }
    }

    /// Takes a token at `now`; returns how long until it is really available.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let refilled = match self.last {
            Some(last) => now.saturating_duration_since(last).as_secs_f64() * self.qps,
            None => 0.0,
        };
        self.tokens = (self.tokens + refilled).min(self.burst) - 1.0;
        self.last = Some(now.max(self.last.unwrap_or(now)));
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// The longer of the key's backoff and the bucket's wait.
#[derive(Debug, Clone)]
pub struct RateLimiter<K> {
    backoff: ExponentialBackoff<K>,
    bucket: BucketLimiter,
}

impl<K: Clone + Eq + Hash + Ord> RateLimiter<K> {
    /// A limiter with `limits`.
    pub fn new(limits: RateLimits) -> Self {
        Self {
            backoff: ExponentialBackoff::new(limits.base, limits.max),
            bucket: BucketLimiter::new(limits.qps, limits.burst),
        }
    }

    /// Counts a failure of `key` at `now` and returns how long it waits.
    pub fn when(&mut self, key: &K, now: Instant) -> Duration {
        let backoff = self.backoff.when(key);
        let bucket = self.bucket.reserve(now);
        backoff.max(bucket)
    }

    /// [`ExponentialBackoff::num_requeues`].
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.backoff.num_requeues(key)
    }

    /// [`ExponentialBackoff::forget`].
    pub fn forget(&mut self, key: &K) {
        self.backoff.forget(key);
    }

    /// The per-key backoff.
    pub fn backoff(&self) -> &ExponentialBackoff<K> {
        &self.backoff
    }

    /// The per-key backoff, to carry counts over.
    pub fn backoff_mut(&mut self) -> &mut ExponentialBackoff<K> {
        &mut self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap() {
        let mut backoff = ExponentialBackoff::new(ms(5), Duration::from_secs(1000));
        let delays: Vec<Duration> = (0..5).map(|_| backoff.when(&"a")).collect();
        assert_eq!(delays, [ms(5), ms(10), ms(20), ms(40), ms(80)]);
        assert_eq!(backoff.num_requeues(&"a"), 5);
        // 5 ms · 2¹⁸ = 1310.72 s > 1000 s: from the 19th failure on, the cap.
        for _ in 5..18 {
            backoff.when(&"a");
        }
        assert_eq!(backoff.when(&"a"), Duration::from_secs(1000));
        for _ in 0..2000 {
            assert_eq!(backoff.when(&"a"), Duration::from_secs(1000), "no overflow");
        }
    }

    #[test]
    fn backoff_is_per_key_and_forget_starts_over() {
        let mut backoff = ExponentialBackoff::new(ms(1), ms(100));
        assert_eq!(backoff.when(&"a"), ms(1));
        assert_eq!(backoff.when(&"a"), ms(2));
        assert_eq!(backoff.when(&"b"), ms(1), "another key has its own count");
        backoff.forget(&"a");
        assert_eq!(backoff.num_requeues(&"a"), 0);
        assert_eq!(backoff.when(&"a"), ms(1));
    }

    #[test]
    fn the_bucket_allows_the_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = BucketLimiter::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(start), Duration::ZERO);
        }
        assert_eq!(bucket.reserve(start), ms(100), "the 4th waits one token");
        assert_eq!(bucket.reserve(start), ms(200), "reservations queue up");
        // 300 ms later the bucket has refilled 3 tokens and owes 2: one is free.
        assert_eq!(bucket.reserve(start + ms(300)), Duration::ZERO);
        // A long pause refills at most the burst.
        let later = start + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(later), Duration::ZERO);
        }
        assert_eq!(bucket.reserve(later), ms(100));
    }

    #[test]
    fn the_limiter_takes_the_longer_of_backoff_and_bucket() {
        let now = Instant::now();
        let mut limiter = RateLimiter::new(RateLimits {
            base: ms(5),
            max: Duration::from_secs(1000),
            qps: 10.0,
            burst: 2,
        });
        assert_eq!(
            limiter.when(&"a", now),
            ms(5),
            "backoff, the bucket is full"
        );
        assert_eq!(limiter.when(&"b", now), ms(5));
        assert_eq!(limiter.when(&"c", now), ms(100), "the bucket is empty");
        assert_eq!(limiter.num_requeues(&"a"), 1);
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
    }

    #[test]
    fn defaults_are_client_gos() {
        let limits = RateLimits::default();
        assert_eq!(
            (limits.base, limits.max, limits.qps, limits.burst),
            (ms(5), Duration::from_secs(1000), 10.0, 100)
        );
    }
}
