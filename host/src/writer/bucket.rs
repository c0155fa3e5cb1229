//! [`TokenBucket`]: client-go's QPS/burst rate limit for one plugin's writes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Allows `burst` writes at once, refilled at `qps` per second.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(qps: u32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: f64::from(qps.max(1)),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes a token, reserving one ahead if none is left; returns how long the caller must wait
    /// before writing, or `None` (nothing taken) if that wait would exceed `max_wait`.
    pub fn reserve(&self, max_wait: Duration) -> Option<Duration> {
        let mut state = self.state.lock().expect("token bucket lock");
        let now = Instant::now();
        let (tokens, at) = *state;
        let tokens = (tokens + now.duration_since(at).as_secs_f64() * self.qps).min(self.burst);
        let wait = if tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - tokens) / self.qps)
        };
        if wait > max_wait {
            *state = (tokens, now);
            return None;
        }
        *state = (tokens - 1.0, now);
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_qps() {
        let bucket = TokenBucket::new(10, 3);
        for _ in 0..3 {
            assert_eq!(bucket.reserve(Duration::ZERO), Some(Duration::ZERO));
        }
        assert_eq!(bucket.reserve(Duration::ZERO), None, "the burst is spent");
        let wait = bucket
            .reserve(Duration::from_secs(1))
            .expect("a token within a second");
        assert!(
            wait > Duration::from_millis(50) && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        let next = bucket.reserve(Duration::from_secs(1)).unwrap();
        assert!(
            next > wait,
            "reservations queue up: {next:?} after {wait:?}"
        );
    }
}
