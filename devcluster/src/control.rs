//! The dev cluster's own HTTP endpoints under `/wasmformer-dev/`, for driving faults and
//! reading the request log from outside the process (curl, a Go test):
//!
//! ```text
//! POST /wasmformer-dev/faults/close-watches
//! POST /wasmformer-dev/faults/compact
//! POST /wasmformer-dev/faults/fail-next?count=3&code=500|429[&verb=list][&resource=pods]
//! POST /wasmformer-dev/faults/delay-next?count=3&ms=200[&verb=watch][&resource=pods]
//! POST /wasmformer-dev/faults/watch-line?line=RAW[&resource=pods]
//! POST /wasmformer-dev/faults/pause
//! POST /wasmformer-dev/faults/resume
//! POST /wasmformer-dev/faults/clear
//! GET  /wasmformer-dev/requests[?since=SEQ]
//! DELETE /wasmformer-dev/requests
//! ```
//!
//! These requests are not recorded in the request log and are never paused or failed.

use std::time::Duration;

use axum::{
    http::{Method, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::json;

use crate::{
    faults::{Failure, RequestFilter},
    handlers::App,
    request_log::Verb,
    routes::Query,
    status::ApiStatus,
};

fn ok(body: serde_json::Value) -> Result<Response, ApiStatus> {
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response())
}

fn filter(query: &Query) -> Result<RequestFilter, ApiStatus> {
    let mut filter = RequestFilter::default();
    if let Some(verb) = query.get("verb") {
        filter.verb = Some(
            Verb::from_name(verb)
                .ok_or_else(|| ApiStatus::bad_request(format!("unknown verb {verb:?}")))?,
        );
    }
    filter.resource = query.get("resource").map(String::from);
    Ok(filter)
}

fn number(query: &Query, key: &str, default: u64) -> Result<u64, ApiStatus> {
    query.get(key).map_or(Ok(default), |v| {
        v.parse()
            .map_err(|_| ApiStatus::bad_request(format!("invalid {key} {v:?}")))
    })
}

pub(crate) async fn handle(
    app: &App,
    method: &Method,
    segments: &[String],
    query: &Query,
) -> Result<Response, ApiStatus> {
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let faults = &app.faults;
    match (method.as_str(), segments.as_slice()) {
        ("POST", ["faults", action]) => {
            match *action {
                "close-watches" => faults.close_watches(),
                "compact" => faults.compact(),
                "pause" => faults.pause(),
                "resume" => faults.resume(),
                "clear" => faults.clear(),
                "fail-next" => {
                    let code = number(query, "code", 500)?;
                    let failure = u16::try_from(code)
                        .ok()
                        .and_then(Failure::from_code)
                        .ok_or_else(|| ApiStatus::bad_request("code must be 500 or 429"))?;
                    let count = u32::try_from(number(query, "count", 1)?).unwrap_or(u32::MAX);
                    faults.fail_next_matching(filter(query)?, count, failure);
                }
                "delay-next" => {
                    let delay = Duration::from_millis(number(query, "ms", 1000)?);
                    let count = u32::try_from(number(query, "count", 1)?).unwrap_or(u32::MAX);
                    faults.delay_next_matching(filter(query)?, count, delay);
                }
                "watch-line" => {
                    let line = query
                        .get("line")
                        .ok_or_else(|| ApiStatus::bad_request("watch-line needs line=RAW"))?;
                    faults.send_watch_line(filter(query)?.verb(Verb::Watch), line);
                }
                _ => return Err(ApiStatus::unknown_path()),
            }
            ok(
                json!({"ok": true, "fault": action, "resourceVersion": app.store.resource_version().to_string()}),
            )
        }
        ("GET", ["requests"]) => {
            let since = number(query, "since", 0)?;
            ok(json!({"lastSeq": app.log.last_seq(), "requests": app.log.since(since)}))
        }
        ("DELETE", ["requests"]) => {
            app.log.clear();
            ok(json!({"ok": true}))
        }
        (_, ["faults", _] | ["requests"]) => Err(ApiStatus::method_not_allowed(method.as_str())),
        _ => Err(ApiStatus::unknown_path()),
    }
}
