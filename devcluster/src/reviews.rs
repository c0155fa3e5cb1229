//! `SelfSubjectAccessReview` and `SelfSubjectRulesReview` (`authorization.k8s.io/v1`), which
//! `kubectl auth can-i` creates. The dev cluster has no authentication or authorization: every
//! request is allowed, so every review answers "allowed" (rules: everything). Reviews are
//! answered, never stored, as on a real API server.

use serde_json::{Value, json};

use crate::{resources::ResourceType, status::ApiStatus};

/// The reason every access review gives.
pub const ALLOW_ALL_REASON: &str = "the wasmformer dev cluster allows every request";

/// The created review: the request as sent, with `status` filled in.
pub(crate) fn answer(ty: &ResourceType, mut review: Value) -> Result<Value, ApiStatus> {
    let status = match ty.kind.as_str() {
        "SelfSubjectAccessReview" => {
            let attributes = review.pointer("/spec/resourceAttributes").is_some()
                || review.pointer("/spec/nonResourceAttributes").is_some();
            if !attributes {
                return Err(ApiStatus::new(
                    422,
                    "Invalid",
                    "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
                ));
            }
            json!({"allowed": true, "reason": ALLOW_ALL_REASON})
        }
        "SelfSubjectRulesReview" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
        other => {
            return Err(ApiStatus::internal(format!(
                "{other} is not a review the dev cluster answers"
            )));
        }
    };
    let map = review
        .as_object_mut()
        .ok_or_else(|| ApiStatus::bad_request("the review is not a JSON object"))?;
    map.insert("apiVersion".into(), json!(ty.api_version("v1")));
    map.insert("kind".into(), json!(ty.kind));
    map.entry("metadata").or_insert_with(|| json!({}));
    map.insert("status".into(), status);
    Ok(review)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{Registry, ResourceId};

    fn ty(resource: &str) -> ResourceType {
        let registry = Registry::builtin();
        let id = ResourceId::new("authorization.k8s.io", resource);
        ResourceType::clone(registry.get(&id).unwrap())
    }

    #[test]
    fn an_access_review_is_allowed_and_keeps_its_spec() {
        let review = json!({"spec": {"resourceAttributes": {"verb": "create", "resource": "pods", "namespace": "team"}}});
        let answered = answer(&ty("selfsubjectaccessreviews"), review).unwrap();
        assert_eq!(answered["status"]["allowed"], true);
        assert_eq!(answered["status"]["reason"], ALLOW_ALL_REASON);
        assert_eq!(answered["spec"]["resourceAttributes"]["resource"], "pods");
        assert_eq!(answered["apiVersion"], "authorization.k8s.io/v1");
    }

    #[test]
    fn an_access_review_without_attributes_is_invalid() {
        let err = answer(&ty("selfsubjectaccessreviews"), json!({"spec": {}})).unwrap_err();
        assert_eq!(err.to_value()["code"], 422);
    }

    #[test]
    fn a_rules_review_lists_everything() {
        let answered = answer(
            &ty("selfsubjectrulesreviews"),
            json!({"spec": {"namespace": "default"}}),
        )
        .unwrap();
        assert_eq!(
            answered["status"]["resourceRules"][0]["verbs"],
            json!(["*"])
        );
        assert_eq!(answered["status"]["incomplete"], false);
    }
}
