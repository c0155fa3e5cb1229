//! [`Clock`]: the time a [`super::WorkQueue`] schedules by, injectable so that tests and replay
//! run on a [`VirtualClock`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now(&self) -> Instant;
}

/// The monotonic system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to; clones share the same time.
#[derive(Debug, Clone)]
pub struct VirtualClock {
    start: Instant,
    elapsed: Arc<Mutex<Duration>>,
}

impl Default for VirtualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl VirtualClock {
    /// A clock standing at its start.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            elapsed: Arc::default(),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        *self.elapsed.lock().expect("virtual clock lock poisoned") += by;
    }

    /// Moves the clock to `at` if that is later than now.
    pub fn advance_to(&self, at: Instant) {
        let mut elapsed = self.elapsed.lock().expect("virtual clock lock poisoned");
        *elapsed = (*elapsed).max(at.saturating_duration_since(self.start));
    }

    /// Time since the clock's start.
    pub fn elapsed(&self) -> Duration {
        *self.elapsed.lock().expect("virtual clock lock poisoned")
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Instant {
        self.start + self.elapsed()
    }
}
