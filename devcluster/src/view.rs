//! How objects are rendered for a request, negotiated from the `Accept` header as the API server
//! does: as stored (at the requested version), as `PartialObjectMetadata` (metadata-only
//! informers, `as=PartialObjectMetadata[List]`), or as a `Table` (`kubectl get`, `as=Table`).

use std::{borrow::Cow, sync::Arc};

use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    resources::ResourceType,
    routes::Query,
    table::{self, IncludeObject},
};

const META_API_VERSION: &str = "meta.k8s.io/v1";

/// The representation a request asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum View {
    /// The objects themselves.
    #[default]
    Full,
    /// `meta.k8s.io/v1` `PartialObjectMetadata` (lists: `PartialObjectMetadataList`).
    Metadata,
    /// A `meta.k8s.io/v1` `Table`.
    Table(IncludeObject),
}

impl View {
    /// The first media type in `accept` that names a representation this server offers.
    pub(crate) fn negotiate(accept: &str, query: &Query) -> Self {
        for media in accept.split(',') {
            let params: Vec<&str> = media.split(';').map(str::trim).collect();
            match params.iter().find_map(|p| p.strip_prefix("as=")) {
                Some("Table") => {
                    return Self::Table(IncludeObject::parse(query.get("includeObject")));
                }
                Some("PartialObjectMetadata" | "PartialObjectMetadataList") => {
                    return Self::Metadata;
                }
                Some(_) => {}
                None if params[0] == "application/json" || params[0] == "*/*" => return Self::Full,
                None => {}
            }
        }
        Self::Full
    }

    /// One object (a GET response or a watch event's object).
    pub(crate) fn object<'a>(
        self,
        ty: &ResourceType,
        api_version: &str,
        object: &'a Arc<Value>,
    ) -> Cow<'a, Value> {
        let object = versioned(object, api_version);
        match self {
            Self::Full => object,
            Self::Metadata => Cow::Owned(partial(&object)),
            Self::Table(include) => {
                let rv = object
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(Value::Null);
                Cow::Owned(table::render(
                    ty,
                    &[&object],
                    include,
                    json!({"resourceVersion": rv}),
                ))
            }
        }
    }

    /// `(apiVersion, kind)` for a bookmark event.
    pub(crate) fn bookmark_type(self, ty: &ResourceType, api_version: &str) -> (String, String) {
        match self {
            Self::Metadata => (META_API_VERSION.into(), "PartialObjectMetadata".into()),
            Self::Full | Self::Table(_) => (api_version.into(), ty.kind.clone()),
        }
    }

    /// A list response body; `metadata` is the list metadata (resourceVersion, continue).
    pub(crate) fn list(
        self,
        ty: &ResourceType,
        api_version: &str,
        items: &[Arc<Value>],
        metadata: Value,
    ) -> serde_json::Result<Vec<u8>> {
        let versioned: Vec<Cow<'_, Value>> =
            items.iter().map(|o| versioned(o, api_version)).collect();
        match self {
            Self::Full => serde_json::to_vec(&ListBody {
                kind: ty.list_kind(),
                api_version: api_version.to_string(),
                metadata,
                items: versioned,
            }),
            Self::Metadata => serde_json::to_vec(&ListBody {
                kind: "PartialObjectMetadataList".into(),
                api_version: META_API_VERSION.into(),
                metadata,
                items: versioned.iter().map(|o| Cow::Owned(partial(o))).collect(),
            }),
            Self::Table(include) => {
                let objects: Vec<&Value> = versioned.iter().map(AsRef::as_ref).collect();
                serde_json::to_vec(&table::render(ty, &objects, include, metadata))
            }
        }
    }
}

#[derive(Serialize)]
struct ListBody<'a> {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    metadata: Value,
    items: Vec<Cow<'a, Value>>,
}

/// The object as served at `api_version` (custom resources may be stored at another version;
/// `events.k8s.io` Events are stored as core Events).
pub(crate) fn versioned<'a>(object: &'a Arc<Value>, api_version: &str) -> Cow<'a, Value> {
    if let Some(converted) = crate::convert::served(object, api_version) {
        Cow::Owned(converted)
    } else if object["apiVersion"].as_str() == Some(api_version) {
        Cow::Borrowed(&**object)
    } else {
        let mut copy = Value::clone(object);
        copy["apiVersion"] = json!(api_version);
        Cow::Owned(copy)
    }
}

fn partial(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": META_API_VERSION,
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{Registry, ResourceId};

    #[test]
    fn negotiation_follows_the_accept_order() {
        let query = Query::default();
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            View::negotiate(table, &query),
            View::Table(IncludeObject::Metadata)
        );
        let metadata = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(View::negotiate(metadata, &query), View::Metadata);
        assert_eq!(
            View::negotiate(
                "application/vnd.kubernetes.protobuf,application/json",
                &query
            ),
            View::Full
        );
        assert_eq!(View::negotiate("", &query), View::Full);
        let discovery =
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
        assert_eq!(View::negotiate(discovery, &query), View::Full);
    }

    #[test]
    fn metadata_view_keeps_only_metadata() {
        let registry = Registry::builtin();
        let pods = registry.get(&ResourceId::core("pods")).unwrap();
        let pod = Arc::new(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "n"}}),
        );
        let rendered = View::Metadata.object(pods, "v1", &pod);
        assert_eq!(
            *rendered,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "p"}})
        );
        let list: Value = serde_json::from_slice(
            &View::Metadata
                .list(pods, "v1", &[pod], json!({"resourceVersion": "3"}))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(list["kind"], "PartialObjectMetadataList");
        assert_eq!(list["items"][0]["metadata"]["name"], "p");
        assert_eq!(list["metadata"]["resourceVersion"], "3");
    }
}
