//! The mutations behind [`Store`](super::Store), run under its lock: create (scope and
//! namespace checks, CRD registration), replace (preconditions, status rules, no-op detection,
//! finalizer completion) and delete (preconditions, finalizers, namespace and CRD cascades).
//! Each committed change gets the next resourceVersion and a history event.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    Deletion, Error, EventKind, NameKey, ObjectKey, Part, Preconditions, Propagation, Result,
    SYSTEM_NAMESPACES, State, StoredEvent,
    admission::{self, meta_str, metadata_mut},
    crd,
};
use crate::resources::{ResourceId, ResourceType};

impl State {
    pub(super) fn ty(&self, id: &ResourceId) -> Result<Arc<ResourceType>> {
        self.registry
            .get(id)
            .cloned()
            .ok_or_else(|| Error::UnknownResource {
                resource: id.clone(),
            })
    }

    pub(super) fn current(&self, key: &ObjectKey) -> Result<&Arc<Value>> {
        self.objects
            .get(&key.resource)
            .and_then(|objects| objects.get(&key.name_key()))
            .ok_or_else(|| Error::NotFound {
                resource: key.resource.clone(),
                name: key.name.clone(),
            })
    }

    /// Stamps the next resourceVersion, stores (or removes) the object and records the event.
    pub(super) fn commit(
        &mut self,
        resource: &ResourceId,
        key: NameKey,
        mut object: Value,
        kind: EventKind,
        previous: Option<Arc<Value>>,
    ) -> Arc<Value> {
        self.resource_version += 1;
        let rv = self.resource_version;
        metadata_mut(&mut object).insert("resourceVersion".into(), json!(rv.to_string()));
        let object = Arc::new(object);
        let objects = self.objects.entry(resource.clone()).or_default();
        if kind == EventKind::Deleted {
            objects.remove(&key);
        } else {
            objects.insert(key.clone(), object.clone());
        }
        self.history.push(StoredEvent {
            resource_version: rv,
            kind,
            resource: resource.clone(),
            key,
            object: object.clone(),
            previous,
        });
        object
    }

    pub(super) fn create(
        &mut self,
        resource: &ResourceId,
        namespace: Option<&str>,
        mut object: Value,
    ) -> Result<Arc<Value>> {
        let ty = self.ty(resource)?;
        let namespace = if ty.namespaced {
            let in_body = if object.is_object() {
                meta_str(&object, "namespace")
            } else {
                ""
            };
            let ns = match namespace.filter(|ns| !ns.is_empty()) {
                Some(ns) if !in_body.is_empty() && in_body != ns => {
                    return Err(Error::BadRequest {
                        message: "the namespace of the provided object does not match the namespace sent on the request".into(),
                    });
                }
                Some(ns) => ns.to_string(),
                None if !in_body.is_empty() => in_body.to_string(),
                None => {
                    return Err(Error::BadRequest {
                        message: format!("a namespace is required to create {}", ty.id),
                    });
                }
            };
            let namespace_key = ObjectKey::new(ResourceId::namespaces(), None, ns.clone());
            let namespace_object = self.current(&namespace_key)?;
            if !meta_str(namespace_object, "deletionTimestamp").is_empty() {
                return Err(Error::Forbidden {
                    resource: ty.id.clone(),
                    name: String::new(),
                    reason: format!(
                        "unable to create new content in namespace {ns} because it is being terminated"
                    ),
                });
            }
            Some(ns)
        } else {
            None
        };
        admission::prepare_create(
            &ty,
            &mut object,
            ty.preferred_version(),
            namespace.as_deref(),
            &mut self.ids,
        )?;
        let key = (
            namespace.unwrap_or_default(),
            meta_str(&object, "name").to_string(),
        );
        if self
            .objects
            .get(resource)
            .is_some_and(|objects| objects.contains_key(&key))
        {
            return Err(Error::AlreadyExists {
                resource: resource.clone(),
                name: key.1,
            });
        }
        if resource.is_crd() {
            self.registry.insert(crd::type_from_crd(&object)?);
        }
        Ok(self.commit(resource, key, object, EventKind::Added, None))
    }

    pub(super) fn replace(
        &mut self,
        key: &ObjectKey,
        mut object: Value,
        part: Part,
    ) -> Result<Arc<Value>> {
        let ty = self.ty(&key.resource)?;
        if part == Part::Status && !ty.status_subresource {
            return Err(Error::UnknownResource {
                resource: ResourceId::new(
                    ty.id.group.as_str(),
                    format!("{}/status", ty.id.resource),
                ),
            });
        }
        let current = self.current(key)?.clone();
        if !object.is_object() {
            return Err(Error::BadRequest {
                message: "the request body must be a JSON object".into(),
            });
        }
        let conflict = |reason: String| Error::Conflict {
            resource: key.resource.clone(),
            name: key.name.clone(),
            reason,
        };
        for (field, expected) in [
            ("name", key.name.as_str()),
            ("namespace", key.namespace.as_deref().unwrap_or("")),
        ] {
            let given = meta_str(&object, field);
            if !given.is_empty() && given != expected {
                return Err(Error::BadRequest {
                    message: format!(
                        "the {field} of the object ({given}) does not match the {field} on the URL ({expected})"
                    ),
                });
            }
        }
        let (given_rv, current_rv) = (
            meta_str(&object, "resourceVersion"),
            meta_str(&current, "resourceVersion"),
        );
        if !given_rv.is_empty() && given_rv != current_rv {
            return Err(conflict(
                "the object has been modified; please apply your changes to the latest version and try again".into(),
            ));
        }
        let (given_uid, current_uid) = (meta_str(&object, "uid"), meta_str(&current, "uid"));
        if !given_uid.is_empty() && given_uid != current_uid {
            return Err(conflict(format!(
                "Precondition failed: UID in precondition: {given_uid}, UID in object meta: {current_uid}"
            )));
        }
        admission::prepare_update(&ty, &current, &mut object, part)?;
        if key.resource.is_crd() {
            self.registry.insert(crd::type_from_crd(&object)?);
        }
        if object == *current {
            return Ok(current);
        }
        let finalized =
            !meta_str(&object, "deletionTimestamp").is_empty() && finalizers_of(&object).is_empty();
        if finalized {
            // As etcd's delete event: the object as it was stored last.
            return Ok(self.remove(key, Value::clone(&current), current));
        }
        Ok(self.commit(
            &key.resource,
            key.name_key(),
            object,
            EventKind::Modified,
            Some(current),
        ))
    }

    /// Deletes the object now, cascading to what it owns (namespace contents, CRD objects).
    fn remove(&mut self, key: &ObjectKey, last: Value, current: Arc<Value>) -> Arc<Value> {
        if key.resource.is_namespace() {
            let contained: Vec<(ResourceId, NameKey)> = self
                .objects
                .iter()
                .flat_map(|(resource, objects)| {
                    objects
                        .keys()
                        .filter(|(ns, _)| *ns == key.name)
                        .map(move |k| (resource.clone(), k.clone()))
                })
                .collect();
            for (resource, name_key) in contained {
                let object = self.objects[&resource][&name_key].clone();
                self.commit(
                    &resource,
                    name_key,
                    Value::clone(&object),
                    EventKind::Deleted,
                    Some(object),
                );
            }
        }
        let defined = key
            .resource
            .is_crd()
            .then(|| crd::type_from_crd(&current).ok())
            .flatten();
        if let Some(defined) = &defined {
            let owned: Vec<(NameKey, Arc<Value>)> = self
                .objects
                .get(&defined.id)
                .map(|objects| {
                    objects
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            for (name_key, object) in owned {
                self.commit(
                    &defined.id,
                    name_key,
                    Value::clone(&object),
                    EventKind::Deleted,
                    Some(object),
                );
            }
        }
        let deleted = self.commit(
            &key.resource,
            key.name_key(),
            last,
            EventKind::Deleted,
            Some(current),
        );
        if let Some(defined) = defined {
            self.registry.remove(&defined.id);
            self.objects.remove(&defined.id);
        }
        deleted
    }

    pub(super) fn delete(
        &mut self,
        key: &ObjectKey,
        preconditions: &Preconditions,
        propagation: Propagation,
        graceful: bool,
    ) -> Result<Deletion> {
        self.ty(&key.resource)?;
        let current = self.current(key)?.clone();
        let conflict = |what: &str, expected: &str, field: &str| Error::Conflict {
            resource: key.resource.clone(),
            name: key.name.clone(),
            reason: format!(
                "Precondition failed: {what} in precondition: {expected}, {what} in object meta: {}",
                meta_str(&current, field)
            ),
        };
        if let Some(uid) = &preconditions.uid
            && uid != meta_str(&current, "uid")
        {
            return Err(conflict("UID", uid, "uid"));
        }
        if let Some(rv) = &preconditions.resource_version
            && rv != meta_str(&current, "resourceVersion")
        {
            return Err(conflict("ResourceVersion", rv, "resourceVersion"));
        }
        if key.resource.is_namespace() && SYSTEM_NAMESPACES[..3].contains(&key.name.as_str()) {
            return Err(Error::Forbidden {
                resource: key.resource.clone(),
                name: key.name.clone(),
                reason: "this namespace may not be deleted".into(),
            });
        }
        let mut finalizers = finalizers_of(&current);
        let deleting = !meta_str(&current, "deletionTimestamp").is_empty();
        if let Some(finalizer) = propagation.finalizer()
            && !deleting
            && !finalizers.iter().any(|f| f == finalizer)
        {
            finalizers.push(json!(finalizer));
        }
        let has_finalizers = !finalizers.is_empty();
        if !has_finalizers && graceful && !deleting && key.resource == ResourceId::core("pods") {
            // A Pod's graceful deletion with no kubelet to wait for (the API server's answer for
            // an unscheduled Pod; KWOK's kubelet confirms at once): marked, then removed.
            let mut marked = Value::clone(&current);
            let meta = metadata_mut(&mut marked);
            meta.insert("deletionTimestamp".into(), json!(admission::now()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            if let Some(generation) = meta.get("generation").and_then(Value::as_i64) {
                meta.insert("generation".into(), json!(generation + 1));
            }
            let marked = self.commit(
                &key.resource,
                key.name_key(),
                marked,
                EventKind::Modified,
                Some(current),
            );
            return Ok(Deletion::Deleted(self.remove(
                key,
                Value::clone(&marked),
                marked,
            )));
        }
        if !has_finalizers {
            return Ok(Deletion::Deleted(self.remove(
                key,
                Value::clone(&current),
                current,
            )));
        }
        if deleting {
            return Ok(Deletion::Finalizing(current));
        }
        let mut marked = Value::clone(&current);
        let meta = metadata_mut(&mut marked);
        if key.resource.is_namespace() {
            // As the namespace registry: only the timestamp and the phase; the namespace
            // controller empties it, then removes its `spec.finalizers`.
            meta.insert("deletionTimestamp".into(), json!(admission::now()));
            marked["status"]["phase"] = json!("Terminating");
        } else {
            meta.insert("finalizers".into(), Value::Array(finalizers));
            meta.insert("deletionTimestamp".into(), json!(admission::now()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            if let Some(generation) = meta.get("generation").and_then(Value::as_i64) {
                meta.insert("generation".into(), json!(generation + 1));
            }
        }
        let marked = self.commit(
            &key.resource,
            key.name_key(),
            marked,
            EventKind::Modified,
            Some(current),
        );
        Ok(Deletion::Finalizing(marked))
    }
}

/// What keeps an object with a `deletionTimestamp` stored: `metadata.finalizers`, and for a
/// namespace also `spec.finalizers` (the namespace controller's `kubernetes`), as the namespace
/// registry deletes a namespace during an update only when both are empty.
fn finalizers_of(object: &Value) -> Vec<Value> {
    let list = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut finalizers = list("/metadata/finalizers");
    if object["kind"] == "Namespace" {
        finalizers.extend(list("/spec/finalizers"));
    }
    finalizers
}
