//! [`Backoff`]: exponential pause for a plugin that keeps failing, so a broken plugin never
//! spins; reset by the first success.

use std::time::Duration;

/// Tracks consecutive failures of one plugin and the pause before its next event.
///
/// The first `tolerated` failures in a row cost nothing (one bad object should not slow the
/// others); after that each failure doubles the pause, from `initial` up to `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    tolerated: u32,
    initial: Duration,
    max: Duration,
    consecutive_failures: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(3, Duration::from_millis(100), Duration::from_secs(60))
    }
}

impl Backoff {
    /// A policy that tolerates `tolerated` failures in a row, then pauses from `initial` to `max`.
    pub fn new(tolerated: u32, initial: Duration, max: Duration) -> Self {
        Self {
            tolerated,
            initial,
            max,
            consecutive_failures: 0,
        }
    }

    /// Records a success: the next failure starts over.
    pub fn succeeded(&mut self) {
        self.consecutive_failures = 0;
    }

    /// Records a failure and returns how long to pause before the next event (zero while the
    /// failures are still tolerated).
    pub fn failed(&mut self) -> Duration {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let over = self.consecutive_failures.saturating_sub(self.tolerated);
        if over == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl(over - 1).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// Failures in a row so far.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_after_tolerated_failures_and_resets_on_success() {
        let mut b = Backoff::new(2, Duration::from_millis(10), Duration::from_millis(50));
        let pauses: Vec<u128> = (0..6).map(|_| b.failed().as_millis()).collect();
        assert_eq!(pauses, [0, 0, 10, 20, 40, 50]);
        assert_eq!(b.consecutive_failures(), 6);
        b.succeeded();
        assert_eq!(b.failed(), Duration::ZERO);
    }

    #[test]
    fn never_overflows() {
        let mut b = Backoff::new(0, Duration::from_secs(1), Duration::from_secs(60));
        for _ in 0..100 {
            assert!(b.failed() <= Duration::from_secs(60));
        }
    }
}
