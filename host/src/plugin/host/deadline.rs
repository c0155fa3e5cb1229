//! [`CallDeadline`]: when a plugin's call must end.
//!
//! A call may run for its plugin's `limits.deadline`: its own code and the host calls it makes.
//! On a machine with more runnable threads than cores (a thousand plugins re-activated at once on
//! two) a call can pass that much wall-clock time without running for it, and a healthy plugin
//! would trap and lose its event for the machine's load. So once the wall-clock deadline passes,
//! the host reads how much CPU time the call's thread has used: if less than the limit, the call
//! was kept from running (or blocked in a host call) and gets the rest of its limit, up to
//! [`STARVED_CEILING`] times the limit of wall-clock time in all. A loop is stopped when it has
//! run for its limit, however loaded the machine; a wait on a clock or a pollable still ends at
//! the wall-clock deadline (`host/poll.rs`): waiting is not being kept from running.
//!
//! Reading a thread's CPU time is a system call (0.28 µs here, against 0.39 µs for a whole empty
//! call), so a call does not read it at its start: the thread's CPU time is *marked* at most every
//! [`REMARK_AFTER`] ([`mark`]), and the CPU time since the mark is what the call is charged. The
//! mark is at most that much older than the call's start, so a call is charged up to that much of
//! what ran before it on its thread: never less than it used. A call's start only reads the mark's
//! age; the ceiling is worked out once the wall-clock deadline has passed.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How many times its limit a call kept from running may take, in wall-clock time: the bound on a
/// call that leader election relies on (README, "Leader election").
const STARVED_CEILING: u32 = 10;

/// How long a thread's CPU-time mark serves the calls that start on it.
const REMARK_AFTER: Duration = Duration::from_millis(5);

/// Why a call must end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Overrun {
    /// It ran for its limit (or a wait reached the deadline, or the thread's CPU time could not
    /// be read).
    Limit,
    /// It was kept from running until [`STARVED_CEILING`] times its limit had passed.
    Ceiling,
}

impl std::fmt::Display for Overrun {
    /// What a trap's message adds: nothing for the usual overrun.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Limit => Ok(()),
            Self::Ceiling => write!(
                f,
                " (kept from running for {STARVED_CEILING} times the deadline: the node is overloaded)"
            ),
        }
    }
}

/// The deadline of one call: the wall-clock time it ends at, moved by [`CallDeadline::left`] when
/// the machine kept the call from running.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallDeadline {
    /// When the call ends, unless its thread's CPU time says it has not run for `limit` by then.
    at: Instant,
    /// The plugin's `limits.deadline`: the time the call may run.
    limit: Duration,
    /// When the call ends in any case; set when `at` first passes (until then `at` is the call's
    /// start, plus `limit`, plus any [`CallDeadline::extend`]).
    ceiling: Option<Instant>,
}

impl CallDeadline {
    /// The deadline of a call starting `now` that may run for `limit`.
    #[inline]
    pub(crate) fn start(limit: Duration, now: Instant) -> Self {
        mark(now);
        Self {
            at: now + limit,
            limit,
            ceiling: None,
        }
    }

    /// A deadline already passed (an instance between calls).
    pub(crate) fn expired(now: Instant) -> Self {
        Self {
            at: now,
            limit: Duration::ZERO,
            ceiling: None,
        }
    }

    /// When the call ends unless it is found not to have run for its limit by then.
    pub(crate) fn at(&self) -> Instant {
        self.at
    }

    /// Moves the deadline by `took`: time a host call spent on the call's behalf under a budget of
    /// its own (a write's, `limits.writeTimeout`).
    pub(crate) fn extend(&mut self, took: Duration) {
        self.at += took;
        if let Some(ceiling) = &mut self.ceiling {
            *ceiling += took;
        }
    }

    /// The time left at `now` (never zero), or why the call must end: it has run for its limit,
    /// or reached the ceiling. Past the wall-clock deadline, the thread's CPU time since the mark
    /// decides, and a call that ran for less gets the rest of its limit.
    pub(crate) fn left(&mut self, now: Instant) -> Result<Duration, Overrun> {
        if now < self.at {
            return Ok(self.at - now);
        }
        let limit = self.limit;
        let ceiling = *self
            .ceiling
            .get_or_insert_with(|| self.at + limit.saturating_mul(STARVED_CEILING - 1));
        let unused = cpu_since_mark()
            .and_then(|used| limit.checked_sub(used))
            .filter(|unused| !unused.is_zero())
            .ok_or(Overrun::Limit)?;
        if now >= ceiling {
            return Err(Overrun::Ceiling);
        }
        self.at = (now + unused).min(ceiling);
        Ok(self.at - now)
    }

    /// Why the call must end at `now`, if it must ([`CallDeadline::left`] without keeping what it
    /// found: past the wall-clock deadline each look reads the CPU time again).
    pub(crate) fn overrun(&self, now: Instant) -> Option<Overrun> {
        let mut deadline = *self;
        deadline.left(now).err()
    }
}

thread_local! {
    /// Until when this thread's mark serves, and the thread's CPU time when it was taken.
    static MARK: Cell<Option<(Instant, Duration)>> = const { Cell::new(None) };
}

/// Reads this thread's CPU time into its mark, unless the mark still serves at `now`.
#[inline]
fn mark(now: Instant) {
    if MARK
        .get()
        .is_none_or(|(serves_until, _)| now >= serves_until)
    {
        remark(now);
    }
}

#[cold]
#[inline(never)]
fn remark(now: Instant) {
    MARK.set(thread_cpu_time().map(|cpu| (now + REMARK_AFTER, cpu)));
}

/// This thread's CPU time since its mark; `None` without one (then nothing is given back).
fn cpu_since_mark() -> Option<Duration> {
    let (_, marked) = MARK.get()?;
    Some(thread_cpu_time()?.saturating_sub(marked))
}

/// The CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_time() -> Option<Duration> {
    super::clock::read(libc::clock_gettime, libc::CLOCK_THREAD_CPUTIME_ID)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Burns about `cpu` of this thread's CPU time.
    fn spin(cpu: Duration) {
        let start = thread_cpu_time().unwrap();
        while thread_cpu_time().unwrap() - start < cpu {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_call_that_waited_instead_of_running_gets_the_rest_of_its_limit() {
        let start = Instant::now();
        let mut deadline = CallDeadline::start(Duration::from_millis(50), start);
        std::thread::sleep(Duration::from_millis(80));
        let now = Instant::now();
        let left = deadline.left(now).expect("50 ms of CPU not used yet");
        assert!(left > Duration::from_millis(40), "{left:?}");
        assert_eq!(deadline.at(), now + left);
    }

    #[test]
    fn a_call_that_ran_for_its_limit_ends() {
        let mut deadline = CallDeadline::start(Duration::from_millis(20), Instant::now());
        spin(Duration::from_millis(25));
        assert_eq!(deadline.left(Instant::now()), Err(Overrun::Limit));
    }

    #[test]
    fn a_call_kept_from_running_ends_at_the_ceiling() {
        let start = Instant::now();
        let mut deadline = CallDeadline::start(Duration::from_millis(5), start);
        let ceiling = start + Duration::from_millis(5) * STARVED_CEILING;
        assert!(deadline.left(ceiling - Duration::from_millis(1)).is_ok());
        assert_eq!(deadline.left(ceiling), Err(Overrun::Ceiling));
    }

    #[test]
    fn a_deadline_extended_for_a_write_moves_its_ceiling_too() {
        let start = Instant::now();
        let mut deadline = CallDeadline::start(Duration::from_millis(5), start);
        deadline.extend(Duration::from_secs(1));
        assert_eq!(deadline.at(), start + Duration::from_millis(1005));
        // Past `at`, unstarved: the ceiling is set (1 s + 50 ms after the start) …
        assert!(deadline.left(start + Duration::from_millis(1010)).is_ok());
        // … and a second write moves it on.
        deadline.extend(Duration::from_secs(1));
        let ceiling = start + Duration::from_millis(2050);
        assert!(deadline.left(ceiling - Duration::from_millis(1)).is_ok());
        assert_eq!(deadline.left(ceiling), Err(Overrun::Ceiling));
    }

    #[test]
    fn an_expired_deadline_gives_no_time() {
        let expired = CallDeadline::expired(Instant::now());
        assert_eq!(expired.overrun(Instant::now()), Some(Overrun::Limit));
    }
}
