//! The contract worlds the host links: the current ones (`wit/`, 0.3.x: `plugin`, and
//! `controller`, which adds the `reconciler` export) and the frozen 0.2.x one (`host/wit-0.2/`),
//! so plugins built before `writer` load unchanged. A plugin is instantiated in the world its
//! `handler` export was built for, and in `controller` if it exports `reconciler`; events cross
//! as the same two strings in all. The optional `state` export (0.3.2) is loaded beside the
//! world, from the same instance.

use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::{ComponentExportIndex, Func, Instance, InstancePre, TypedFunc};

use super::bindings::wasmformer::plugin::types;
use super::bindings_controller::{self, exports::wasmformer::plugin::reconciler};
use super::bindings_v02;
use super::code::MappedCode;
use super::host::{HostState, PackedKind, SharedObject};
use super::memory::{ConfigArg, StateArg};
use crate::cache::{CachedObject, Event, Gvk};

/// A plugin's pre-instantiated handle, in its world, with the `state` export's indices if it
/// exports `state`.
#[derive(Clone)]
pub(crate) struct Pre {
    instance_pre: InstancePre<HostState>,
    world: WorldIndices,
    /// `init`, called by hand in every world: its config's lowering finds the guest's memory.
    init: ComponentExportIndex,
    state: Option<StateIndices>,
    /// The code as mapped from the compile cache, if it was.
    mapped: Option<Arc<MappedCode>>,
}

/// Where `save-state` and `restore-state` of the optional `state` export are. Both are called by
/// hand, like `init`: a restored state's lowering ([`StateArg`]) faults in at once the pages it
/// fills.
#[derive(Clone, Copy)]
struct StateIndices {
    save: ComponentExportIndex,
    restore: ComponentExportIndex,
}

/// The `state` functions of one live instance. `restore-state` is typed at its call, where the
/// state it lowers is borrowed.
struct StateFuncs {
    save: TypedFunc<(), (Vec<u8>,)>,
    restore: Func,
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

/// Where the function `name` of the `handler` export of contract `version` is.
fn handler_function(
    instance_pre: &InstancePre<HostState>,
    version: &str,
    name: &str,
) -> wasmtime::Result<ComponentExportIndex> {
    export_function(instance_pre, "handler", version, name)
}

/// Where the function `name` of the export `interface` of contract `version` is.
///
/// As the generated bindings look it up: a plugin built for an older minor of that version names
/// the interface with its own version, which the lookup accepts as compatible.
fn export_function(
    instance_pre: &InstancePre<HostState>,
    interface: &str,
    version: &str,
    name: &str,
) -> wasmtime::Result<ComponentExportIndex> {
    let interface = format!("{}/{interface}@{version}", super::CONTRACT_PACKAGE);
    let component = instance_pre.component();
    let exported = component
        .get_export_index(None, &interface)
        .ok_or_else(|| wasmtime::format_err!("no exported instance named `{interface}`"))?;
    component
        .get_export_index(Some(&exported), name)
        .ok_or_else(|| wasmtime::format_err!("`{interface}` does not export `{name}`"))
}

impl EventIndices {
    fn new(instance_pre: &InstancePre<HostState>) -> wasmtime::Result<Self> {
        let function = |name| handler_function(instance_pre, super::CONTRACT_VERSION, name);
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
    Current(EventIndices),
    /// Built for 0.3.1 or later, exporting `reconciler`.
    Controller(Arc<bindings_controller::ControllerIndices>, EventIndices),
    /// Built for 0.2.x.
    V02(Arc<bindings_v02::PluginIndices>),
}

impl Pre {
    /// The handle for a component whose handler export is version `0.<minor>.x`, and which
    /// exports `reconciler` if `reconciler`, and `state` if `state`; `mapped` is its code as
    /// mapped from the compile cache.
    pub fn new(
        minor: u64,
        reconciler: bool,
        state: bool,
        instance_pre: InstancePre<HostState>,
        mapped: Option<Arc<MappedCode>>,
    ) -> wasmtime::Result<Self> {
        let world = match (minor, reconciler) {
            (2, _) => WorldIndices::V02(Arc::new(bindings_v02::PluginIndices::new(&instance_pre)?)),
            (_, true) => WorldIndices::Controller(
                Arc::new(bindings_controller::ControllerIndices::new(&instance_pre)?),
                EventIndices::new(&instance_pre)?,
            ),
            (_, false) => WorldIndices::Current(EventIndices::new(&instance_pre)?),
        };
        let state = match state && minor != 2 {
            true => {
                let function =
                    |name| export_function(&instance_pre, "state", super::CONTRACT_VERSION, name);
                Some(StateIndices {
                    save: function("save-state")?,
                    restore: function("restore-state")?,
                })
            }
            false => None,
        };
        let version = match minor {
            2 => super::LEGACY_CONTRACT_VERSIONS[0],
            _ => super::CONTRACT_VERSION,
        };
        let init = handler_function(&instance_pre, version, "init")?;
        Ok(Self {
            instance_pre,
            world,
            init,
            state,
            mapped,
        })
    }

    /// Gives back, in the background, the code pages the first `init` ran (see [`MappedCode`]).
    pub fn settle_code(&self) {
        if let Some(mapped) = &self.mapped {
            mapped.settle_soon();
        }
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
            WorldIndices::Current(events) => World::Current(events.load(store, &instance)?),
            WorldIndices::Controller(indices, events) => World::Controller(
                indices.load(&mut *store, &instance)?,
                events.load(store, &instance)?,
            ),
            WorldIndices::V02(indices) => World::V02(indices.load(&mut *store, &instance)?),
        };
        let state = match &self.state {
            Some(indices) => Some(StateFuncs {
                save: instance.get_typed_func(&mut *store, indices.save)?,
                restore: instance
                    .get_func(&mut *store, indices.restore)
                    .ok_or_else(|| wasmtime::format_err!("no `restore-state` function"))?,
            }),
            None => None,
        };
        let init = instance.get_typed_func(&mut *store, self.init)?;
        Ok(Bindings { world, init, state })
    }
}

/// A live instance's exports: its world's, and `state` if it exports it.
pub(crate) struct Bindings {
    world: World,
    init: TypedFunc<(ConfigArg,), HandlerResult>,
    state: Option<StateFuncs>,
}

/// A live instance's exports, in its world.
enum World {
    Current(EventFuncs),
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
        Some(state.save.call(store, ()).map(|(bytes,)| bytes))
    }

    /// Calls `restore-state` (`None`: the plugin does not export `state`).
    pub fn call_restore_state(
        &self,
        store: &mut Store<HostState>,
        bytes: &[u8],
        from_version: &str,
    ) -> Option<wasmtime::Result<Result<(), String>>> {
        let state = self.state.as_ref()?;
        Some(restore_state(&state.restore, store, bytes, from_version))
    }

    /// Calls `init`; lowering `config` notes where the guest's memory is.
    pub fn call_init(
        &self,
        store: &mut Store<HostState>,
        config: Arc<str>,
    ) -> wasmtime::Result<Result<(), String>> {
        let (result,) = self.init.call(store, (ConfigArg(config),))?;
        Ok(result)
    }

    pub fn call_event(
        &self,
        store: &mut Store<HostState>,
        kind: &PackedKind,
        event: &Event,
    ) -> wasmtime::Result<Result<(), String>> {
        let object = |obj: &Arc<CachedObject>| SharedObject::new(*kind, obj.clone());
        let events = match &self.world {
            World::Current(events) | World::Controller(_, events) => events,
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

/// Calls `restore-state` with `bytes`, lowered by [`StateArg`].
fn restore_state(
    restore: &Func,
    store: &mut Store<HostState>,
    bytes: &[u8],
    from_version: &str,
) -> wasmtime::Result<Result<(), String>> {
    let restore = restore.typed::<(StateArg<'_>, &str), HandlerResult>(&*store)?;
    let (result,) = restore.call(store, (StateArg(bytes), from_version))?;
    Ok(result)
}
