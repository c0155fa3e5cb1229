//! The namespace controller: empties a namespace being deleted (`Terminating`), deleting every
//! object in it in the background (objects with finalizers stay until theirs are removed), then,
//! once nothing is left, removes its `kubernetes` entry from `spec.finalizers`, which deletes the
//! namespace. Namespaces of the workload simulator are emptied too.

use super::{
    object::{deleting, key_of, meta},
    tolerate,
};
use crate::{
    resources::ResourceId,
    store::{NAMESPACE_FINALIZER, ObjectKey, Part, Preconditions, Propagation, Result, Store},
};

/// One pass over the namespaces being deleted.
pub(super) fn sync(store: &Store) -> Result<()> {
    let (namespaces, _) = store.list(&ResourceId::namespaces(), None)?;
    let registry = store.registry();
    for namespace in namespaces.iter().filter(|n| deleting(n)) {
        let name = meta(namespace, "name");
        let mut remaining = 0;
        for ty in registry.iter().filter(|t| t.namespaced && !t.create_only) {
            let (objects, _) = store.list(&ty.id, Some(name))?;
            remaining += objects.len();
            for object in objects.iter().filter(|o| !deleting(o)) {
                tolerate(store.delete_propagating(
                    &key_of(&ty.id, object),
                    &Preconditions::default(),
                    Propagation::Background,
                ))?;
            }
        }
        let finalizing = namespace["spec"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == NAMESPACE_FINALIZER));
        if remaining == 0 && finalizing {
            let key = ObjectKey::new(ResourceId::namespaces(), None, name);
            tolerate(store.modify(&key, Part::Whole, |ns| {
                if let Some(list) = ns["spec"]["finalizers"].as_array_mut() {
                    list.retain(|f| f != NAMESPACE_FINALIZER);
                }
            }))?;
        }
    }
    Ok(())
}
