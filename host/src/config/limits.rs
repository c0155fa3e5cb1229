//! [`Limits`]: what one plugin instance may use per call (`limits:` in a plugin's config). The
//! sandbox in [`crate::plugin`] enforces them; the type lives here so the config depends on
//! nothing of ours.

use std::time::Duration;

use serde::Deserialize;

/// Per-plugin resource limits. Every field has a default; the config names them as shown.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Limits {
    /// Wall-clock time one handler call may take, host calls included (`deadline: 100ms`).
    #[serde(with = "humantime_serde")]
    pub deadline: Duration,
    /// Linear memory one instance may grow to, in bytes (`memoryBytes: 67108864`, 64 MiB).
    pub memory_bytes: usize,
    /// Log and stdout/stderr bytes one call may write before the rest is dropped and counted
    /// (`logBytesPerCall: 65536`).
    pub log_bytes_per_call: usize,
    /// Writes one call may make; past it each write answers `invalid` (`writesPerCall: 1000`).
    pub writes_per_call: usize,
    /// The largest manifest or patch body a write may carry, in bytes (`manifestBytes: 1048576`).
    pub manifest_bytes: usize,
    /// Sustained writes per second, client-go's QPS (`writeQps: 20`).
    pub write_qps: u32,
    /// Writes allowed in a burst before `writeQps` applies (`writeBurst: 50`).
    pub write_burst: u32,
    /// How long one write may take, rate-limit wait included; not counted against `deadline`
    /// (`writeTimeout: 10s`).
    #[serde(with = "humantime_serde")]
    pub write_timeout: Duration,
    /// The largest state a plugin that exports `state` may keep across unloading and hot swap,
    /// in bytes (`stateBytes: 16777216`, 16 MiB); a larger one is refused and reported.
    pub state_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_millis(100),
            memory_bytes: 64 << 20,
            log_bytes_per_call: 64 << 10,
            writes_per_call: 1000,
            manifest_bytes: 1 << 20,
            write_qps: 20,
            write_burst: 50,
            write_timeout: Duration::from_secs(10),
            state_bytes: 16 << 20,
        }
    }
}
