//! [`ApiSender`]: sends checked writes to the API server with kube's client, as field manager
//! `wasmformer/<plugin>`, and turns the server's answers into [`WriteError`]s.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy,
};
use kube::discovery::{ApiResource, Scope};
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};

use super::request::{
    Cause, EventType, PatchType, Propagation, RefusedBy, Target, WriteError, WriteRequest,
};
use crate::cache::Gvk;

/// The API server side of every plugin's writes: one client, discovery cached per kind, and
/// one Event recorder per plugin (so repeats aggregate per reporting controller).
pub struct ApiSender {
    client: Client,
    dry_run: bool,
    resources: tokio::sync::Mutex<HashMap<Gvk, (ApiResource, bool)>>,
    recorders: Mutex<HashMap<String, Recorder>>,
}

impl std::fmt::Debug for ApiSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiSender")
            .field("dry_run", &self.dry_run)
            .finish()
    }
}

impl ApiSender {
    /// Sends through `client`; with `dry_run`, every write carries `dryRun=All` (and Events are
    /// logged, not created: the Event API has no dry run in kube's recorder).
    pub fn new(client: Client, dry_run: bool) -> Self {
        Self {
            client,
            dry_run,
            resources: Default::default(),
            recorders: Default::default(),
        }
    }

    /// Sends `request` for `plugin`; returns the object the server stored, as JSON (empty for
    /// delete and Event).
    pub async fn send(&self, plugin: &str, request: &WriteRequest) -> Result<String, WriteError> {
        let manager = super::field_manager(plugin);
        let target = request.target();
        let describe = |e: kube::Error| map_error(e, request.verb(), &target);
        match request {
            WriteRequest::Apply {
                object,
                force,
                status,
            } => {
                let api = self.api(&target).await?;
                let mut params = PatchParams::apply(&manager);
                params.force = *force;
                params.dry_run = self.dry_run;
                let stored = match status {
                    true => {
                        api.patch_status(&target.name, &params, &Patch::Apply(object))
                            .await
                    }
                    false => {
                        api.patch(&target.name, &params, &Patch::Apply(object))
                            .await
                    }
                };
                to_json(stored.map_err(describe)?)
            }
            WriteRequest::Patch {
                patch_type,
                body,
                status,
                ..
            } => {
                let api = self.api(&target).await?;
                let params = PatchParams {
                    dry_run: self.dry_run,
                    field_manager: Some(manager),
                    ..Default::default()
                };
                let patch = match patch_type {
                    PatchType::Merge => Patch::Merge(body.clone()),
                    PatchType::Json => Patch::Json(
                        serde_json::from_value(body.clone())
                            .map_err(|e| WriteError::invalid(format!("not a JSON patch: {e}")))?,
                    ),
                };
                let stored = match status {
                    true => api.patch_status(&target.name, &params, &patch).await,
                    false => api.patch(&target.name, &params, &patch).await,
                };
                to_json(stored.map_err(describe)?)
            }
            WriteRequest::Create { object } => {
                let api = self.api(&target).await?;
                let object: DynamicObject = serde_json::from_value(object.clone())
                    .map_err(|e| WriteError::invalid(format!("not an object: {e}")))?;
                let params = PostParams {
                    dry_run: self.dry_run,
                    field_manager: Some(manager),
                };
                to_json(api.create(&params, &object).await.map_err(describe)?)
            }
            WriteRequest::Delete {
                propagation,
                uid,
                resource_version,
                ..
            } => {
                let api = self.api(&target).await?;
                let params = DeleteParams {
                    dry_run: self.dry_run,
                    propagation_policy: match propagation {
                        Propagation::Default => None,
                        Propagation::Background => Some(PropagationPolicy::Background),
                        Propagation::Foreground => Some(PropagationPolicy::Foreground),
                        Propagation::Orphan => Some(PropagationPolicy::Orphan),
                    },
                    preconditions: (uid.is_some() || resource_version.is_some()).then(|| {
                        Preconditions {
                            uid: uid.clone(),
                            resource_version: resource_version.clone(),
                        }
                    }),
                    ..Default::default()
                };
                api.delete(&target.name, &params).await.map_err(describe)?;
                Ok(String::new())
            }
            WriteRequest::Event {
                regarding,
                event_type,
                reason,
                action,
                note,
            } => {
                if self.dry_run {
                    tracing::info!(plugin.id = %plugin, object.ref = %regarding, event.reason = %reason, "dry run: event not created");
                    return Ok(String::new());
                }
                let recorder = self.recorder(plugin);
                let event = Event {
                    type_: match event_type {
                        EventType::Normal => KubeEventType::Normal,
                        EventType::Warning => KubeEventType::Warning,
                    },
                    reason: reason.clone(),
                    note: (!note.is_empty()).then(|| note.clone()),
                    action: action.clone(),
                    secondary: None,
                };
                let reference = ObjectReference {
                    api_version: Some(regarding.api_version.clone()),
                    kind: Some(regarding.kind.clone()),
                    namespace: (!regarding.namespace.is_empty())
                        .then(|| regarding.namespace.clone()),
                    name: Some(regarding.name.clone()),
                    uid: (!regarding.uid.is_empty()).then(|| regarding.uid.clone()),
                    ..Default::default()
                };
                recorder
                    .publish(&event, &reference)
                    .await
                    .map_err(|e| map_error(e, "create event about", regarding))?;
                Ok(String::new())
            }
        }
    }

    fn recorder(&self, plugin: &str) -> Recorder {
        let mut recorders = self.recorders.lock().expect("recorders lock");
        recorders
            .entry(plugin.to_owned())
            .or_insert_with(|| {
                let reporter = Reporter {
                    controller: super::field_manager(plugin),
                    instance: std::env::var("HOSTNAME").ok(),
                };
                Recorder::new(self.client.clone(), reporter)
            })
            .clone()
    }

    /// The API for `target`'s kind and namespace, discovered once per kind.
    async fn api(&self, target: &Target) -> Result<Api<DynamicObject>, WriteError> {
        let gvk = target.gvk();
        let mut resources = self.resources.lock().await;
        if !resources.contains_key(&gvk) {
            let query = kube::core::GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
            let (resource, caps) = kube::discovery::oneshot::pinned_kind(&self.client, &query)
                .await
                .map_err(|e| match e {
                    kube::Error::Discovery(_) => {
                        WriteError::invalid(format!("the cluster does not serve {gvk}"))
                    }
                    e => map_error(e, "discover", target),
                })?;
            resources.insert(gvk.clone(), (resource, caps.scope == Scope::Namespaced));
        }
        let (resource, namespaced) = &resources[&gvk];
        Ok(match (namespaced, target.namespace.is_empty()) {
            (true, false) => Api::namespaced_with(self.client.clone(), &target.namespace, resource),
            (true, true) => {
                return Err(WriteError::invalid(format!(
                    "{gvk} is namespaced: metadata.namespace is required"
                )));
            }
            (false, _) => Api::all_with(self.client.clone(), resource),
        })
    }
}

fn to_json(object: DynamicObject) -> Result<String, WriteError> {
    serde_json::to_string(&object)
        .map_err(|e| WriteError::Unavailable(format!("cannot encode the server's answer: {e}")))
}

/// The server's answer as a [`WriteError`]: 403 is RBAC, told apart from a grant refusal.
pub(crate) fn map_error(error: kube::Error, verb: &str, target: &Target) -> WriteError {
    let kube::Error::Api(status) = error else {
        return WriteError::Unavailable(format!("{verb} {target}: {}", crate::error_chain(&error)));
    };
    let causes: Vec<Cause> = status
        .details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| Cause {
                    field: c.field.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let message = status.message.clone();
    match status.code {
        403 => WriteError::Forbidden {
            by: RefusedBy::Server,
            message: format!(
                "the API server's RBAC refused {verb} {target} for the host's credentials: {message}"
            ),
        },
        404 => WriteError::NotFound(message),
        409 => WriteError::Conflict { message, causes },
        400 | 422 => WriteError::Invalid { message, causes },
        429 => WriteError::Throttled(format!("the API server answered 429: {message}")),
        code => WriteError::Unavailable(format!("the API server answered {code}: {message}")),
    }
}
