//! The work queue of keys a reconciler drains, with client-go's semantics (`util/workqueue`),
//! independent of wasm and of any cluster:
//!
//! - [`WorkQueue`]: a deduplicating queue of keys with a dirty and a processing set (a key queued
//!   many times while it waits is handed out once; a key is never handed out twice before
//!   [`WorkQueue::done`]; a key added while it is processed is handed out again after `done`),
//!   keys scheduled for later ([`WorkQueue::add_after`]) and rate-limited re-adds
//!   ([`WorkQueue::add_rate_limited`], [`WorkQueue::forget`], [`WorkQueue::num_requeues`]).
//! - [`RateLimiter`]: client-go's `DefaultControllerRateLimiter`, the max of a per-key exponential
//!   failure backoff (5 ms doubling to 1000 s) and an overall token bucket (10 QPS, burst 100).
//! - [`Clock`]: where the queue reads the time; [`SystemClock`] live, [`VirtualClock`] for tests
//!   and replay (advanced by hand, so a backoff of 1000 s takes no time).

mod clock;
mod limiter;
mod queue;

pub use clock::{Clock, SystemClock, VirtualClock};
pub use limiter::{BucketLimiter, ExponentialBackoff, RateLimiter, RateLimits};
pub use queue::{QueueStats, WorkQueue};
