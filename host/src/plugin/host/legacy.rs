//! The 0.2.x imports (`lister`, `log`, `types` of `host/wit-0.2/`), answered by the current
//! implementations: the records are the same shapes, converted by moving their fields.

use super::HostState;
use super::SharedObject;
use super::lister::KindRef;
use crate::plugin::bindings::wasmformer::plugin::{lister, log, types};
use crate::plugin::bindings_v02::wasmformer::plugin::{
    lister as old_lister, log as old_log, types as old_types,
};

fn gvk(kind: old_types::Gvk) -> types::Gvk {
    types::Gvk {
        group: kind.group,
        version: kind.version,
        kind: kind.kind,
    }
}

fn error(e: lister::Error) -> old_lister::Error {
    match e {
        lister::Error::NotFound => old_lister::Error::NotFound,
        lister::Error::Forbidden(what) => old_lister::Error::Forbidden(what),
        lister::Error::InvalidSelector(why) => old_lister::Error::InvalidSelector(why),
        lister::Error::UnknownIndex(name) => old_lister::Error::UnknownIndex(name),
    }
}

impl old_types::Host for HostState {}

impl old_lister::Host for HostState {
    fn get(
        &mut self,
        kind: old_types::Gvk,
        namespace: String,
        name: String,
    ) -> wasmtime::Result<Result<old_types::Object, old_lister::Error>> {
        Ok(self
            .lister_get(KindRef::of(&gvk(kind)), &namespace, &name)?
            .map(SharedObject::into_v02)
            .map_err(error))
    }

    fn list(
        &mut self,
        kind: old_types::Gvk,
        namespace: Option<String>,
        label_selector: String,
    ) -> wasmtime::Result<Result<Vec<old_types::Object>, old_lister::Error>> {
        let found = self.lister_list(
            KindRef::of(&gvk(kind)),
            namespace.as_deref(),
            &label_selector,
        )?;
        Ok(found
            .map(|objects| objects.into_iter().map(SharedObject::into_v02).collect())
            .map_err(error))
    }

    fn by_index(
        &mut self,
        kind: old_types::Gvk,
        index: String,
        value: String,
    ) -> wasmtime::Result<Result<Vec<old_types::Object>, old_lister::Error>> {
        let found = self.lister_by_index(KindRef::of(&gvk(kind)), &index, &value)?;
        Ok(found
            .map(|objects| objects.into_iter().map(SharedObject::into_v02).collect())
            .map_err(error))
    }
}

impl old_log::Host for HostState {
    fn log(&mut self, level: old_log::Level, message: String) -> wasmtime::Result<()> {
        let level = match level {
            old_log::Level::Trace => log::Level::Trace,
            old_log::Level::Debug => log::Level::Debug,
            old_log::Level::Info => log::Level::Info,
            old_log::Level::Warn => log::Level::Warn,
            old_log::Level::Error => log::Level::Error,
        };
        <Self as log::Host>::log(self, level, message)
    }
}
