//! The HTTP entry point: classifies each request, records it in the request log, applies
//! injected faults, and dispatches to discovery, list, watch or the object verbs (get, create,
//! update, patch, delete, deletecollection) on the store.

use std::{sync::Arc, time::Duration};

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, Method, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use crate::{
    control, discovery,
    faults::Faults,
    list::{self, ListOptions},
    patch::Patch,
    request_log::{RequestLog, RequestRecord, Verb},
    resources::ResourceType,
    routes::{self, Query, ResourcePath, Route},
    scale,
    status::ApiStatus,
    store::{Deletion, ObjectKey, Part, Preconditions, Store},
    view::{self, View},
    watch::{self, WatchSetup},
};

/// Largest request body accepted.
const MAX_BODY: usize = 16 << 20;

/// Shared state of the HTTP server.
#[derive(Clone, Debug)]
pub(crate) struct App {
    pub store: Store,
    pub faults: Faults,
    pub log: RequestLog,
    pub bookmark_interval: Duration,
    /// `host:port` the server listens on, for `/api`.
    pub server_address: String,
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

fn verb_of(method: &Method, route: &Route, query: &Query) -> Verb {
    let Route::Resource(path) = route else {
        return match route {
            Route::Unknown => Verb::Other,
            _ => Verb::Discovery,
        };
    };
    let watch = path.watch_prefix || query.flag("watch") == Some(true);
    match (method.as_str(), path.name.is_some()) {
        ("GET", _) if watch => Verb::Watch,
        ("GET", true) => Verb::Get,
        ("GET", false) => Verb::List,
        ("POST", false) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => Verb::Other,
    }
}

fn record_of(parts: &Parts, route: &Route, query: &Query) -> RequestRecord {
    let path = match route {
        Route::Resource(path) => Some(path),
        _ => None,
    };
    RequestRecord {
        seq: 0,
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        verb: verb_of(&parts.method, route, query),
        resource: path.map(|p| {
            if p.group.is_empty() {
                p.resource.clone()
            } else {
                format!("{}.{}", p.resource, p.group)
            }
        }),
        namespace: path.and_then(|p| p.namespace.clone()),
        name: path.and_then(|p| p.name.clone()),
        subresource: path.and_then(|p| p.subresource.clone()),
        query: query.pairs().clone(),
        accept: parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .map(String::from),
    }
}

/// The single axum handler for every path.
pub(crate) async fn handle(State(app): State<App>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let query = Query::parse(parts.uri.query());
    let route = routes::parse(parts.uri.path());
    if let Route::Control(segments) = &route {
        return control::handle(&app, &parts.method, segments, &query)
            .await
            .unwrap_or_else(IntoResponse::into_response);
    }
    let record = app.log.record(record_of(&parts, &route, &query));
    tracing::debug!(request.seq = record.seq, request.verb = ?record.verb, request.path = %record.path, "api request");
    let query = match app.faults.gate(&record).await {
        Ok(admission) => query.without(&admission.ignored_params),
        Err(status) => return status.into_response(),
    };
    let registry = app.store.registry();
    let result = match route {
        Route::Version => {
            let (major, minor) = app.faults.reported_version();
            Ok(json_response(
                StatusCode::OK,
                &discovery::version(&major, &minor),
            ))
        }
        Route::Health => Ok("ok".into_response()),
        Route::OpenApi | Route::Unknown | Route::Control(_) => Err(ApiStatus::unknown_path()),
        Route::CoreVersions => Ok(json_response(
            StatusCode::OK,
            &discovery::core_versions(&app.server_address),
        )),
        Route::Groups => Ok(json_response(StatusCode::OK, &discovery::groups(&registry))),
        Route::Group(group) => discovery::group(&registry, &group)
            .map(|g| json_response(StatusCode::OK, &g))
            .ok_or_else(ApiStatus::unknown_path),
        Route::Resources { group, version } => discovery::resources(&registry, &group, &version)
            .map(|r| json_response(StatusCode::OK, &r))
            .ok_or_else(ApiStatus::unknown_path),
        Route::Resource(path) => match registry.resolve(&path.group, &path.version, &path.resource)
        {
            Some(ty) => resource(&app, &parts, body, &query, &path, ty, &record).await,
            None => Err(ApiStatus::unknown_path()),
        },
    };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn read_body(body: Body) -> Result<Bytes, ApiStatus> {
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| ApiStatus::bad_request(format!("reading the request body: {e}")))
}

fn parse_object(bytes: &[u8]) -> Result<Value, ApiStatus> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiStatus::bad_request(format!("the request body is not a JSON object: {e}"))
    })?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(ApiStatus::bad_request(
            "the request body is not a JSON object",
        ))
    }
}

fn view_of(headers: &HeaderMap, query: &Query) -> View {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    View::negotiate(accept, query)
}

/// Serves a single object in the negotiated representation.
fn object_response(
    code: StatusCode,
    ty: &ResourceType,
    api_version: &str,
    object: &Arc<Value>,
    view: View,
) -> Response {
    json_response(code, &view.object(ty, api_version, object))
}

fn delete_options(bytes: &[u8]) -> Result<Preconditions, ApiStatus> {
    let body: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(bytes)
            .map_err(|e| ApiStatus::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let precondition = |field: &str| {
        body.pointer(&format!("/preconditions/{field}"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    Ok(Preconditions {
        uid: precondition("uid"),
        resource_version: precondition("resourceVersion"),
    })
}

fn deleted_status(ty: &ResourceType, object: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": object["metadata"]["name"],
            "group": ty.id.group,
            "kind": ty.id.resource,
            "uid": object["metadata"]["uid"],
        }
    })
}

/// Bodies in these encodings (kubectl's typed clients send protobuf) are not decoded.
fn check_content_type(parts: &Parts) -> Result<(), ApiStatus> {
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.contains("protobuf") || content_type.contains("cbor") {
        return Err(ApiStatus::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the wasmformer dev cluster only accepts JSON request bodies, not {content_type:?}"
            ),
        ));
    }
    Ok(())
}

/// `GET`, `PUT` and `PATCH` of `.../scale`.
async fn scale_request(
    app: &App,
    parts: &Parts,
    body: Body,
    path: &ResourcePath,
    ty: &ResourceType,
    verb: Verb,
) -> Result<Response, ApiStatus> {
    let key = ObjectKey::new(
        ty.id.clone(),
        path.namespace.as_deref(),
        path.name.clone().unwrap_or_default(),
    );
    let wanted = match verb {
        Verb::Get => {
            return Ok(json_response(
                StatusCode::OK,
                &scale::of(&*app.store.get(&key)?),
            ));
        }
        Verb::Update => parse_object(&read_body(body).await?)?,
        Verb::Patch => {
            let content_type = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let patch = Patch::decode(content_type, &read_body(body).await?)
                .map_err(|e| ApiStatus::from(&e))?;
            let current = scale::of(&*app.store.get(&key)?);
            patch.apply_to(&current).map_err(|e| ApiStatus::from(&e))?
        }
        _ => return Err(ApiStatus::method_not_allowed(parts.method.as_str())),
    };
    let updated = app
        .store
        .patch(&key, &scale::to_patch(&wanted)?, Part::Main)?;
    Ok(json_response(StatusCode::OK, &scale::of(&updated)))
}

async fn resource(
    app: &App,
    parts: &Parts,
    body: Body,
    query: &Query,
    path: &ResourcePath,
    ty: Arc<ResourceType>,
    record: &RequestRecord,
) -> Result<Response, ApiStatus> {
    let verb = record.verb;
    if path.namespace.is_some() && !ty.namespaced {
        return Err(ApiStatus::unknown_path());
    }
    check_content_type(parts)?;
    if query.get("dryRun").is_some() {
        return Err(ApiStatus::bad_request(
            "dryRun is not supported by the wasmformer dev cluster",
        ));
    }
    let part = match path.subresource.as_deref() {
        None => Part::Main,
        Some("status") if ty.status_subresource => Part::Status,
        Some("scale") if ty.scale_subresource => {
            return scale_request(app, parts, body, path, &ty, verb).await;
        }
        Some(_) => return Err(ApiStatus::unknown_path()),
    };
    let api_version = ty.api_version(&path.version);
    let view = view_of(&parts.headers, query);
    let namespace = path.namespace.as_deref();
    let key = |name: &str| ObjectKey::new(ty.id.clone(), namespace, name);
    let respond = |code: StatusCode, object: &Arc<Value>| {
        Ok(object_response(code, &ty, &api_version, object, view))
    };
    let store = &app.store;
    match (verb, path.name.as_deref()) {
        (Verb::List, _) => {
            let options = ListOptions::parse(query, &ty, namespace, None, false)?;
            list::serve(store, &ty, &path.version, &options, view).await
        }
        (Verb::Watch, name) => {
            let options = ListOptions::parse(query, &ty, namespace, name, true)?;
            watch::serve(WatchSetup {
                store: store.clone(),
                version: path.version.clone(),
                options,
                view,
                bookmark_interval: app.bookmark_interval,
                faults: app.faults.clone(),
                record: record.clone(),
                ty,
            })
            .await
        }
        (Verb::Get, Some(name)) => {
            let object = store.get(&key(name))?;
            respond(StatusCode::OK, &object)
        }
        (Verb::Create, None) => {
            let object = parse_object(&read_body(body).await?)?;
            let created = store.create(&ty.id, namespace, object)?;
            respond(StatusCode::CREATED, &created)
        }
        (Verb::Update, Some(name)) => {
            let object = parse_object(&read_body(body).await?)?;
            let updated = store.replace(&key(name), object, part)?;
            respond(StatusCode::OK, &updated)
        }
        (Verb::Patch, Some(name)) => {
            let content_type = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let patch = Patch::decode(content_type, &read_body(body).await?)
                .map_err(|e| ApiStatus::from(&e))?;
            let existed = store.get(&key(name)).is_ok();
            let patched = store.patch(&key(name), &patch, part)?;
            let code = if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            respond(code, &patched)
        }
        (Verb::Delete, Some(name)) => {
            let preconditions = delete_options(&read_body(body).await?)?;
            match store.delete(&key(name), &preconditions)? {
                Deletion::Deleted(object) => {
                    Ok(json_response(StatusCode::OK, &deleted_status(&ty, &object)))
                }
                Deletion::Finalizing(object) => respond(StatusCode::OK, &object),
            }
        }
        (Verb::DeleteCollection, None) => {
            let preconditions = delete_options(&read_body(body).await?)?;
            let options = ListOptions::parse(query, &ty, namespace, None, false)?;
            let (objects, _) = store.list(&ty.id, namespace)?;
            let mut deleted = Vec::new();
            for object in objects.iter().filter(|o| options.selection.matches(o)) {
                let name = object["metadata"]["name"].as_str().unwrap_or("");
                let namespace = object["metadata"]["namespace"].as_str();
                let key = ObjectKey::new(ty.id.clone(), namespace, name);
                match store.delete(&key, &preconditions) {
                    Ok(Deletion::Deleted(o) | Deletion::Finalizing(o)) => {
                        deleted.push(view::versioned(&o, &api_version).into_owned())
                    }
                    Err(crate::store::Error::NotFound { .. }) => {}
                    Err(other) => return Err(other.into()),
                }
            }
            let list = json!({"kind": ty.list_kind(), "apiVersion": api_version,
                "metadata": {"resourceVersion": store.resource_version().to_string()}, "items": deleted});
            Ok(json_response(StatusCode::OK, &list))
        }
        _ => Err(ApiStatus::method_not_allowed(parts.method.as_str())),
    }
}
