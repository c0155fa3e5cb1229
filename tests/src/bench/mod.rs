//! What the benchmarks against the real kube-apiserver share (`tests/benches/informer.rs`,
//! `tests/benches/density.rs`): the realistic Pods and their fast creation ([`pods`]), a
//! process's memory, threads and CPU time from `/proc` ([`proc`]), `wasmformer run` as a child
//! process ([`host`]), the informer peers that print one JSON line per event ([`peer`]: the
//! client-go `informer` program of the harness, the kube-rs one of the density bench), and the
//! units the reports print ([`units`]).

pub mod host;
pub mod peer;
pub mod pods;
pub mod proc;
pub mod units;
