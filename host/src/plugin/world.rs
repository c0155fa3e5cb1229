//! The contract worlds the host links: the current ones (`wit/`, 0.3.x: `plugin`, and
//! `controller`, which adds the `reconciler` export) and the frozen 0.2.x one (`host/wit-0.2/`),
//! so plugins built before `writer` load unchanged. A plugin is instantiated in the world its
//! `handler` export was built for, and in `controller` if it exports `reconciler`; events cross
//! as the same two strings in all. The optional `state` export (0.3.2) is loaded beside the
//! world, from the same instance.

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::bindings_state::{StateExport, StateExportIndices};

use super::bindings::{self, wasmformer::plugin::types};
use super::bindings_controller::{self, exports::wasmformer::plugin::reconciler};
use super::bindings_v02;
use super::host::HostState;
use super::host::wit_object;
use crate::cache::{Event, Gvk};

/// A plugin's pre-instantiated handle, in its world, with the `state` export's indices if it
/// exports `state`.
#[derive(Clone)]
pub(crate) struct Pre {
    instance_pre: InstancePre<HostState>,
    world: WorldIndices,
    state: Option<std::sync::Arc<StateExportIndices>>,
}

/// Where a world's exports are in the component.
#[derive(Clone)]
enum WorldIndices {
    /// Built for 0.3.x.
    Current(std::sync::Arc<bindings::PluginIndices>),
    /// Built for 0.3.1 or later, exporting `reconciler`.
    Controller(std::sync::Arc<bindings_controller::ControllerIndices>),
    /// Built for 0.2.x.
    V02(std::sync::Arc<bindings_v02::PluginIndices>),
}

impl Pre {
    /// The handle for a component whose handler export is version `0.<minor>.x`, and which
    /// exports `reconciler` if `reconciler`, and `state` if `state`.
    pub fn new(
        minor: u64,
        reconciler: bool,
        state: bool,
        instance_pre: InstancePre<HostState>,
    ) -> wasmtime::Result<Self> {
        use std::sync::Arc;
        let world = match (minor, reconciler) {
            (2, _) => WorldIndices::V02(Arc::new(bindings_v02::PluginIndices::new(&instance_pre)?)),
            (_, true) => WorldIndices::Controller(Arc::new(
                bindings_controller::ControllerIndices::new(&instance_pre)?,
            )),
            (_, false) => {
                WorldIndices::Current(Arc::new(bindings::PluginIndices::new(&instance_pre)?))
            }
        };
        let state = match state && minor != 2 {
            true => Some(Arc::new(StateExportIndices::new(&instance_pre)?)),
            false => None,
        };
        Ok(Self {
            instance_pre,
            world,
            state,
        })
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        self.instance_pre.engine()
    }

    /// Whether the plugin exports `reconciler`.
    pub fn reconciles(&self) -> bool {
        matches!(self.world, WorldIndices::Controller(_))
    }

    /// Whether the plugin exports `state`.
    pub fn keeps_state(&self) -> bool {
        self.state.is_some()
    }

    pub fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Bindings> {
        let instance = self.instance_pre.instantiate(&mut *store)?;
        let world = match &self.world {
            WorldIndices::Current(indices) => World::Current(indices.load(&mut *store, &instance)?),
            WorldIndices::Controller(indices) => {
                World::Controller(indices.load(&mut *store, &instance)?)
            }
            WorldIndices::V02(indices) => World::V02(indices.load(&mut *store, &instance)?),
        };
        let state = match &self.state {
            Some(indices) => Some(indices.load(&mut *store, &instance)?),
            None => None,
        };
        Ok(Bindings { world, state })
    }
}

/// A live instance's exports: its world's, and `state` if it exports it.
pub(crate) struct Bindings {
    world: World,
    state: Option<StateExport>,
}

/// A live instance's exports, in its world.
enum World {
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
    /// Calls `save-state` (`None`: the plugin does not export `state`).
    pub fn call_save_state(
        &self,
        store: &mut Store<HostState>,
    ) -> Option<wasmtime::Result<Vec<u8>>> {
        let state = self.state.as_ref()?;
        Some(state.wasmformer_plugin_state().call_save_state(store))
    }

    /// Calls `restore-state` (`None`: the plugin does not export `state`).
    pub fn call_restore_state(
        &self,
        store: &mut Store<HostState>,
        bytes: &[u8],
        from_version: &str,
    ) -> Option<wasmtime::Result<Result<(), String>>> {
        let state = self.state.as_ref()?;
        Some(
            state
                .wasmformer_plugin_state()
                .call_restore_state(store, bytes, from_version),
        )
    }

    pub fn call_init(
        &self,
        store: &mut Store<HostState>,
        config: &str,
    ) -> wasmtime::Result<Result<(), String>> {
        match &self.world {
            World::Current(b) => b.wasmformer_plugin_handler().call_init(store, config),
            World::Controller(b) => b.wasmformer_plugin_handler().call_init(store, config),
            World::V02(b) => b.wasmformer_plugin_handler().call_init(store, config),
        }
    }

    pub fn call_event(
        &self,
        store: &mut Store<HostState>,
        gvk: &Gvk,
        event: &Event,
    ) -> wasmtime::Result<Result<(), String>> {
        match &self.world {
            World::Current(b) => call_handler!(b.wasmformer_plugin_handler(), store, gvk, event),
            World::Controller(b) => {
                call_handler!(b.wasmformer_plugin_handler(), store, gvk, event)
            }
            World::V02(b) => {
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
        let World::Controller(b) = &self.world else {
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
