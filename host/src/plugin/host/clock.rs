//! [`certainly_before`]: whether a call's deadline is still ahead, read from the coarse monotonic
//! clock; and [`read`], which reads any of the OS's clocks (the deadline reads a thread's CPU
//! time with it). Every host call checks its call's deadline (`HostState::check_deadline`); a
//! full clock read (`Instant::now()`, `CLOCK_MONOTONIC`) took 22 ns here, 3% of what a
//! `lister.get` costs, where `CLOCK_MONOTONIC_COARSE` (the time of the kernel's last tick, read
//! from the vDSO) took 5. The coarse time trails the real one by less than a tick (4 ms here), so
//! a deadline more than two ticks ahead of it is certainly ahead; only one closer takes the full
//! read. The check is as exact as before unless the kernel's coarse time falls more than two ticks
//! behind (a stalled timekeeping CPU), when a host call could pass its deadline by that much more.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Whether `deadline` is certainly later than now, by the coarse clock alone. `false` means
/// "not certain": ask `Instant::now()`.
pub(crate) fn certainly_before(deadline: Instant) -> bool {
    coarse::certainly_before(deadline)
}

/// `clock_gettime` or `clock_getres` of `clock`. Through glibc, which finds the vDSO: rustix's own
/// lookup of it crashes under valgrind, which the benchmarks' instruction counts use.
pub(super) fn read(
    call: unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int,
    clock: libc::clockid_t,
) -> Option<Duration> {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both functions write one `timespec` through the pointer, a local one here.
    let ok = unsafe { call(clock, &mut time) } == 0;
    ok.then(|| Duration::new(time.tv_sec as u64, time.tv_nsec as u32))
}

#[cfg(target_os = "linux")]
mod coarse {
    use super::*;

    /// A raw `CLOCK_MONOTONIC` time read just before an `Instant`, so that `instant`'s raw time
    /// is no earlier than `monotonic` (deadlines converted with it come out early, never late),
    /// and two ticks of the coarse clock.
    struct Base {
        monotonic: Duration,
        instant: Instant,
        two_ticks: Duration,
    }

    /// The base, `None` if a clock could not be read (then nothing is certain).
    fn base() -> Option<&'static Base> {
        static BASE: OnceLock<Option<Base>> = OnceLock::new();
        BASE.get_or_init(|| {
            let monotonic = read(libc::clock_gettime, libc::CLOCK_MONOTONIC)?;
            Some(Base {
                monotonic,
                instant: Instant::now(),
                two_ticks: 2 * read(libc::clock_getres, libc::CLOCK_MONOTONIC_COARSE)?,
            })
        })
        .as_ref()
    }

    pub(super) fn certainly_before(deadline: Instant) -> bool {
        let Some(base) = base() else {
            return false;
        };
        let Some(ahead) = deadline.checked_duration_since(base.instant) else {
            return false;
        };
        read(libc::clock_gettime, libc::CLOCK_MONOTONIC_COARSE)
            .is_some_and(|coarse| coarse + base.two_ticks < base.monotonic + ahead)
    }
}

#[cfg(not(target_os = "linux"))]
mod coarse {
    use super::*;

    pub(super) fn certainly_before(_deadline: Instant) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_passed_or_within_two_ticks_is_never_certain() {
        let now = Instant::now();
        assert!(!certainly_before(now));
        assert!(!certainly_before(now - Duration::from_millis(1)));
        assert!(!certainly_before(
            Instant::now() + Duration::from_micros(100)
        ));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_deadline_a_second_ahead_is_certain() {
        assert!(certainly_before(Instant::now() + Duration::from_secs(1)));
    }
}
