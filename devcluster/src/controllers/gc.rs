//! The garbage collector: deletes objects whose owners (every `ownerReferences` uid) are gone
//! (background propagation); for an owner being deleted with the `foregroundDeletion` finalizer,
//! deletes its dependents (foreground, so theirs go first) and removes the finalizer once none is
//! left; for the `orphan` finalizer, removes the owner from its dependents' `ownerReferences`,
//! then the finalizer.

use std::{collections::HashSet, sync::Arc};

use serde_json::Value;

use super::{
    object::{deleting, key_of, meta},
    tolerate,
};
use crate::{
    resources::ResourceId,
    store::{
        FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Part, Preconditions, Propagation, Result, Store,
    },
};

fn owner_uids(object: &Value) -> Vec<&str> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str())
        .collect()
}

fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

fn remove_finalizer(
    store: &Store,
    resource: &ResourceId,
    object: &Value,
    finalizer: &str,
) -> Result<()> {
    tolerate(store.modify(&key_of(resource, object), Part::Main, |o| {
        if let Some(list) = o["metadata"]["finalizers"].as_array_mut() {
            list.retain(|f| f != finalizer);
        }
    }))?;
    Ok(())
}

/// One pass over every object of every stored type.
pub(super) fn sync(store: &Store) -> Result<()> {
    let registry = store.registry();
    let mut all: Vec<(ResourceId, Arc<Value>)> = Vec::new();
    for ty in registry.iter().filter(|t| !t.create_only) {
        let (objects, _) = store.list(&ty.id, None)?;
        all.extend(objects.into_iter().map(|o| (ty.id.clone(), o)));
    }
    let simulated: HashSet<String> = all
        .iter()
        .filter(|(r, o)| {
            r.is_namespace()
                && o["metadata"]["labels"]["app.kubernetes.io/managed-by"]
                    == crate::simulate::MANAGED_BY
        })
        .map(|(_, o)| meta(o, "name").to_string())
        .collect();
    all.retain(|(_, o)| !simulated.contains(meta(o, "namespace")));
    let all = all;
    let uids: HashSet<&str> = all.iter().map(|(_, o)| meta(o, "uid")).collect();
    let dependents_of = |uid: &str| {
        all.iter()
            .filter(move |(_, o)| owner_uids(o).contains(&uid))
            .collect::<Vec<_>>()
    };
    for (resource, object) in &all {
        let uid = meta(object, "uid");
        if deleting(object) && has_finalizer(object, FOREGROUND_FINALIZER) {
            let dependents = dependents_of(uid);
            if dependents.is_empty() {
                remove_finalizer(store, resource, object, FOREGROUND_FINALIZER)?;
            }
            for (dependent_resource, dependent) in dependents {
                if !deleting(dependent) {
                    // As Kubernetes' collector: foreground again only where there is more to wait for.
                    let propagation = if dependents_of(meta(dependent, "uid")).is_empty() {
                        Propagation::Background
                    } else {
                        Propagation::Foreground
                    };
                    tolerate(store.delete_propagating(
                        &key_of(dependent_resource, dependent),
                        &Preconditions::default(),
                        propagation,
                    ))?;
                }
            }
        } else if deleting(object) && has_finalizer(object, ORPHAN_FINALIZER) {
            for (dependent_resource, dependent) in dependents_of(uid) {
                tolerate(
                    store.modify(&key_of(dependent_resource, dependent), Part::Main, |o| {
                        if let Some(refs) = o["metadata"]["ownerReferences"].as_array_mut() {
                            refs.retain(|r| r["uid"] != uid);
                        }
                        if o["metadata"]["ownerReferences"]
                            .as_array()
                            .is_some_and(Vec::is_empty)
                            && let Some(meta) = o["metadata"].as_object_mut()
                        {
                            meta.remove("ownerReferences");
                        }
                    }),
                )?;
            }
            remove_finalizer(store, resource, object, ORPHAN_FINALIZER)?;
        } else {
            let owners = owner_uids(object);
            if !owners.is_empty() && !deleting(object) && owners.iter().all(|u| !uids.contains(u)) {
                tolerate(store.delete_propagating(
                    &key_of(resource, object),
                    &Preconditions::default(),
                    Propagation::Background,
                ))?;
            }
        }
    }
    Ok(())
}
