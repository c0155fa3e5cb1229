//! When an informer tries again after a watch failure, and how it notices a server come back.
//!
//! - **`410 Gone`** (the resourceVersion left the server's window): relist at once, as client-go
//!   does after "too old resource version"; the server has just answered, so the failure backoff
//!   starts over too. A 410 that follows another with no live event between (a 410 storm: the
//!   server expires every watch it is asked for) waits kube's [`DefaultBackoff`] instead.
//! - **The server not reached** (no HTTP answer: connection refused, reset or closed): the usual
//!   exponential wait, which a server that stays down keeps growing, but cut short when the
//!   factory's [`Reachability`] probe sees the server answer again after failing to reach it.
//! - **Any other failure** (the server answered with an error: 403, 429, 500, …): kube's
//!   [`DefaultBackoff`] (0.8 s doubling to 30 s, with jitter), reset only on proof of progress
//!   (a completed list, a live event).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event as WatchEvent};
use tokio::sync::watch;
use tokio::time::Instant;

use super::watch::WatchError;

/// How long after a `410 Gone` another one starts a new streak rather than continuing a storm
/// (kube's [`DefaultBackoff`] forgets its state after the same time).
const EXPIRY_STREAK_RESET: Duration = Duration::from_secs(120);

/// How often [`Reachability`] asks the server for its version while an informer waits for it.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// How long one probe may take before it counts as unanswered.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What to do before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Try again now.
    Now,
    /// Wait this long.
    For(Duration),
    /// Wait this long, or until the server is seen to answer again.
    UntilReachable(Duration),
}

/// The retry state of one informer.
#[derive(Default)]
pub(crate) struct RetryPolicy {
    failures: DefaultBackoff,
    expiries: DefaultBackoff,
    /// `410 Gone`s since the last live event, and when the last one came.
    expired_in_a_row: u32,
    last_expired: Option<Instant>,
}

impl RetryPolicy {
    /// Records a watcher event: a completed list or a live event is progress.
    pub(crate) fn progress<K>(&mut self, event: &WatchEvent<K>) {
        match event {
            WatchEvent::InitDone => self.failures.reset(),
            WatchEvent::Apply(_) | WatchEvent::Delete(_) => {
                self.failures.reset();
                self.expiries.reset();
                self.expired_in_a_row = 0;
            }
            WatchEvent::Init | WatchEvent::InitApply(_) => {}
        }
    }

    /// What to do after `error`.
    pub(crate) fn after(&mut self, error: &WatchError) -> Wait {
        let next = |backoff: &mut DefaultBackoff| backoff.next().unwrap_or(Duration::from_secs(30));
        if let WatchError::Expired { .. } = error {
            let now = Instant::now();
            if self
                .last_expired
                .is_some_and(|at| now.duration_since(at) >= EXPIRY_STREAK_RESET)
            {
                self.expired_in_a_row = 0;
            }
            self.last_expired = Some(now);
            self.expired_in_a_row += 1;
            self.failures.reset();
            return match self.expired_in_a_row {
                1 => Wait::Now,
                _ => Wait::For(next(&mut self.expiries)),
            };
        }
        if unreached(error.watcher_error()) {
            Wait::UntilReachable(next(&mut self.failures))
        } else {
            Wait::For(next(&mut self.failures))
        }
    }
}

/// Whether `error` means no HTTP answer came from the server (connection refused, reset or
/// closed, a read error on the stream).
fn unreached(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => unreached_client(e),
        _ => false,
    }
}

fn unreached_client(error: &kube::Error) -> bool {
    matches!(
        error,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_)
    )
}

/// One probe of the server: whether it answered (any HTTP status counts).
type Probe = Box<dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// Notices a server come back: while some informer of the factory waits after failing to reach
/// the server, one task asks the server for its version every [`PROBE_INTERVAL`] (a small
/// request that needs no storage), and when a probe is answered after one went unanswered it
/// wakes every waiting informer. A server that answers the probe all along wakes nobody, so a
/// failure only the watch meets (a proxy cutting long requests) still backs off.
pub(crate) struct Reachability {
    probe: Probe,
    /// Bumped each time the server answers again after the probe failed to reach it.
    returns: watch::Sender<u64>,
    probing: AtomicBool,
}

impl std::fmt::Debug for Reachability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reachability")
            .field("returns", &*self.returns.borrow())
            .finish_non_exhaustive()
    }
}

impl Reachability {
    /// Probes through `client` with `GET /version`.
    pub(crate) fn new(client: kube::Client) -> Self {
        Self::with_probe(move || {
            let client = client.clone();
            Box::pin(async move {
                // A server behind a black hole would hold the probe until the client's own
                // timeout: give up after a second and probe again.
                match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
                    Ok(Ok(_)) => true,
                    Ok(Err(error)) => !unreached_client(&error),
                    Err(_) => false,
                }
            })
        })
    }

    /// Probes with `probe`, which says whether the server answered.
    pub(crate) fn with_probe(
        probe: impl Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            probe: Box::new(probe),
            returns: watch::Sender::new(0),
            probing: AtomicBool::new(false),
        }
    }

    /// Waits `delay`, or less if the server is seen to answer again meanwhile; returns whether
    /// it was cut short.
    pub(crate) async fn wait(self: &Arc<Self>, delay: Duration) -> bool {
        let mut returns = self.returns.subscribe();
        if !self.probing.swap(true, Ordering::AcqRel) {
            tokio::spawn(self.clone().probe_while_waited_for());
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => false,
            changed = returns.changed() => changed.is_ok(),
        }
    }

    async fn probe_while_waited_for(self: Arc<Self>) {
        // Whether the last probe went unanswered; kept while informers retry between waits,
        // which is why the task lingers one idle interval before it stops.
        let mut unreached = false;
        let mut idle = 0;
        loop {
            if self.returns.receiver_count() == 0 {
                idle += 1;
                if idle > 1 {
                    self.probing.store(false, Ordering::Release);
                    // A waiter that came after the count was read found `probing` set: serve it.
                    if self.returns.receiver_count() == 0
                        || self.probing.swap(true, Ordering::AcqRel)
                    {
                        return;
                    }
                }
            } else {
                idle = 0;
                let answered = (self.probe)().await;
                if answered && unreached {
                    tracing::info!("API server answers again; retrying watches now");
                    self.returns.send_modify(|n| *n += 1);
                }
                unreached = !answered;
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;
    use crate::informer::InformerKey;

    fn key() -> InformerKey {
        InformerKey::new(
            kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
            true,
        )
    }

    fn status(code: u16) -> WatchError {
        let error = watcher::Error::WatchError(Box::new(kube::core::Status {
            code,
            ..Default::default()
        }));
        WatchError::new(&key(), error)
    }

    fn refused() -> WatchError {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let error = watcher::Error::WatchStartFailed(kube::Error::Service(Box::new(io)));
        WatchError::new(&key(), error)
    }

    fn delay(wait: Wait) -> Duration {
        match wait {
            Wait::Now => Duration::ZERO,
            Wait::For(d) | Wait::UntilReachable(d) => d,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_single_gone_relists_at_once_even_after_failures() {
        let mut retry = RetryPolicy::default();
        for _ in 0..4 {
            assert!(matches!(retry.after(&refused()), Wait::UntilReachable(_)));
        }
        assert_eq!(retry.after(&status(410)), Wait::Now);
        // The failure backoff started over: the server answered.
        assert!(delay(retry.after(&status(500))) < Duration::from_millis(1600));
    }

    #[tokio::test(start_paused = true)]
    async fn repeated_gones_without_a_live_event_back_off() {
        let mut retry = RetryPolicy::default();
        assert_eq!(retry.after(&status(410)), Wait::Now);
        retry.progress(&WatchEvent::<()>::Init);
        retry.progress(&WatchEvent::<()>::InitDone);
        let delays: Vec<Duration> = (0..5).map(|_| delay(retry.after(&status(410)))).collect();
        assert!(delays[0] >= Duration::from_millis(800), "{delays:?}");
        assert!(delays[4] >= Duration::from_millis(800 * 16), "{delays:?}");
        // A live event ends the storm.
        retry.progress(&WatchEvent::Apply(()));
        assert_eq!(retry.after(&status(410)), Wait::Now);
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_long_after_the_last_starts_a_new_streak() {
        let mut retry = RetryPolicy::default();
        assert_eq!(retry.after(&status(410)), Wait::Now);
        tokio::time::advance(EXPIRY_STREAK_RESET).await;
        assert_eq!(retry.after(&status(410)), Wait::Now);
    }

    #[tokio::test(start_paused = true)]
    async fn answered_failures_back_off_and_unreached_ones_wait_for_the_server() {
        let mut retry = RetryPolicy::default();
        let answered: Vec<Wait> = (0..5).map(|_| retry.after(&status(500))).collect();
        assert!(answered.iter().all(|w| matches!(w, Wait::For(_))));
        assert!(delay(answered[4]) >= Duration::from_millis(800 * 16));
        let mut retry = RetryPolicy::default();
        let unreached: Vec<Wait> = (0..5).map(|_| retry.after(&refused())).collect();
        assert!(
            unreached
                .iter()
                .all(|w| matches!(w, Wait::UntilReachable(_)))
        );
        assert!(delay(unreached[4]) >= Duration::from_millis(800 * 16));
    }

    /// A reachability probe answering from a script (the last answer repeats), counting probes.
    fn scripted(answers: &[bool]) -> (Arc<Reachability>, Arc<Mutex<u32>>) {
        let script = Arc::new(Mutex::new(answers.iter().copied().collect::<VecDeque<_>>()));
        let probes = Arc::new(Mutex::new(0));
        let counter = probes.clone();
        let reachability = Reachability::with_probe(move || {
            *counter.lock().unwrap() += 1;
            let mut script = script.lock().unwrap();
            let answer = if script.len() > 1 {
                script.pop_front().unwrap()
            } else {
                script[0]
            };
            Box::pin(async move { answer })
        });
        (Arc::new(reachability), probes)
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_coming_back_ends_the_wait() {
        let (reachability, probes) = scripted(&[false, false, true]);
        let started = Instant::now();
        assert!(reachability.wait(Duration::from_secs(30)).await);
        assert_eq!(*probes.lock().unwrap(), 3);
        assert_eq!(started.elapsed(), 2 * PROBE_INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_stays_down_or_always_answers_leaves_the_backoff_alone() {
        for answer in [false, true] {
            let (reachability, probes) = scripted(&[answer]);
            let started = Instant::now();
            assert!(!reachability.wait(Duration::from_secs(8)).await);
            assert_eq!(started.elapsed(), Duration::from_secs(8));
            assert!(*probes.lock().unwrap() >= 8, "answer {answer}");
            // Once nobody waits, probing stops.
            tokio::time::sleep(4 * PROBE_INTERVAL).await;
            let after = *probes.lock().unwrap();
            tokio::time::sleep(10 * PROBE_INTERVAL).await;
            assert_eq!(*probes.lock().unwrap(), after, "answer {answer}");
        }
    }
}
