//! URL layout of the Kubernetes API: which path is discovery, which addresses a collection, an
//! object or a subresource, and the query string. Pure parsing; no state.

use std::collections::BTreeMap;

/// A request path, classified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/version`.
    Version,
    /// `/healthz`, `/livez`, `/readyz`.
    Health,
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/openapi/v3` (the index) or `/openapi/v3/{path}` (one group-version's document).
    OpenApiV3(Option<String>),
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/{group}`.
    Group(String),
    /// `/api/v1`, `/apis/{group}/{version}`.
    Resources { group: String, version: String },
    /// A collection, object or subresource.
    Resource(ResourcePath),
    /// `/wasmformer-dev/...`: the dev cluster's own control endpoints.
    Control(Vec<String>),
    /// Anything else.
    Unknown,
}

/// A resource URL: `/apis/{group}/{version}[/namespaces/{ns}]/{resource}[/{name}[/{sub}]]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The deprecated `/watch/` path form.
    pub watch_prefix: bool,
}

/// Classifies a request path.
pub(crate) fn parse(path: &str) -> Route {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3(None),
        ["openapi", "v3", rest @ ..] => Route::OpenApiV3(Some(rest.join("/"))),
        ["wasmformer-dev", rest @ ..] => {
            Route::Control(rest.iter().map(|s| s.to_string()).collect())
        }
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", group] => Route::Group(group.to_string()),
        ["api", version] => Route::Resources {
            group: String::new(),
            version: version.to_string(),
        },
        ["apis", group, version] => Route::Resources {
            group: group.to_string(),
            version: version.to_string(),
        },
        ["api", version, rest @ ..] => resource("", version, rest),
        ["apis", group, version, rest @ ..] => resource(group, version, rest),
        _ => Route::Unknown,
    }
}

fn resource(group: &str, version: &str, rest: &[&str]) -> Route {
    let (watch_prefix, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let path = |namespace: Option<&str>, resource: &str, name: Option<&str>, sub: Option<&str>| {
        Route::Resource(ResourcePath {
            group: group.to_string(),
            version: version.to_string(),
            namespace: namespace.map(String::from),
            resource: resource.to_string(),
            name: name.map(String::from),
            subresource: sub.map(String::from),
            watch_prefix,
        })
    };
    match rest {
        [resource] => path(None, resource, None, None),
        ["namespaces", name, sub @ ("status" | "finalize")] => {
            path(None, "namespaces", Some(name), Some(sub))
        }
        ["namespaces", ns, resource] => path(Some(ns), resource, None, None),
        ["namespaces", ns, resource, name] => path(Some(ns), resource, Some(name), None),
        ["namespaces", ns, resource, name, sub] => path(Some(ns), resource, Some(name), Some(sub)),
        [resource, name] => path(None, resource, Some(name), None),
        [resource, name, sub] => path(None, resource, Some(name), Some(sub)),
        _ => Route::Unknown,
    }
}

/// Decoded query parameters; the last value of a repeated key wins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Query {
    pairs: BTreeMap<String, String>,
}

impl Query {
    pub(crate) fn parse(raw: Option<&str>) -> Self {
        Self {
            pairs: raw
                .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
                .unwrap_or_default(),
        }
    }

    /// A non-empty parameter.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// A boolean parameter (`true`/`1`, `false`/`0`); `None` when absent or unrecognised.
    pub(crate) fn flag(&self, key: &str) -> Option<bool> {
        match self.get(key)? {
            "true" | "1" => Some(true),
            "false" | "0" => Some(false),
            _ => None,
        }
    }

    pub(crate) fn pairs(&self) -> &BTreeMap<String, String> {
        &self.pairs
    }

    /// This query without the parameters `keys`.
    pub(crate) fn without(mut self, keys: &[String]) -> Self {
        for key in keys {
            self.pairs.remove(key);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource_path(path: &str) -> ResourcePath {
        match parse(path) {
            Route::Resource(p) => p,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn discovery_paths() {
        assert_eq!(parse("/version"), Route::Version);
        assert_eq!(parse("/api"), Route::CoreVersions);
        assert_eq!(parse("/apis"), Route::Groups);
        assert_eq!(parse("/apis/apps"), Route::Group("apps".into()));
        assert_eq!(
            parse("/api/v1"),
            Route::Resources {
                group: String::new(),
                version: "v1".into()
            }
        );
        assert_eq!(
            parse("/apis/apps/v1/"),
            Route::Resources {
                group: "apps".into(),
                version: "v1".into()
            }
        );
        assert_eq!(
            parse("/openapi/v3/apis/apps/v1"),
            Route::OpenApiV3(Some("apis/apps/v1".into()))
        );
        assert_eq!(parse("/openapi/v3"), Route::OpenApiV3(None));
        assert_eq!(parse("/openapi/v2"), Route::OpenApiV2);
        assert_eq!(
            parse("/wasmformer-dev/faults/pause"),
            Route::Control(vec!["faults".into(), "pause".into()])
        );
        assert_eq!(parse("/nothing/here"), Route::Unknown);
    }

    #[test]
    fn namespaced_and_cluster_resource_paths() {
        let p = resource_path("/api/v1/namespaces/default/pods/web/status");
        assert_eq!(
            (p.namespace.as_deref(), p.resource.as_str()),
            (Some("default"), "pods")
        );
        assert_eq!(
            (p.name.as_deref(), p.subresource.as_deref()),
            (Some("web"), Some("status"))
        );
        let p = resource_path("/apis/apps/v1/deployments");
        assert_eq!(
            (p.group.as_str(), p.namespace, p.name),
            ("apps", None, None)
        );
        let p = resource_path("/api/v1/nodes/n1");
        assert_eq!(
            (p.resource.as_str(), p.name.as_deref()),
            ("nodes", Some("n1"))
        );
    }

    #[test]
    fn the_namespaces_resource_itself() {
        let p = resource_path("/api/v1/namespaces/team");
        assert_eq!(
            (p.namespace, p.resource.as_str(), p.name.as_deref()),
            (None, "namespaces", Some("team"))
        );
        let p = resource_path("/api/v1/namespaces/team/status");
        assert_eq!(
            (p.resource.as_str(), p.subresource.as_deref()),
            ("namespaces", Some("status"))
        );
        let p = resource_path("/api/v1/namespaces/team/configmaps");
        assert_eq!(
            (p.namespace.as_deref(), p.resource.as_str()),
            (Some("team"), "configmaps")
        );
    }

    #[test]
    fn legacy_watch_prefix() {
        let p = resource_path("/api/v1/watch/namespaces/default/pods");
        assert!(p.watch_prefix);
        assert_eq!(p.resource, "pods");
    }

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Ctier+in+(a)&watch=1&limit=&x=false",
        ));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a)"));
        assert_eq!(q.flag("watch"), Some(true));
        assert_eq!(q.flag("x"), Some(false));
        assert_eq!(q.get("limit"), None);
        assert_eq!(q.flag("missing"), None);
    }
}
