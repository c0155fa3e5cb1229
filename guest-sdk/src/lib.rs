//! The guest SDK for wasmformer plugins.
//!
//! A plugin is a type that implements [`Plugin`] (every method has a no-op default) and one
//! [`export!`] line. The SDK turns the WIT contract into ordinary Rust: [`Object`] for the objects a
//! handler receives, [`lister`] for typed reads of the host's cache, [`writer`] for changes to the
//! cluster within the plugin's grants, and [`info!`]-style macros for logging. Build with `cargo build --release --target wasm32-wasip2`.
//!
//! ```text
//! use wasmformer_guest::{Object, Plugin, Result, info};
//!
//! #[derive(Default)]
//! struct PodLogger;
//!
//! impl Plugin for PodLogger {
//!     fn on_add(&mut self, pod: &Object, _initial: bool) -> Result<()> {
//!         info!("New Pod Added to Store: {}", pod.name());
//!         Ok(())
//!     }
//! }
//!
//! wasmformer_guest::export!(PodLogger);
//! ```

// Lets the generated bindings name this crate the way plugin crates do.
extern crate self as wasmformer_guest;

mod error;
pub mod lister;
pub mod log;
mod object;
pub mod writer;

pub use error::{Error, Result};
pub use k8s_openapi;
pub use lister::ListerError;
pub use object::{Gvk, Object};
pub use serde_json;
pub use writer::WriteError;

/// The bindings generated from `wit/`; plugin code never needs them.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "__export_plugin_bindings",
        default_bindings_module: "wasmformer_guest::bindings",
        runtime_path: "wasmformer_guest::__private::wit_bindgen::rt",
        additional_derives: [PartialEq, Eq],
    });
}

/// The contract version this SDK builds plugins for (the WIT package version).
pub const CONTRACT_VERSION: &str = "0.3.0";

/// A plugin's event handlers, in client-go's terms. Every method defaults to doing nothing.
///
/// The host creates the plugin with [`Default`], calls [`Plugin::init`] once, then calls the
/// handlers one at a time, in event order per object. An `Err` is logged and counted by the host;
/// the event is not retried.
pub trait Plugin: Default + 'static {
    /// Receives the plugin's `config` block from the host configuration (`{}` when absent).
    fn init(&mut self, config: serde_json::Value) -> Result<()> {
        let _ = config;
        Ok(())
    }

    /// An object was added; `initial` is true for objects from the initial list.
    fn on_add(&mut self, obj: &Object, initial: bool) -> Result<()> {
        let _ = (obj, initial);
        Ok(())
    }

    /// An object changed; on a resync `old` and `new` are the same object.
    fn on_update(&mut self, old: &Object, new: &Object) -> Result<()> {
        let _ = (old, new);
        Ok(())
    }

    /// An object was deleted; `final_state_unknown` is true when the delete was inferred after a
    /// relist, and `obj` is then the last state the cache knew.
    fn on_delete(&mut self, obj: &Object, final_state_unknown: bool) -> Result<()> {
        let _ = (obj, final_state_unknown);
        Ok(())
    }
}

/// Exports a [`Plugin`] implementation as the component's `handler`.
///
/// ```text
/// wasmformer_guest::export!(MyPlugin);
/// ```
#[macro_export]
#[rustfmt::skip] // rustfmt indents the nested bindings macro call differently on every run
macro_rules! export {
    ($plugin:ty) => {
        const _: () = {
            struct Export;

            ::std::thread_local! {
                static STATE: ::core::cell::RefCell<::core::option::Option<$plugin>> =
                    const { ::core::cell::RefCell::new(::core::option::Option::None) };
            }

            impl $crate::bindings::exports::wasmformer::plugin::handler::Guest for Export {
                fn init(config: String) -> ::core::result::Result<(), String> {
                    $crate::__private::init(&STATE, &config)
                }
                fn on_add(
                    obj: $crate::bindings::wasmformer::plugin::types::Object,
                    initial: bool,
                ) -> ::core::result::Result<(), String> {
                    $crate::__private::with(&STATE, |p| p.on_add(&obj.into(), initial))
                }
                fn on_update(
                    old: $crate::bindings::wasmformer::plugin::types::Object,
                    new: $crate::bindings::wasmformer::plugin::types::Object,
                ) -> ::core::result::Result<(), String> {
                    $crate::__private::with(&STATE, |p| p.on_update(&old.into(), &new.into()))
                }
                fn on_delete(
                    obj: $crate::bindings::wasmformer::plugin::types::Object,
                    final_state_unknown: bool,
                ) -> ::core::result::Result<(), String> {
                    $crate::__private::with(&STATE, |p| p.on_delete(&obj.into(), final_state_unknown))
                }
            }

            $crate::bindings::__export_plugin_bindings!(Export with_types_in $crate::bindings);
        };
    };
}

/// Support for [`export!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    use std::cell::RefCell;
    use std::thread::LocalKey;

    pub use wit_bindgen;

    use crate::Plugin;

    type State<P> = LocalKey<RefCell<Option<P>>>;

    pub fn init<P: Plugin>(state: &'static State<P>, config: &str) -> Result<(), String> {
        let config = if config.trim().is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_json::from_str(config).map_err(|e| format!("plugin config is not JSON: {e}"))?
        };
        let mut plugin = P::default();
        plugin.init(config).map_err(|e| e.to_string())?;
        state.with(|s| *s.borrow_mut() = Some(plugin));
        Ok(())
    }

    pub fn with<P: Plugin>(
        state: &'static State<P>,
        f: impl FnOnce(&mut P) -> crate::Result<()>,
    ) -> Result<(), String> {
        state.with(|s| match s.borrow_mut().as_mut() {
            Some(plugin) => f(plugin).map_err(|e| e.to_string()),
            None => Err("plugin called before init".to_owned()),
        })
    }
}
