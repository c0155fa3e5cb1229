//! The contract worlds the host links: the current one (`wit/`, 0.3.x, with `writer`) and the
//! frozen 0.2.x one (`host/wit-0.2/`), so plugins built before `writer` load unchanged. A plugin
//! is instantiated in the world its `handler` export was built for; events cross as the same
//! two strings in both.

use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::bindings::{self, wasmformer::plugin::types};
use super::bindings_v02;
use super::host::HostState;
use super::host::wit_object;
use crate::cache::{Event, Gvk};

/// A plugin's pre-instantiated handle, in its world.
#[derive(Clone)]
pub(crate) enum Pre {
    /// Built for 0.3.x.
    Current(bindings::PluginPre<HostState>),
    /// Built for 0.2.x.
    V02(bindings_v02::PluginPre<HostState>),
}

impl Pre {
    /// The handle for a component whose handler export is version `0.<minor>.x`.
    pub fn new(minor: u64, instance_pre: InstancePre<HostState>) -> wasmtime::Result<Self> {
        Ok(match minor {
            2 => Self::V02(bindings_v02::PluginPre::new(instance_pre)?),
            _ => Self::Current(bindings::PluginPre::new(instance_pre)?),
        })
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            Self::Current(pre) => pre.engine(),
            Self::V02(pre) => pre.engine(),
        }
    }

    pub fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Bindings> {
        Ok(match self {
            Self::Current(pre) => Bindings::Current(pre.instantiate(store)?),
            Self::V02(pre) => Bindings::V02(pre.instantiate(store)?),
        })
    }
}

/// A live instance's exports, in its world.
pub(crate) enum Bindings {
    Current(bindings::Plugin),
    V02(bindings_v02::Plugin),
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
            Self::Current(b) => {
                let handler = b.wasmformer_plugin_handler();
                match event {
                    Event::Add { obj, initial } => {
                        handler.call_on_add(store, &wit_object(gvk, obj), *initial)
                    }
                    Event::Update { old, new } => {
                        handler.call_on_update(store, &wit_object(gvk, old), &wit_object(gvk, new))
                    }
                    Event::Delete {
                        obj,
                        final_state_unknown,
                    } => handler.call_on_delete(store, &wit_object(gvk, obj), *final_state_unknown),
                    // The contract has no export for it: nothing to call.
                    Event::Synced => Ok(Ok(())),
                }
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
}
