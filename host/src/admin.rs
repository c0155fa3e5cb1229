//! The admin endpoint: `/` (a status page over `/status`, `admin/status.html`), `/healthz`, `/readyz` (every plugin synced), `/status` (plugins and
//! informers as JSON), and `POST /reload[?plugin=NAME]`, which requires the bearer token from
//! `host.adminTokenFile`; `/metrics` (Prometheus text, or OpenMetrics when the scraper asks).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json};
use axum::routing::{get, post};
use serde::Serialize;

use crate::dispatch::{StatusReport, TimedError, rfc3339};
use crate::informer::{InformerKey, InformerStatus, ListEncoding, ListStrategy};
use crate::runtime::Runtime;

/// What `/status` (and `wasmformer status --json`) answers. Every key is camelCase; the README's
/// "Machine-readable output" documents each field.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostStatus {
    /// Every plugin, failed ones included, in name order.
    pub plugins: Vec<StatusReport>,
    /// Every running informer.
    pub informers: Vec<InformerReport>,
    /// Whether this replica leads, and who holds the Lease.
    pub leadership: crate::runtime::LeadershipReport,
}

/// One running informer, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InformerReport {
    /// The resource: `pods`, `deployments.apps`.
    pub resource: String,
    /// `v1`, `apps/v1`.
    pub api_version: String,
    /// `Pod`.
    pub kind: String,
    /// The namespace watched; `null`: all namespaces (or a cluster-scoped resource).
    pub namespace: Option<String>,
    /// The label selector sent to the server.
    pub label_selector: Option<String>,
    /// The field selector sent to the server.
    pub field_selector: Option<String>,
    /// Whether it watches metadata only.
    pub metadata_only: bool,
    /// Whether the first list has completed.
    pub synced: bool,
    /// When it completed (RFC 3339).
    pub synced_at: Option<String>,
    /// Objects in its cache.
    pub objects: usize,
    /// Plugins subscribed to it.
    pub subscribers: usize,
    /// Objects received (listed or watched).
    pub events: u64,
    /// Lists after the first (410 Gone, a restarted streaming list).
    pub relists: u64,
    /// Watch failures.
    pub errors: u64,
    /// Lists started, the first included.
    pub lists: u64,
    /// Objects refused: of another kind than the informer's, over `host.maxObjectBytes`, or not
    /// cacheable.
    pub rejected: u64,
    /// Watch events that could not be decoded (each restarted the watch).
    pub undecodable: u64,
    /// The most recent watch failure (kept after recovery).
    pub last_error: Option<TimedError>,
    /// How the initial content is fetched: `list` or `streaming` (`null` before the first
    /// watch).
    pub list_strategy: Option<ListStrategy>,
    /// How the last LIST page came: `protobuf` or `json` (`null` before the first page; see
    /// `host.listEncoding`).
    pub list_encoding: Option<ListEncoding>,
}

impl InformerReport {
    /// The report of the informer `key` in state `status`.
    pub fn new(key: &InformerKey, status: InformerStatus) -> Self {
        Self {
            resource: key.resource_name(),
            api_version: key.resource.api_version.clone(),
            kind: key.resource.kind.clone(),
            namespace: key.namespace.clone(),
            label_selector: key.label_selector.clone(),
            field_selector: key.field_selector.clone(),
            metadata_only: key.metadata_only,
            synced: status.synced,
            synced_at: status.synced_at.map(rfc3339),
            objects: status.objects,
            subscribers: status.subscribers,
            events: status.events,
            relists: status.relists,
            errors: status.errors,
            lists: status.lists,
            rejected: status.rejected,
            undecodable: status.undecodable,
            last_error: status.last_error.map(|e| TimedError::new(e.at, e.message)),
            list_strategy: status.list_strategy,
            list_encoding: status.list_encoding,
        }
    }
}

/// Collects the host's status.
pub async fn host_status(runtime: &Runtime) -> HostStatus {
    let informers = runtime
        .informers()
        .statuses()
        .into_iter()
        .map(|(key, status)| InformerReport::new(&key, status))
        .collect();
    HostStatus {
        plugins: runtime.statuses().await,
        informers,
        leadership: runtime.leadership(),
    }
}

#[derive(Clone)]
struct Admin {
    runtime: Arc<Runtime>,
    token: Option<Arc<str>>,
}

/// Serves the admin endpoint on `addr`; `token` guards `POST /reload` (none: reload refused).
/// Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    runtime: Arc<Runtime>,
    token: Option<String>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let state = Admin {
        runtime,
        token: token.map(|t| t.trim().into()),
    };
    let app = Router::new()
        .route(
            "/",
            get(|| async { axum::response::Html(include_str!("admin/status.html")) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/reload", post(reload))
        .with_state(state);
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

async fn readyz(State(admin): State<Admin>) -> impl IntoResponse {
    if admin.runtime.is_synced().await {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "plugins not synced yet")
    }
}

async fn metrics(State(admin): State<Admin>, headers: HeaderMap) -> axum::response::Response {
    let accept = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let format = crate::metrics::Format::from_accept(accept);
    (
        [(axum::http::header::CONTENT_TYPE, format.content_type())],
        admin.runtime.metrics().encode(format),
    )
        .into_response()
}

async fn status(State(admin): State<Admin>) -> Json<HostStatus> {
    Json(host_status(&admin.runtime).await)
}

#[derive(serde::Deserialize)]
struct ReloadQuery {
    plugin: Option<String>,
}

async fn reload(
    State(admin): State<Admin>,
    headers: HeaderMap,
    Query(query): Query<ReloadQuery>,
) -> axum::response::Response {
    let Some(token) = &admin.token else {
        tracing::warn!("reload over HTTP refused: no host.adminTokenFile configured");
        return (
            StatusCode::FORBIDDEN,
            "reload over HTTP is disabled: set host.adminTokenFile\n",
        )
            .into_response();
    };
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented.map(str::trim) != Some(&**token) {
        tracing::warn!("reload over HTTP refused: missing or wrong bearer token");
        return (StatusCode::UNAUTHORIZED, "missing or wrong bearer token\n").into_response();
    }
    let report = match &query.plugin {
        Some(name) => match admin.runtime.reload_plugin(name, false).await {
            Ok(outcome) => crate::runtime::ReloadReport {
                plugins: vec![(name.to_string(), outcome)],
            },
            Err(e) => return (StatusCode::NOT_FOUND, format!("{e}\n")).into_response(),
        },
        None => match admin.runtime.reload_config().await {
            Ok(report) => report,
            Err(e) => {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("{}\n", crate::error_chain(&e)),
                )
                    .into_response();
            }
        },
    };
    Json(report).into_response()
}
