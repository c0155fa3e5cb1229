//! The contract worlds the host links: the current ones (`wit/`, 0.3.x: `plugin`, and
//! `controller`, which adds the `reconciler` export) and the frozen 0.2.x one (`host/wit-0.2/`),
//! so plugins built before `writer` load unchanged. A plugin is instantiated in the world its
//! `handler` export was built for, and in `controller` if it exports `reconciler`; events cross
//! as the same two strings in all. The optional `state` export (0.3.2) is loaded beside the
//! world, from the same instance.

use wasmtime::Store;
use wasmtime::component::{ComponentExportIndex, Instance, InstancePre, TypedFunc};

use super::bindings_state::{StateExport, StateExportIndices};

use super::bindings::{self, wasmformer::plugin::types};
use super::bindings_controller::{self, exports::wasmformer::plugin::reconciler};
use super::bindings_v02;
use super::host::{HostState, PackedKind, SharedObject};
use crate::cache::{Event, Gvk};

/// A plugin's pre-instantiated handle, in its world, with the `state` export's indices if it
/// exports `state`.
#[derive(Clone)]
pub(crate) struct Pre {
    instance_pre: InstancePre<HostState>,
    world: WorldIndices,
    state: Option<std::sync::Arc<StateExportIndices>>,
}

/// Where `on-add`, `on-update` and `on-delete` of the 0.3.x `handler` export are.
///
/// The host calls them itself rather than through the generated bindings, whose calls take owned
/// records: an object then crosses with its body shared with the cache and lowered straight into
/// the guest's memory, as in a lister answer, not copied on the host first.
#[derive(Clone, Copy)]
struct EventIndices {
    on_add: ComponentExportIndex,
    on_update: ComponentExportIndex,
    on_delete: ComponentExportIndex,
}

/// A handler's result: `Err` is the message of the error it returned.
type HandlerResult = (Result<(), String>,);

/// The event functions of one live instance, type-checked when it was created.
struct EventFuncs {
    on_add: TypedFunc<(SharedObject, bool), HandlerResult>,
    on_update: TypedFunc<(SharedObject, SharedObject), HandlerResult>,
    on_delete: TypedFunc<(SharedObject, bool), HandlerResult>,
}

impl EventIndices {
    fn new(instance_pre: &InstancePre<HostState>) -> wasmtime::Result<Self> {
        // As the generated bindings look them up: a plugin built for an older 0.3.x names the
        // interface with its own version, which the lookup accepts as compatible.
        let interface = format!(
            "{}/handler@{}",
            super::CONTRACT_PACKAGE,
            super::CONTRACT_VERSION
        );
        let component = instance_pre.component();
        let handler = component
            .get_export_index(None, &interface)
            .ok_or_else(|| wasmtime::format_err!("no exported instance named `{interface}`"))?;
        let function = |name: &str| {
            component
                .get_export_index(Some(&handler), name)
                .ok_or_else(|| wasmtime::format_err!("`{interface}` does not export `{name}`"))
        };
        Ok(Self {
            on_add: function("on-add")?,
            on_update: function("on-update")?,
            on_delete: function("on-delete")?,
        })
    }

    fn load(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> wasmtime::Result<EventFuncs> {
        Ok(EventFuncs {
            on_add: instance.get_typed_func(&mut *store, self.on_add)?,
            on_update: instance.get_typed_func(&mut *store, self.on_update)?,
            on_delete: instance.get_typed_func(&mut *store, self.on_delete)?,
        })
    }
}

/// Where a world's exports are in the component.
#[derive(Clone)]
enum WorldIndices {
    /// Built for 0.3.x.
    Current(std::sync::Arc<bindings::PluginIndices>, EventIndices),
    /// Built for 0.3.1 or later, exporting `reconciler`.
    Controller(
        std::sync::Arc<bindings_controller::ControllerIndices>,
        EventIndices,
    ),
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
            (_, true) => WorldIndices::Controller(
                Arc::new(bindings_controller::ControllerIndices::new(&instance_pre)?),
                EventIndices::new(&instance_pre)?,
            ),
            (_, false) => WorldIndices::Current(
                Arc::new(bindings::PluginIndices::new(&instance_pre)?),
                EventIndices::new(&instance_pre)?,
            ),
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
        matches!(self.world, WorldIndices::Controller(..))
    }

    /// Whether the plugin exports `state`.
    pub fn keeps_state(&self) -> bool {
        self.state.is_some()
    }

    pub fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Bindings> {
        let instance = self.instance_pre.instantiate(&mut *store)?;
        let world = match &self.world {
            WorldIndices::Current(indices, events) => World::Current(
                indices.load(&mut *store, &instance)?,
                events.load(store, &instance)?,
            ),
            WorldIndices::Controller(indices, events) => World::Controller(
                indices.load(&mut *store, &instance)?,
                events.load(store, &instance)?,
            ),
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
    Current(bindings::Plugin, EventFuncs),
    Controller(bindings_controller::Controller, EventFuncs),
    V02(bindings_v02::Plugin),
}

/// What a reconcile returned: `Ok(requeue-after)` or `Err((message, retry))`.
pub(crate) type ReconcileReturn = Result<Option<std::time::Duration>, (String, bool)>;

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
            World::Current(b, _) => b.wasmformer_plugin_handler().call_init(store, config),
            World::Controller(b, _) => b.wasmformer_plugin_handler().call_init(store, config),
            World::V02(b) => b.wasmformer_plugin_handler().call_init(store, config),
        }
    }

    pub fn call_event(
        &self,
        store: &mut Store<HostState>,
        kind: &PackedKind,
        event: &Event,
    ) -> wasmtime::Result<Result<(), String>> {
        let object = |obj| SharedObject::new(*kind, obj);
        let events = match &self.world {
            World::Current(_, events) | World::Controller(_, events) => events,
            World::V02(b) => {
                let handler = b.wasmformer_plugin_handler();
                let object = |o| object(o).into_v02();
                return match event {
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
                };
            }
        };
        let (result,) = match event {
            Event::Add { obj, initial } => events.on_add.call(store, (object(obj), *initial)),
            Event::Update { old, new } => events.on_update.call(store, (object(old), object(new))),
            Event::Delete {
                obj,
                final_state_unknown,
            } => events
                .on_delete
                .call(store, (object(obj), *final_state_unknown)),
            // The contract has no export for it: nothing to call.
            Event::Synced => return Ok(Ok(())),
        }?;
        Ok(result)
    }

    /// Calls `reconcile` (`None`: the plugin does not export it).
    pub fn call_reconcile(
        &self,
        store: &mut Store<HostState>,
        gvk: &Gvk,
        namespace: &str,
        name: &str,
    ) -> Option<wasmtime::Result<ReconcileReturn>> {
        let World::Controller(b, _) = &self.world else {
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
