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
mod reconcile;
pub mod writer;

pub use error::{Error, Result};
pub use k8s_openapi;
pub use lister::ListerError;
pub use object::{Gvk, Object};
pub use reconcile::{Action, ObjectRef, Reconciler};
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

/// The bindings of the `reconciler` export alone (the `controller` world is `plugin` plus it),
/// sharing the types of [`bindings`]; plugin code never needs them. They are only linked into
/// plugins that use `export!(MyPlugin, reconciler)`.
#[doc(hidden)]
pub mod reconciler_bindings {
    wit_bindgen::generate!({
        inline: "
            package wasmformer:sdk;
            world reconciler-export {
                export wasmformer:plugin/reconciler@0.3.1;
            }
        ",
        path: "../wit",
        world: "reconciler-export",
        pub_export_macro: true,
        export_macro_name: "__export_reconciler_bindings",
        default_bindings_module: "wasmformer_guest::reconciler_bindings",
        runtime_path: "wasmformer_guest::__private::wit_bindgen::rt",
        additional_derives: [PartialEq, Eq],
        with: {
            "wasmformer:plugin/types@0.3.1": wasmformer_guest::bindings::wasmformer::plugin::types,
        },
    });
}

/// The contract version this SDK builds plugins for (the WIT package version).
pub const CONTRACT_VERSION: &str = "0.3.1";

/// A plugin's event handlers, in client-go's terms. Every method defaults to doing nothing.
///
/// The host creates the plugin with [`Default`], calls [`Plugin::init`] once, then calls the
/// handlers one at a time, in event order per object. An `Err` is logged and counted by the host;
/// the event is not retried unless the error was made with [`Error::retry`]: then the object's
/// newest state is delivered again (as an update) after its backoff.
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

/// Exports a [`Plugin`] implementation as the component's `handler`; with `, reconciler`, a
/// [`Reconciler`] as a controller (its `handler` and `reconciler`).
///
/// ```text
/// wasmformer_guest::export!(MyPlugin);
/// wasmformer_guest::export!(MyController, reconciler);
/// ```
#[macro_export]
#[rustfmt::skip] // rustfmt indents the nested bindings macro call differently on every run
macro_rules! export {
    ($plugin:ty) => {
        const _: () = {
            struct Export;
            $crate::__handler_export!($plugin, Export, STATE);
            $crate::bindings::__export_plugin_bindings!(Export with_types_in $crate::bindings);
        };
    };
    ($plugin:ty, reconciler) => {
        const _: () = {
            struct Export;
            $crate::__handler_export!($plugin, Export, STATE);

            impl $crate::reconciler_bindings::exports::wasmformer::plugin::reconciler::Guest for Export {
                fn reconcile(
                    key: $crate::reconciler_bindings::exports::wasmformer::plugin::reconciler::ObjectRef,
                ) -> ::core::result::Result<
                    $crate::reconciler_bindings::exports::wasmformer::plugin::reconciler::ReconcileResult,
                    $crate::reconciler_bindings::exports::wasmformer::plugin::reconciler::ReconcileError,
                > {
                    let key = $crate::ObjectRef { kind: key.kind, namespace: key.namespace, name: key.name };
                    match $crate::__private::reconcile(&STATE, &key) {
                        ::core::result::Result::Ok(after) => ::core::result::Result::Ok(
                            $crate::reconciler_bindings::exports::wasmformer::plugin::reconciler::ReconcileResult {
                                requeue_after: after,
                            },
                        ),
                        ::core::result::Result::Err((message, retry)) => ::core::result::Result::Err(
                            $crate::reconciler_bindings::exports::wasmformer::plugin::reconciler::ReconcileError {
                                message,
                                retry,
                            },
                        ),
                    }
                }
            }

            $crate::bindings::__export_plugin_bindings!(Export with_types_in $crate::bindings);
            $crate::reconciler_bindings::__export_reconciler_bindings!(Export with_types_in $crate::reconciler_bindings);
        };
    };
}

/// The `handler` export of [`export!`]; not part of the API.
#[doc(hidden)]
#[macro_export]
#[rustfmt::skip]
macro_rules! __handler_export {
    ($plugin:ty, $export:ident, $state:ident) => {
        ::std::thread_local! {
            static $state: ::core::cell::RefCell<::core::option::Option<$plugin>> =
                const { ::core::cell::RefCell::new(::core::option::Option::None) };
        }

        impl $crate::bindings::exports::wasmformer::plugin::handler::Guest for $export {
            fn init(config: String) -> ::core::result::Result<(), String> {
                $crate::__private::init(&$state, &config)
            }
            fn on_add(
                obj: $crate::bindings::wasmformer::plugin::types::Object,
                initial: bool,
            ) -> ::core::result::Result<(), String> {
                $crate::__private::with(&$state, |p| p.on_add(&obj.into(), initial))
            }
            fn on_update(
                old: $crate::bindings::wasmformer::plugin::types::Object,
                new: $crate::bindings::wasmformer::plugin::types::Object,
            ) -> ::core::result::Result<(), String> {
                $crate::__private::with(&$state, |p| p.on_update(&old.into(), &new.into()))
            }
            fn on_delete(
                obj: $crate::bindings::wasmformer::plugin::types::Object,
                final_state_unknown: bool,
            ) -> ::core::result::Result<(), String> {
                $crate::__private::with(&$state, |p| p.on_delete(&obj.into(), final_state_unknown))
            }
        }
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

    /// Runs a handler; an error made with [`crate::Error::retry`] asks the host for a retry.
    pub fn with<P: Plugin>(
        state: &'static State<P>,
        f: impl FnOnce(&mut P) -> crate::Result<()>,
    ) -> Result<(), String> {
        state.with(|s| match s.borrow_mut().as_mut() {
            Some(plugin) => f(plugin).map_err(|e| {
                if e.is_retry(false) {
                    crate::bindings::wasmformer::plugin::retry::request();
                }
                e.to_string()
            }),
            None => Err("plugin called before init".to_owned()),
        })
    }

    /// Runs a reconcile: `Ok(requeue-after in nanoseconds)` or `Err((message, retry))`.
    pub fn reconcile<P: crate::Reconciler>(
        state: &'static State<P>,
        key: &crate::ObjectRef,
    ) -> Result<Option<u64>, (String, bool)> {
        state.with(|s| match s.borrow_mut().as_mut() {
            Some(plugin) => match plugin.reconcile(key) {
                Ok(action) => Ok(action
                    .requeue_after()
                    .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))),
                Err(e) => Err((e.to_string(), e.is_retry(true))),
            },
            None => Err(("plugin called before init".to_owned(), false)),
        })
    }
}
