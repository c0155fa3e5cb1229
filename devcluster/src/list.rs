//! LIST requests: list/watch query options (selectors, `limit`/`continue`, `resourceVersion`
//! with `resourceVersionMatch`), continue tokens, and the list response (or Table).
//!
//! A continue token records the snapshot resourceVersion and the last key returned; later
//! pages are read at that snapshot, so a paginated list is consistent even while objects change.
//! Once the history no longer reaches back to the snapshot the token is answered with 410.

use std::time::Duration;

use axum::{
    http::header,
    response::{IntoResponse, Response},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    resources::ResourceType,
    routes::Query,
    selectors::{self, FieldSelector, LabelSelector},
    status::ApiStatus,
    store::{self, NameKey, PageRequest, Store},
    view::View,
};

/// How long a request for a resourceVersion the store has not reached yet waits for it.
const FUTURE_VERSION_WAIT: Duration = Duration::from_secs(3);

/// Which objects a list or watch selects.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selection {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub label: LabelSelector,
    pub field: FieldSelector,
}

impl Selection {
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let meta = |field: &str| {
            object
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        self.namespace
            .as_deref()
            .is_none_or(|ns| meta("namespace") == ns)
            && self.name.as_deref().is_none_or(|name| meta("name") == name)
            && self.label.matches_object(object)
            && self.field.matches_object(object)
    }
}

/// `resourceVersionMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VersionMatch {
    NotOlderThan,
    Exact,
}

/// The decoded `continue` parameter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ContinueToken {
    /// Snapshot resourceVersion of the first page.
    rv: u64,
    /// Namespace of the last item returned.
    ns: String,
    /// Name of the last item returned.
    name: String,
}

impl ContinueToken {
    pub(crate) fn encode(rv: u64, after: &NameKey) -> String {
        let token = Self {
            rv,
            ns: after.0.clone(),
            name: after.1.clone(),
        };
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).expect("tokens serialize"))
    }

    pub(crate) fn decode(text: &str) -> Result<Self, ApiStatus> {
        let invalid = || ApiStatus::bad_request(format!("continue key is not valid: {text:?}"));
        let bytes = URL_SAFE_NO_PAD
            .decode(text.trim_end_matches('='))
            .map_err(|_| invalid())?;
        serde_json::from_slice(&bytes).map_err(|_| invalid())
    }
}

/// List and watch query options.
#[derive(Clone, Debug, Default)]
pub(crate) struct ListOptions {
    pub selection: Selection,
    pub limit: Option<usize>,
    pub continue_token: Option<ContinueToken>,
    /// `None` when unset or empty; `Some(0)` for "0".
    pub resource_version: Option<u64>,
    pub version_match: Option<VersionMatch>,
    pub allow_bookmarks: bool,
    pub timeout: Option<Duration>,
    pub send_initial_events: Option<bool>,
}

impl ListOptions {
    /// Parses and validates the query of a list or watch on `ty`.
    pub(crate) fn parse(
        query: &Query,
        ty: &ResourceType,
        namespace: Option<&str>,
        name: Option<&str>,
        watch: bool,
    ) -> Result<Self, ApiStatus> {
        let kind = if watch { "WatchOptions" } else { "ListOptions" };
        let invalid = |field: &str, detail: &str| ApiStatus::invalid_options(kind, field, detail);
        let field: FieldSelector = query.get("fieldSelector").unwrap_or("").parse()?;
        selectors::check_fields(&field, ty)?;
        let label: LabelSelector = query.get("labelSelector").unwrap_or("").parse()?;
        let number = |key: &str| -> Result<Option<u64>, ApiStatus> {
            query
                .get(key)
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| ApiStatus::bad_request(format!("invalid {key} {v:?}")))
                })
                .transpose()
        };
        let resource_version = number("resourceVersion")?;
        let version_match = match query.get("resourceVersionMatch") {
            None => None,
            Some("NotOlderThan") => Some(VersionMatch::NotOlderThan),
            Some("Exact") => Some(VersionMatch::Exact),
            Some(_) => {
                return Err(invalid(
                    "resourceVersionMatch",
                    "Unsupported value: supported values: \"Exact\", \"NotOlderThan\"",
                ));
            }
        };
        let continue_token = query
            .get("continue")
            .map(ContinueToken::decode)
            .transpose()?;
        let send_initial_events = query.flag("sendInitialEvents");
        let allow_bookmarks = query.flag("allowWatchBookmarks").unwrap_or(false);
        let forbidden = |field: &str, why: &str| Err(invalid(field, &format!("Forbidden: {why}")));
        if watch {
            if send_initial_events.is_some() && version_match != Some(VersionMatch::NotOlderThan) {
                return forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                );
            }
            if send_initial_events == Some(true) && !allow_bookmarks {
                return forbidden(
                    "allowWatchBookmarks",
                    "sendInitialEvents requires allowWatchBookmarks=true",
                );
            }
            if version_match.is_some() && send_initial_events.is_none() {
                return forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                );
            }
            if version_match == Some(VersionMatch::Exact) {
                return Err(invalid(
                    "resourceVersionMatch",
                    "Unsupported value: \"Exact\": supported values: \"NotOlderThan\"",
                ));
            }
        } else {
            if version_match.is_some() && resource_version.is_none() {
                return forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                );
            }
            if version_match.is_some() && continue_token.is_some() {
                return forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                );
            }
            if version_match == Some(VersionMatch::Exact) && resource_version == Some(0) {
                return forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                );
            }
            if continue_token.is_some() && resource_version.is_some_and(|rv| rv != 0) {
                return forbidden(
                    "resourceVersion",
                    "specifying resource version is not allowed when using continue",
                );
            }
            if send_initial_events.is_some() {
                return forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for list",
                );
            }
        }
        Ok(Self {
            selection: Selection {
                namespace: namespace.map(String::from),
                name: name.map(String::from),
                label,
                field,
            },
            limit: number("limit")?.filter(|l| *l > 0).map(|l| l as usize),
            continue_token,
            resource_version,
            version_match,
            allow_bookmarks,
            timeout: number("timeoutSeconds")?.map(Duration::from_secs),
            send_initial_events,
        })
    }
}

/// Waits (briefly) until the store has reached `rv`, as the API server does for
/// `NotOlderThan` reads; 504 if it does not.
pub(crate) async fn wait_for_version(store: &Store, rv: u64) -> Result<(), ApiStatus> {
    let mut latest = store.subscribe();
    let reached = tokio::time::timeout(
        FUTURE_VERSION_WAIT,
        latest.wait_for(|current| *current >= rv),
    )
    .await;
    match reached {
        Ok(Ok(_)) => Ok(()),
        _ => Err(store::Error::TooLargeResourceVersion {
            requested: rv,
            current: store.resource_version(),
        }
        .into()),
    }
}

/// Serves a LIST.
pub(crate) async fn serve(
    store: &Store,
    ty: &ResourceType,
    version: &str,
    options: &ListOptions,
    view: View,
) -> Result<Response, ApiStatus> {
    let (at, after) = match (
        &options.continue_token,
        options.resource_version,
        options.version_match,
    ) {
        (Some(token), _, _) => (Some(token.rv), Some((token.ns.clone(), token.name.clone()))),
        (None, None | Some(0), _) => (None, None),
        (None, Some(rv), Some(VersionMatch::Exact)) => (Some(rv), None),
        (None, Some(rv), None) if options.limit.is_some() => (Some(rv), None),
        (None, Some(rv), _) => {
            wait_for_version(store, rv).await?;
            (None, None)
        }
    };
    let request = PageRequest {
        resource: ty.storage(),
        namespace: options.selection.namespace.as_deref(),
        at,
        after: after.as_ref(),
        limit: options.limit,
    };
    let page = store
        .page(request, &|o| options.selection.matches(o))
        .map_err(|e| match e {
            store::Error::Expired(_) if options.continue_token.is_some() => {
                ApiStatus::expired_continue()
            }
            store::Error::Expired(expired) => ApiStatus::new(
                410,
                "Expired",
                format!(
                    "too old resource version: {} ({})",
                    expired.requested, expired.oldest
                ),
            ),
            other => other.into(),
        })?;
    let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(last) = &page.continue_after {
        metadata["continue"] = json!(ContinueToken::encode(page.resource_version, last));
    }
    let body = view
        .list(ty, &ty.api_version(version), &page.items, metadata)
        .map_err(|e| ApiStatus::internal(e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{Registry, ResourceId};

    fn parse(query: &str, watch: bool) -> Result<ListOptions, ApiStatus> {
        let registry = Registry::builtin();
        let pods = registry.get(&ResourceId::core("pods")).unwrap();
        ListOptions::parse(
            &Query::parse(Some(query)),
            pods,
            Some("default"),
            None,
            watch,
        )
    }

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let token = ContinueToken::encode(42, &("ns".into(), "name".into()));
        let decoded = ContinueToken::decode(&token).unwrap();
        assert_eq!(
            (decoded.rv, decoded.ns.as_str(), decoded.name.as_str()),
            (42, "ns", "name")
        );
        assert_eq!(ContinueToken::decode("not a token").unwrap_err().code, 400);
    }

    #[test]
    fn options_parse_selectors_and_paging() {
        let options = parse(
            "labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1&limit=10",
            false,
        )
        .unwrap();
        assert_eq!(options.limit, Some(10));
        assert!(options.selection.matches(&json!({"metadata": {"namespace": "default", "labels": {"app": "web"}}, "spec": {"nodeName": "n1"}})));
        assert!(!options.selection.matches(&json!({"metadata": {"namespace": "other", "labels": {"app": "web"}}, "spec": {"nodeName": "n1"}})));
    }

    #[test]
    fn invalid_option_combinations_are_rejected_like_the_api_server() {
        assert_eq!(
            parse("resourceVersionMatch=NotOlderThan", false)
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            parse("resourceVersion=0&resourceVersionMatch=Exact", false)
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            parse("resourceVersionMatch=Newest&resourceVersion=1", false)
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            parse("sendInitialEvents=true&allowWatchBookmarks=true", true)
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            parse(
                "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0",
                true
            )
            .unwrap_err()
            .code,
            422
        );
        assert!(parse("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=&allowWatchBookmarks=true", true).is_ok());
        assert_eq!(
            parse("resourceVersionMatch=NotOlderThan&resourceVersion=1", true)
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            parse("sendInitialEvents=true", false).unwrap_err().code,
            422
        );
        assert!(parse("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true", true).is_ok());
        assert_eq!(
            parse("fieldSelector=spec.containers%3Dx", false)
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            parse("labelSelector=a%20in%20b", false).unwrap_err().code,
            400
        );
        assert_eq!(parse("resourceVersion=abc", false).unwrap_err().code, 400);
    }
}
