//! An in-process, in-memory server that speaks enough of the Kubernetes API for kube-rs,
//! client-go and kubectl to treat it as an API server: discovery, CRUD with resourceVersion
//! semantics, selectors, paginated consistent lists, watches with bookmarks and streaming
//! lists, CRDs, plus fault injection, a request log, and a workload simulator.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use wasmformer_devcluster::{DevCluster, DevClusterConfig};
//!
//! let dev = DevCluster::start(DevClusterConfig::default()).await?;
//! dev.write_kubeconfig("/tmp/wasmformer-dev.kubeconfig")?;
//! let client = dev.client()?;
//! // ... run informers against `client`, then:
//! dev.faults().close_watches();
//! dev.shutdown().await?;
//! # Ok(()) }
//! ```

mod cluster;
mod control;
pub mod controllers;
mod convert;
pub mod discovery;
pub mod faults;
mod handlers;
pub mod kubeconfig;
mod list;
pub mod openapi;
mod openapi_proto;
pub mod ownership;
pub mod patch;
pub mod protobuf;
pub mod request_log;
pub mod resources;
pub mod reviews;
mod routes;
mod scale;
pub mod selectors;
pub mod simulate;
pub mod status;
pub mod store;
mod table;
mod view;
mod watch;

pub use cluster::{DevCluster, DevClusterConfig, Error, Result};
pub use controllers::ControllerConfig;
pub use faults::{Failure, Faults, RequestFilter};
pub use request_log::{RequestLog, RequestRecord, Verb};
pub use resources::{Registry, ResourceId, ResourceType};
pub use store::{Deletion, EventKind, ObjectKey, Part, Preconditions, Propagation, Store};
