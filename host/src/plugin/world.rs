//! The contract worlds the host links: the current ones (`wit/`, 0.3.x: `plugin`, and
//! `controller`, which adds the `reconciler` export) and the frozen 0.2.x one (`host/wit-0.2/`),
//! so plugins built before `writer` load unchanged. A plugin is instantiated in the world its
//! `handler` export was built for, and in `controller` if it exports `reconciler`; events cross
//! as the same two strings in all.

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::bindings::{self, wasmformer::plugin::types};
use super::bindings_controller::{self, exports::wasmformer::plugin::reconciler};
use super::bindings_v02;
use super::host::HostState;
use super::host::wit_object;
use crate::cache::{Event, Gvk};

/// A plugin's pre-instantiated handle, in its world.
#[derive(Clone)]
pub(crate) enum Pre {
    /// Built for 0.3.x.
    Current(bindings::PluginPre<HostState>),
    /// Built for 0.3.1 or later, exporting `reconciler`.
    Controller(bindings_controller::ControllerPre<HostState>),
    /// Built for 0.2.x.
    V02(bindings_v02::PluginPre<HostState>),
}

impl Pre {
    /// The handle for a component whose handler export is version `0.<minor>.x`, and which
    /// exports `reconciler` if `reconciler`.
    pub fn new(
        minor: u64,
        reconciler: bool,
        instance_pre: InstancePre<HostState>,
    ) -> wasmtime::Result<Self> {
        Ok(match (minor, reconciler) {
            (2, _) => Self::V02(bindings_v02::PluginPre::new(instance_pre)?),
            (_, true) => Self::Controller(bindings_controller::ControllerPre::new(instance_pre)?),
            (_, false) => Self::Current(bindings::PluginPre::new(instance_pre)?),
        })
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            Self::Current(pre) => pre.engine(),
            Self::Controller(pre) => pre.engine(),
            Self::V02(pre) => pre.engine(),
        }
    }

    /// Whether the plugin exports `reconciler`.
    pub fn reconciles(&self) -> bool {
        matches!(self, Self::Controller(_))
    }

    pub fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Bindings> {
        Ok(match self {
            Self::Current(pre) => Bindings::Current(pre.instantiate(store)?),
            Self::Controller(pre) => Bindings::Controller(pre.instantiate(store)?),
            Self::V02(pre) => Bindings::V02(pre.instantiate(store)?),
        })
    }
}

/// A live instance's exports, in its world.
pub(crate) enum Bindings {
    Current(bindings::Plugin),
    Controller(bindings_controller::Controller),
    V02(bindings_v02::Plugin),
}

/// What a reconcile returned: `Ok(requeue-after)` or `Err((message, retry))`.
pub(crate) type ReconcileReturn = Result<Option<std::time::Duration>, (String, bool)>;

/// Calls one handler export (the `plugin` and `controller` worlds generate the same methods on
/// different types).
macro_rules! call_handler {
    ($handler:expr, $store:expr, $gvk:expr, $event:expr) => {{
        let handler = $handler;
        match $event {
            Event::Add { obj, initial } => {
                handler.call_on_add($store, &wit_object($gvk, obj), *initial)
            }
            Event::Update { old, new } => {
                handler.call_on_update($store, &wit_object($gvk, old), &wit_object($gvk, new))
            }
            Event::Delete {
                obj,
                final_state_unknown,
            } => handler.call_on_delete($store, &wit_object($gvk, obj), *final_state_unknown),
            // The contract has no export for it: nothing to call.
            Event::Synced => Ok(Ok(())),
        }
    }};
}

fn legacy(obj: types::Object) -> bindings_v02::wasmformer::plugin::types::Object {
    bindings_v02::wasmformer::plugin::types::Object {
        meta: obj.meta,
        body: obj.body,
    }
}

impl Bindings {
    pub fn call_init(
        &self,
        store: &mut Store<HostState>,
        config: &str,
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            Self::Current(b) => b.wasmformer_plugin_handler().call_init(store, config),
            Self::Controller(b) => b.wasmformer_plugin_handler().call_init(store, config),
            Self::V02(b) => b.wasmformer_plugin_handler().call_init(store, config),
        }
    }

    pub fn call_event(
        &self,
        store: &mut Store<HostState>,
        gvk: &Gvk,
        event: &Event,
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            Self::Current(b) => call_handler!(b.wasmformer_plugin_handler(), store, gvk, event),
            Self::Controller(b) => {
                call_handler!(b.wasmformer_plugin_handler(), store, gvk, event)
            }
            Self::V02(b) => {
                let handler = b.wasmformer_plugin_handler();
                let object = |o| legacy(wit_object(gvk, o));
                match event {
                    Event::Add { obj, initial } => {
                        handler.call_on_add(store, &object(obj), *initial)
                    }
                    Event::Update { old, new } => {
                        handler.call_on_update(store, &object(old), &object(new))
                    }
                    Event::Delete {
                        obj,
                        final_state_unknown,
                    } => handler.call_on_delete(store, &object(obj), *final_state_unknown),
                    Event::Synced => Ok(Ok(())),
                }
            }
        }
    }

    /// Calls `reconcile` (`None`: the plugin does not export it).
    pub fn call_reconcile(
        &self,
        store: &mut Store<HostState>,
        gvk: &Gvk,
        namespace: &str,
        name: &str,
    ) -> Option<wasmtime::Result<ReconcileReturn>> {
        let Self::Controller(b) = self else {
            return None;
        };
        let key = reconciler::ObjectRef {
            kind: types::Gvk {
                group: gvk.group.clone(),
                version: gvk.version.clone(),
                kind: gvk.kind.clone(),
            },
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        let result = b.wasmformer_plugin_reconciler().call_reconcile(store, &key);
        Some(result.map(|r| {
            r.map(|ok| ok.requeue_after.map(std::time::Duration::from_nanos))
                .map_err(|e| (e.message, e.retry))
        }))
    }
}
