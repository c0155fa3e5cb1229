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
    control, convert, discovery,
    faults::Faults,
    list::{self, ListOptions},
    openapi, openapi_proto, ownership,
    patch::Patch,
    protobuf,
    request_log::{RequestLog, RequestRecord, Verb},
    resources::{ResourceId, ResourceType},
    reviews,
    routes::{self, Query, ResourcePath, Route},
    scale,
    status::ApiStatus,
    store::{Deletion, ObjectKey, Part, Preconditions, Propagation, Store},
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
        accept: accept_of(&parts.headers).map(String::from),
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
        Route::OpenApiV2 => crds(&app.store)
            .and_then(|crds| openapi::v2(&registry, &crds).map_err(ApiStatus::internal))
            .map(
                |d| match accept_of(&parts.headers).and_then(openapi_proto::requested) {
                    Some(media) => (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, media)],
                        openapi_proto::encode(&d),
                    )
                        .into_response(),
                    None => json_response(StatusCode::OK, &d),
                },
            ),
        Route::OpenApiV3(None) => crds(&app.store)
            .and_then(|crds| openapi::v3_index(&registry, &crds).map_err(ApiStatus::internal))
            .map(|d| json_response(StatusCode::OK, &d)),
        Route::OpenApiV3(Some(path)) => {
            crds(&app.store).and_then(|crds| {
                match openapi::v3_document(&registry, &crds, &path).map_err(ApiStatus::internal)? {
                    Some(document) => Ok(json_response(StatusCode::OK, &document)),
                    None => Err(ApiStatus::unknown_path()),
                }
            })
        }
        Route::Unknown | Route::Control(_) => Err(ApiStatus::unknown_path()),
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

/// The field manager of a write, as the API server names it: `fieldManager`, or the client's
/// user agent up to its first `/`.
fn manager_of(parts: &Parts, query: &Query, api_version: &str, part: Part) -> ownership::Manager {
    let name = match query.get("fieldManager").filter(|m| !m.is_empty()) {
        Some(manager) => manager.to_owned(),
        None => parts
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|agent| agent.split('/').next())
            .filter(|m| !m.is_empty())
            .unwrap_or("unknown")
            .chars()
            .take(128)
            .collect(),
    };
    ownership::Manager {
        name,
        api_version: api_version.to_owned(),
        subresource: (part == Part::Status).then(|| "status".to_owned()),
    }
}

type SchemaDocument = Option<(Value, std::borrow::Cow<'static, Value>)>;

/// The OpenAPI schema of the stored objects of `ty`, for field ownership and apply merges.
fn schema_document(
    store: &Store,
    ty: &ResourceType,
    version: &str,
) -> Result<SchemaDocument, ApiStatus> {
    let crds = if ty.id.group.contains('.') && !ty.id.group.ends_with(".k8s.io") {
        crds(store)?
    } else {
        Vec::new()
    };
    Ok(openapi::schema_of(&store.registry(), &crds, ty, version))
}

fn schema(document: &SchemaDocument) -> ownership::Schema<'_> {
    const NONE: &Value = &Value::Null;
    match document {
        Some((root, schemas)) => ownership::Schema {
            root,
            schemas: schemas.as_ref(),
        },
        None => ownership::Schema {
            root: NONE,
            schemas: NONE,
        },
    }
}

/// A served type by id.
fn registry_get(store: &Store, id: &ResourceId) -> Result<Arc<ResourceType>, ApiStatus> {
    store
        .registry()
        .get(id)
        .cloned()
        .ok_or_else(ApiStatus::unknown_path)
}

/// Every CRD, for the OpenAPI documents of the types they define.
fn crds(store: &Store) -> Result<Vec<Value>, ApiStatus> {
    let (crds, _) = store.list(&ResourceId::crds(), None)?;
    Ok(crds.iter().map(|c| Value::clone(c)).collect())
}

async fn read_body(body: Body) -> Result<Bytes, ApiStatus> {
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| ApiStatus::bad_request(format!("reading the request body: {e}")))
}

fn content_type(parts: &Parts) -> &str {
    parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// A request body as a JSON object: JSON as sent, protobuf decoded (kubectl's typed clients).
fn parse_object(parts: &Parts, bytes: &[u8]) -> Result<Value, ApiStatus> {
    if protobuf::is_protobuf(content_type(parts)) {
        return protobuf::decode(bytes).map_err(ApiStatus::bad_request);
    }
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
    View::negotiate(accept_of(headers).unwrap_or(""), query)
}

/// The request's `Accept` header, if it is text.
fn accept_of(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok())
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

/// `DeleteOptions` from the body (JSON or protobuf) and the query: preconditions and the
/// propagation policy (`propagationPolicy`, or the legacy `orphanDependents`).
fn delete_options(
    parts: &Parts,
    query: &Query,
    bytes: &[u8],
) -> Result<(Preconditions, Propagation), ApiStatus> {
    let body: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else if protobuf::is_protobuf(content_type(parts)) {
        protobuf::decode(bytes)
            .map_err(|e| ApiStatus::bad_request(format!("invalid DeleteOptions: {e}")))?
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
    let policy = body["propagationPolicy"]
        .as_str()
        .or_else(|| query.get("propagationPolicy"));
    let orphan = body["orphanDependents"]
        .as_bool()
        .or_else(|| query.flag("orphanDependents"));
    let propagation = match (policy, orphan) {
        (Some("Foreground"), _) => Propagation::Foreground,
        (Some("Orphan"), _) | (None, Some(true)) => Propagation::Orphan,
        (Some("Background") | None, _) => Propagation::Background,
        (Some(other), _) => {
            return Err(ApiStatus::bad_request(format!(
                "propagationPolicy {other:?} is not one of Foreground, Background, Orphan"
            )));
        }
    };
    Ok((
        Preconditions {
            uid: precondition("uid"),
            resource_version: precondition("resourceVersion"),
        },
        propagation,
    ))
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

/// Server-side field validation (`fieldValidation=Strict|Warn|Ignore`, `Warn` when absent, as
/// the API server): the fields `object` has and its OpenAPI schema does not. `Strict` refuses
/// them; `Warn` returns the `Warning` header values to send.
fn validate_fields(
    store: &Store,
    ty: &ResourceType,
    version: &str,
    query: &Query,
    object: &Value,
) -> Result<Vec<String>, ApiStatus> {
    let directive = query.get("fieldValidation").unwrap_or("Warn");
    if directive.eq_ignore_ascii_case("Ignore") {
        return Ok(Vec::new());
    }
    let crds = if ty.id.group.contains('.') && !ty.id.group.ends_with(".k8s.io") {
        crds(store)?
    } else {
        Vec::new()
    };
    let Some((schema, schemas)) = openapi::schema_of(&store.registry(), &crds, ty, version) else {
        return Ok(Vec::new());
    };
    let unknown = openapi::unknown_fields(&schema, &schemas, object);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let named: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    if directive.eq_ignore_ascii_case("Strict") {
        return Err(ApiStatus::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            named.join(", "),
            kind = ty.kind,
        )));
    }
    Ok(named)
}

/// Adds `Warning: 299 - "…"` headers, as the API server sends for `fieldValidation=Warn`.
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!(
            "299 - {}",
            serde_json::to_string(warning).unwrap_or_default()
        );
        if let Ok(value) = header::HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// CBOR bodies are not decoded (client-go falls back to JSON on 415).
fn check_content_type(parts: &Parts) -> Result<(), ApiStatus> {
    let content_type = content_type(parts);
    if content_type.contains("cbor") {
        return Err(ApiStatus::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the wasmformer dev cluster accepts JSON and protobuf request bodies, not {content_type:?}"
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
        Verb::Update => parse_object(parts, &read_body(body).await?)?,
        Verb::Patch => {
            let patch = Patch::decode(content_type(parts), &read_body(body).await?)
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
    if ty.create_only {
        return match (verb, &path.name, &path.subresource) {
            (Verb::Create, None, None) => {
                let review = parse_object(parts, &read_body(body).await?)?;
                Ok(json_response(
                    StatusCode::CREATED,
                    &reviews::answer(&ty, review)?,
                ))
            }
            _ => Err(ApiStatus::method_not_allowed(parts.method.as_str())),
        };
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
    let key = |name: &str| ObjectKey::new(ty.storage().clone(), namespace, name);
    // The type whose schema describes the stored objects (SSA merges into them).
    let (schema_ty, schema_version) = match &ty.stored_as {
        Some(id) => {
            let stored = registry_get(&app.store, id)?;
            let version = stored.preferred_version().to_owned();
            (stored, version)
        }
        None => (ty.clone(), path.version.clone()),
    };
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
            let mut object = parse_object(parts, &read_body(body).await?)?;
            let warnings = validate_fields(store, &ty, &path.version, query, &object)?;
            let manager = manager_of(parts, query, &api_version, part);
            let document = schema_document(store, &schema_ty, &schema_version)?;
            ownership::record_update(schema(&document), &manager, None, &mut object);
            let object = convert::to_storage(&ty, object);
            let created = store.create(ty.storage(), namespace, object)?;
            respond(StatusCode::CREATED, &created).map(|r| with_warnings(r, &warnings))
        }
        (Verb::Update, Some(name)) => {
            let object = parse_object(parts, &read_body(body).await?)?;
            let warnings = validate_fields(store, &ty, &path.version, query, &object)?;
            let object = convert::to_storage(&ty, object);
            let manager = manager_of(parts, query, &api_version, part);
            let document = schema_document(store, &schema_ty, &schema_version)?;
            let updated = store.update_with(&key(name), part, |current| {
                let mut object = object;
                ownership::record_update(schema(&document), &manager, Some(current), &mut object);
                Ok(object)
            })?;
            respond(StatusCode::OK, &updated).map(|r| with_warnings(r, &warnings))
        }
        (Verb::Patch, Some(name)) => {
            let patch = Patch::decode(content_type(parts), &read_body(body).await?)
                .map_err(|e| ApiStatus::from(&e))?;
            let warnings = match &patch {
                Patch::Apply(body) | Patch::Merge(body) | Patch::Strategic(body) => {
                    validate_fields(store, &ty, &path.version, query, body)?
                }
                _ => Vec::new(),
            };
            let patch = match patch {
                Patch::Apply(body) => Patch::Apply(convert::to_storage(&ty, body)),
                Patch::Merge(body) => Patch::Merge(convert::to_storage(&ty, body)),
                Patch::Strategic(body) => Patch::Strategic(convert::to_storage(&ty, body)),
                other => other,
            };
            let manager = manager_of(parts, query, &api_version, part);
            let document = schema_document(store, &schema_ty, &schema_version)?;
            let schema = schema(&document);
            let existing = store.get(&key(name)).ok();
            let existed = existing.is_some();
            let patched = match &patch {
                Patch::Apply(applied) => {
                    if query.get("fieldManager").is_none_or(str::is_empty) {
                        return Err(ApiStatus::invalid_options(
                            "PatchOptions",
                            "fieldManager",
                            "Required value: is required for apply patch",
                        ));
                    }
                    let force = query.flag("force") == Some(true);
                    // Server-side apply merges lists by their schema's keys.
                    let merge = |target: &mut Value, applied: &Value| match &document {
                        Some((root, schemas)) => {
                            openapi::apply_merge(root, schemas, target, applied);
                        }
                        None => {
                            if let Ok(merged) = Patch::Apply(applied.clone()).apply_to(target) {
                                *target = merged;
                            }
                        }
                    };
                    let conflict = crate::store::Error::ApplyConflict;
                    if existed {
                        store.update_with(&key(name), part, |current| {
                            ownership::apply(schema, &manager, Some(current), applied, force, merge)
                                .map_err(conflict)
                        })?
                    } else if part == Part::Main {
                        let mut object =
                            ownership::apply(schema, &manager, None, applied, force, merge)
                                .map_err(conflict)?;
                        if let Some(meta) = object["metadata"].as_object_mut() {
                            meta.insert("name".into(), json!(name));
                        }
                        store.create(ty.storage(), namespace, object)?
                    } else {
                        store.get(&key(name))?
                    }
                }
                other => store.update_with(&key(name), part, |current| {
                    let mut object = other
                        .apply_to(current)
                        .map_err(|e| crate::store::Error::Patch(Arc::new(e)))?;
                    ownership::record_update(schema, &manager, Some(current), &mut object);
                    Ok(object)
                })?,
            };
            let code = if existed {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            respond(code, &patched).map(|r| with_warnings(r, &warnings))
        }
        (Verb::Delete, Some(name)) => {
            let (preconditions, propagation) =
                delete_options(parts, query, &read_body(body).await?)?;
            match store.delete_propagating(&key(name), &preconditions, propagation)? {
                Deletion::Deleted(object) => {
                    Ok(json_response(StatusCode::OK, &deleted_status(&ty, &object)))
                }
                Deletion::Finalizing(object) => respond(StatusCode::OK, &object),
            }
        }
        (Verb::DeleteCollection, None) => {
            let (preconditions, propagation) =
                delete_options(parts, query, &read_body(body).await?)?;
            let options = ListOptions::parse(query, &ty, namespace, None, false)?;
            let (objects, _) = store.list(ty.storage(), namespace)?;
            let mut deleted = Vec::new();
            for object in objects.iter().filter(|o| options.selection.matches(o)) {
                let name = object["metadata"]["name"].as_str().unwrap_or("");
                let namespace = object["metadata"]["namespace"].as_str();
                let key = ObjectKey::new(ty.storage().clone(), namespace, name);
                match store.delete_propagating(&key, &preconditions, propagation) {
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
