//! Resolving configured kinds (`apiVersion` + `kind` or `resource`) to API resources.

use std::collections::HashMap;

use kube::Client;
use kube::discovery::{ApiResource, Scope};

use super::RuntimeError;
use crate::config::KindRef;

/// Resolves configured kinds to API resources through the cluster's discovery, cached per
/// group version.
pub struct Discovery {
    client: Client,
    cache: tokio::sync::Mutex<HashMap<String, Vec<(ApiResource, bool)>>>,
}

impl Discovery {
    /// Discovery through `client`.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Default::default(),
        }
    }

    /// The API resource `kind` names for `plugin`, and whether it is namespaced.
    pub async fn resolve(
        &self,
        plugin: &str,
        kind: &KindRef,
    ) -> Result<(ApiResource, bool), RuntimeError> {
        let mut cache = self.cache.lock().await;
        if !cache.contains_key(&kind.api_version) {
            let (group, version) = kind.group_version();
            let gv = kube::core::GroupVersion::gv(group, version);
            let resources = match kube::discovery::oneshot::pinned_group(&self.client, &gv).await {
                Ok(api_group) => api_group
                    .versioned_resources(version)
                    .into_iter()
                    .map(|(resource, caps)| (resource, caps.scope == Scope::Namespaced))
                    .collect(),
                Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
                Err(source) => {
                    return Err(RuntimeError::Discovery {
                        plugin: plugin.to_owned(),
                        kind: kind.to_string(),
                        source,
                    });
                }
            };
            cache.insert(kind.api_version.clone(), resources);
        }
        cache[&kind.api_version]
            .iter()
            .find(|(r, _)| {
                Some(&r.kind) == kind.kind.as_ref() || Some(&r.plural) == kind.resource.as_ref()
            })
            .cloned()
            .ok_or_else(|| RuntimeError::NotServed {
                plugin: plugin.to_owned(),
                kind: kind.to_string(),
            })
    }
}
