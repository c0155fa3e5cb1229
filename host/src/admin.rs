//! The admin endpoint: `/healthz`, `/readyz` (every plugin synced), `/status` (plugins and
//! informers as JSON).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use serde::Serialize;

use crate::dispatch::StatusReport;
use crate::runtime::Runtime;

/// What `/status` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostStatus {
    /// Every plugin.
    pub plugins: Vec<StatusReport>,
    /// Every running informer: resource, namespace, synced, last error, relists.
    pub informers: Vec<serde_json::Value>,
}

/// Collects the host's status.
pub async fn host_status(runtime: &Runtime) -> HostStatus {
    let informers = runtime
        .informers()
        .statuses()
        .into_iter()
        .map(|(key, status)| serde_json::json!({ "informer": key.to_string(), "status": format!("{status:?}") }))
        .collect();
    HostStatus { plugins: runtime.statuses().await, informers }
}

/// Serves the admin endpoint on `addr` until the task is dropped; returns the bound address.
pub async fn serve(addr: SocketAddr, runtime: Arc<Runtime>) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .with_state(runtime);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "admin endpoint stopped");
        }
    });
    tracing::info!(admin.address = %bound, "admin endpoint listening");
    Ok((bound, task))
}

async fn readyz(State(runtime): State<Arc<Runtime>>) -> impl IntoResponse {
    if runtime.is_synced().await { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "plugins not synced yet") }
}

async fn status(State(runtime): State<Arc<Runtime>>) -> Json<HostStatus> {
    Json(host_status(&runtime).await)
}
