//! Error responses as `metav1.Status` objects with the code, reason, message and details the
//! real API server uses, so client libraries classify them the same way (`is_not_found`,
//! conflict retries, 410 relists, 429 backoff).

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use crate::{patch, resources::ResourceId, selectors, store};

/// A failed request, rendered as a `Status` body.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiStatus {
    /// HTTP status code, also `Status.code`.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, if any.
    pub details: Option<Value>,
    /// Seconds for the `Retry-After` header and `details.retryAfterSeconds`.
    pub retry_after: Option<u64>,
}

impl ApiStatus {
    /// A status with no details.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 for a path or resource the server does not serve.
    pub fn unknown_path() -> Self {
        Self {
            details: Some(
                json!({"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]}),
            ),
            ..Self::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource: {method}"),
        )
    }

    /// 422 Invalid for request options (`ListOptions`, `WatchOptions`).
    pub fn invalid_options(kind: &str, field: &str, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        Self {
            details: Some(json!({"group": "meta.k8s.io", "kind": kind,
                "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}]})),
            ..Self::new(
                422,
                "Invalid",
                format!("{kind}.meta.k8s.io \"\" is invalid: {field}: {detail}"),
            )
        }
    }

    /// 410 Expired for a continue token older than the history.
    pub fn expired_continue() -> Self {
        Self::new(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 429 TooManyRequests with `Retry-After`.
    pub fn too_many_requests(retry_after: u64) -> Self {
        Self {
            details: Some(json!({"retryAfterSeconds": retry_after})),
            retry_after: Some(retry_after),
            ..Self::new(
                429,
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later",
            )
        }
    }

    /// The `Status` object.
    pub fn to_value(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

impl IntoResponse for ApiStatus {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (
            code,
            [(header::CONTENT_TYPE, "application/json")],
            self.to_value().to_string(),
        )
            .into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

fn object_details(resource: &ResourceId, name: &str) -> Value {
    json!({"name": name, "group": resource.group, "kind": resource.resource})
}

impl From<store::Error> for ApiStatus {
    fn from(error: store::Error) -> Self {
        use store::Error as E;
        let message = error.to_string();
        match error {
            E::NotFound { resource, name } => Self {
                details: Some(object_details(&resource, &name)),
                ..Self::new(404, "NotFound", message)
            },
            E::AlreadyExists { resource, name } => Self {
                details: Some(object_details(&resource, &name)),
                ..Self::new(409, "AlreadyExists", message)
            },
            E::Conflict {
                resource,
                name,
                reason,
            } => Self {
                details: Some(object_details(&resource, &name)),
                ..Self::new(
                    409,
                    "Conflict",
                    format!("Operation cannot be fulfilled on {resource} {name:?}: {reason}"),
                )
            },
            E::ApplyConflict(conflicts) => Self {
                details: Some(json!({"causes": conflicts.causes()})),
                ..Self::new(409, "Conflict", message)
            },
            E::Invalid { kind, name, causes } => {
                let listed: Vec<String> = causes.iter().map(ToString::to_string).collect();
                let summary = if listed.len() == 1 {
                    listed[0].clone()
                } else {
                    format!("[{}]", listed.join(", "))
                };
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.detail, "field": c.field}))
                    .collect();
                Self {
                    details: Some(json!({"name": name, "kind": kind, "causes": causes})),
                    ..Self::new(
                        422,
                        "Invalid",
                        format!("{kind} {name:?} is invalid: {summary}"),
                    )
                }
            }
            E::BadRequest { .. } => Self::bad_request(message),
            E::UnknownResource { .. } => Self::unknown_path(),
            E::Forbidden { resource, name, .. } => Self {
                details: Some(object_details(&resource, &name)),
                ..Self::new(403, "Forbidden", message)
            },
            E::Expired(_) => Self::new(410, "Expired", message),
            E::TooLargeResourceVersion { .. } => Self {
                details: Some(
                    json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1}),
                ),
                retry_after: Some(1),
                ..Self::new(504, "Timeout", message)
            },
            E::Patch(error) => Self::from(&*error),
        }
    }
}

impl From<&patch::Error> for ApiStatus {
    fn from(error: &patch::Error) -> Self {
        match error {
            patch::Error::UnsupportedMediaType { .. } => {
                Self::new(415, "UnsupportedMediaType", error.to_string())
            }
            patch::Error::Malformed { .. } => Self::bad_request(error.to_string()),
            patch::Error::JsonPatch { .. } => Self::new(422, "Invalid", error.to_string()),
        }
    }
}

impl From<selectors::Error> for ApiStatus {
    fn from(error: selectors::Error) -> Self {
        Self::bad_request(error.to_string())
    }
}

impl From<wasmformer_selectors::Error> for ApiStatus {
    fn from(error: wasmformer_selectors::Error) -> Self {
        Self::from(selectors::Error::from(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FieldError;

    #[test]
    fn not_found_matches_the_api_server_wording() {
        let status = ApiStatus::from(store::Error::NotFound {
            resource: ResourceId::new("apps", "deployments"),
            name: "web".into(),
        });
        let value = status.to_value();
        assert_eq!(value["message"], "deployments.apps \"web\" not found");
        assert_eq!(value["reason"], "NotFound");
        assert_eq!(value["code"], 404);
        assert_eq!(
            value["details"],
            json!({"name": "web", "group": "apps", "kind": "deployments"})
        );
    }

    #[test]
    fn conflict_and_invalid_render_like_kubernetes() {
        let conflict = ApiStatus::from(store::Error::Conflict {
            resource: ResourceId::core("configmaps"),
            name: "a".into(),
            reason: "the object has been modified; please apply your changes to the latest version and try again".into(),
        });
        assert_eq!(conflict.code, 409);
        assert!(
            conflict
                .message
                .starts_with("Operation cannot be fulfilled on configmaps \"a\"")
        );
        let invalid = ApiStatus::from(store::Error::Invalid {
            kind: "Pod".into(),
            name: String::new(),
            causes: vec![FieldError {
                field: "metadata.name".into(),
                reason: "FieldValueRequired",
                detail: "Required value: name or generateName is required".into(),
            }],
        });
        assert_eq!(invalid.code, 422);
        assert_eq!(
            invalid.message,
            "Pod \"\" is invalid: metadata.name: Required value: name or generateName is required"
        );
        assert_eq!(
            invalid.to_value()["details"]["causes"][0]["reason"],
            "FieldValueRequired"
        );
    }

    #[test]
    fn too_many_requests_carries_retry_after() {
        let response = ApiStatus::too_many_requests(2).into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }
}
