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

#[doc(hidden)]
pub mod alloc;
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
pub use serde;
pub use serde_json;
pub use writer::WriteError;

/// The plugin's global allocator (feature `small-object-cache`, on by default): freed small
/// blocks are handed out again without a trip through dlmalloc.
#[cfg(all(
    feature = "small-object-cache",
    target_family = "wasm",
    not(target_feature = "atomics")
))]
#[global_allocator]
static ALLOCATOR: alloc::SmallObjectCache = alloc::SmallObjectCache::new();

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
                export wasmformer:plugin/reconciler@0.3.3;
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
            "wasmformer:plugin/types@0.3.3": wasmformer_guest::bindings::wasmformer::plugin::types,
        },
    });
}

/// The bindings of the `state` export alone (world `state-export`); plugin code never needs them.
/// They are only linked into plugins that use `export!(MyPlugin, state)`.
#[doc(hidden)]
pub mod state_bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "state-export",
        pub_export_macro: true,
        export_macro_name: "__export_state_bindings",
        default_bindings_module: "wasmformer_guest::state_bindings",
        runtime_path: "wasmformer_guest::__private::wit_bindgen::rt",
    });
}

/// The contract version this SDK builds plugins for (the WIT package version).
pub const CONTRACT_VERSION: &str = "0.3.3";

/// The version (the BLAKE3 hash of its wasm) of the instance whose state this one restored, while
/// and after [`Plugin::init`] runs; `None` when it started without one. Equal to this instance's
/// own version after an idle unload, the predecessor's after a hot swap: compare it to migrate a
/// format your serde attributes (`#[serde(default)]`, `alias`) do not already read.
pub fn restored_from() -> Option<String> {
    __private::RESTORED_FROM.with(|from| from.borrow().clone())
}

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
/// [`Reconciler`] as a controller (its `handler` and `reconciler`); with `, state`, the plugin's
/// fields as its state (the `state` export, contract 0.3.2).
///
/// ```text
/// wasmformer_guest::export!(MyPlugin);
/// wasmformer_guest::export!(MyController, reconciler);
/// wasmformer_guest::export!(MyCounter, state);
/// wasmformer_guest::export!(MyController, reconciler, state);
/// ```
///
/// **State.** With `state`, the plugin type must also derive `serde::Serialize` and
/// `serde::Deserialize` (the plugin depends on `serde` with its `derive` feature). When the host
/// unloads the idle plugin or swaps in a new version, the plugin is serialized (MessagePack, its
/// fields named as in JSON; fields marked `#[serde(skip)]` are not kept); the next instance is
/// deserialized from it instead of made with [`Default`], and then [`Plugin::init`] runs on it
/// with the current config. A new version reads its predecessor's state with its own type: give
/// added fields `#[serde(default)]`, renamed ones `#[serde(alias = "old")]`; [`restored_from`]
/// says which version saved it. A state saved as JSON (by an earlier SDK, or by a Python or
/// JavaScript version) reads too. A state that does not deserialize fails the restore: the host
/// reports it and starts the plugin from [`Default`].
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
    ($plugin:ty, state) => {
        const _: () = {
            struct Export;
            $crate::__handler_export!($plugin, Export, STATE);
            $crate::__state_export!($plugin, Export, STATE);
            $crate::bindings::__export_plugin_bindings!(Export with_types_in $crate::bindings);
            $crate::state_bindings::__export_state_bindings!(Export with_types_in $crate::state_bindings);
        };
    };
    ($plugin:ty, reconciler, state) => {
        const _: () = {
            struct Export;
            $crate::__handler_export!($plugin, Export, STATE);
            $crate::__reconciler_export!($plugin, Export, STATE);
            $crate::__state_export!($plugin, Export, STATE);
            $crate::bindings::__export_plugin_bindings!(Export with_types_in $crate::bindings);
            $crate::reconciler_bindings::__export_reconciler_bindings!(Export with_types_in $crate::reconciler_bindings);
            $crate::state_bindings::__export_state_bindings!(Export with_types_in $crate::state_bindings);
        };
    };
    ($plugin:ty, reconciler) => {
        const _: () = {
            struct Export;
            $crate::__handler_export!($plugin, Export, STATE);
            $crate::__reconciler_export!($plugin, Export, STATE);
            $crate::bindings::__export_plugin_bindings!(Export with_types_in $crate::bindings);
            $crate::reconciler_bindings::__export_reconciler_bindings!(Export with_types_in $crate::reconciler_bindings);
        };
    };
}

/// The `reconciler` export of [`export!`]; not part of the API.
#[doc(hidden)]
#[macro_export]
#[rustfmt::skip]
macro_rules! __reconciler_export {
    ($plugin:ty, $export:ident, $state:ident) => {

            impl $crate::reconciler_bindings::exports::wasmformer::plugin::reconciler::Guest for $export {
                fn reconcile(
                    key: $crate::reconciler_bindings::exports::wasmformer::plugin::reconciler::ObjectRef,
                ) -> ::core::result::Result<
                    $crate::reconciler_bindings::exports::wasmformer::plugin::reconciler::ReconcileResult,
                    $crate::reconciler_bindings::exports::wasmformer::plugin::reconciler::ReconcileError,
                > {
                    let key = $crate::ObjectRef { kind: key.kind, namespace: key.namespace, name: key.name };
                    match $crate::__private::reconcile(&$state, &key) {
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
    };
}

/// The `state` export of [`export!`]; not part of the API.
#[doc(hidden)]
#[macro_export]
#[rustfmt::skip]
macro_rules! __state_export {
    ($plugin:ty, $export:ident, $state:ident) => {
        impl $crate::state_bindings::exports::wasmformer::plugin::state::Guest for $export {
            fn save_state() -> ::std::vec::Vec<u8> {
                $crate::__private::save_state(&$state)
            }
            fn restore_state(
                state: ::std::vec::Vec<u8>,
                from_version: ::std::string::String,
            ) -> ::core::result::Result<(), ::std::string::String> {
                $crate::__private::restore_state(&$state, &state, from_version)
            }
        }
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

    std::thread_local! {
        /// The version whose state this instance restored.
        pub static RESTORED_FROM: RefCell<Option<String>> = const { RefCell::new(None) };
    }

    /// Runs `init` on the restored plugin, or on a [`Default`] one.
    pub fn init<P: Plugin>(state: &'static State<P>, config: &str) -> Result<(), String> {
        let config = if config.trim().is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_json::from_str(config).map_err(|e| format!("plugin config is not JSON: {e}"))?
        };
        let mut plugin = state.with(|s| s.borrow_mut().take()).unwrap_or_default();
        plugin.init(config).map_err(|e| e.to_string())?;
        state.with(|s| *s.borrow_mut() = Some(plugin));
        Ok(())
    }

    /// The first byte of a state saved as MessagePack. MessagePack never uses it, and no JSON
    /// text begins with it: a state saved as JSON (by an SDK before MessagePack states, or by a
    /// Python or JavaScript version of the plugin) has no such first byte, and still reads.
    pub const MESSAGEPACK: u8 = 0xc1;

    /// The plugin as [`MESSAGEPACK`] and MessagePack with its fields named, so a later version
    /// reads it as it would JSON (empty before `init`: nothing to keep). Unlike JSON, a string
    /// is its length and its bytes: saved and restored by copying, not by escaping and scanning
    /// every byte. Measured first, so the state is written once into memory of its size: an
    /// unload grows the plugin's memory by no more than its state.
    pub fn save_state<P: Plugin + serde::Serialize>(state: &'static State<P>) -> Vec<u8> {
        const FAILED: &str = "the plugin's state serializes to MessagePack";
        state.with(|s| match s.borrow().as_ref() {
            Some(plugin) => {
                let mut size = Measure(1);
                rmp_serde::encode::write_named(&mut size, plugin).expect(FAILED);
                let mut bytes = Vec::with_capacity(size.0);
                bytes.push(MESSAGEPACK);
                rmp_serde::encode::write_named(&mut bytes, plugin).expect(FAILED);
                bytes
            }
            None => Vec::new(),
        })
    }

    /// Counts the bytes written to it.
    struct Measure(usize);

    impl std::io::Write for Measure {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Deserializes the plugin from `bytes`; `init` then runs on it.
    pub fn restore_state<P: Plugin + serde::de::DeserializeOwned>(
        state: &'static State<P>,
        bytes: &[u8],
        from_version: String,
    ) -> Result<(), String> {
        let does_not_read = |cause: &dyn std::fmt::Display| {
            format!(
                "the saved state does not read as {}: {cause}",
                std::any::type_name::<P>()
            )
        };
        let plugin: P = match bytes.split_first() {
            Some((&MESSAGEPACK, saved)) => {
                rmp_serde::from_slice(saved).map_err(|e| does_not_read(&e))?
            }
            _ => {
                // JSON, checked as text once so serde_json does not check every string's
                // bytes again; ASCII, the usual case, checks fastest.
                let text = match ascii_text(bytes) {
                    Some(text) => text,
                    None => std::str::from_utf8(bytes).map_err(|e| does_not_read(&e))?,
                };
                serde_json::from_str(text).map_err(|e| does_not_read(&e))?
            }
        };
        state.with(|s| *s.borrow_mut() = Some(plugin));
        RESTORED_FROM.with(|from| *from.borrow_mut() = Some(from_version));
        Ok(())
    }

    /// `bytes` as text if every byte is ASCII. Checked 16 bytes at a time, without stopping
    /// early: two 64-bit words per step are native in wasm, where the standard library's check
    /// works a 32-bit word at a time.
    pub fn ascii_text(bytes: &[u8]) -> Option<&str> {
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let (chunks, tail) = bytes.as_chunks::<16>();
        let high = chunks.iter().fold(0, |high, chunk| {
            let (a, b) = chunk.split_at(8);
            high | u64::from_le_bytes(a.try_into().unwrap())
                | u64::from_le_bytes(b.try_into().unwrap())
        });
        if high & HIGH != 0 || !tail.is_ascii() {
            return None;
        }
        // SAFETY: every byte is below 0x80, and ASCII is UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use proptest::prelude::*;

    use super::__private::{MESSAGEPACK, ascii_text, restore_state, save_state};

    #[derive(Default, serde::Deserialize)]
    struct Notes {
        text: String,
    }

    impl crate::Plugin for Notes {}

    std::thread_local! {
        static NOTES: RefCell<Option<Notes>> = const { RefCell::new(None) };
    }

    /// Restores `NOTES` from `bytes`; its text, or the error.
    fn restored(bytes: &[u8]) -> Result<String, String> {
        restore_state(&NOTES, bytes, "v1".to_owned())?;
        Ok(NOTES.with(|n| n.borrow_mut().take().expect("restored").text))
    }

    #[test]
    fn a_state_restores_whether_or_not_it_is_ascii() {
        let long = "x".repeat(100_000);
        assert_eq!(
            restored(format!(r#"{{"text":"{long}"}}"#).as_bytes()),
            Ok(long)
        );
        assert_eq!(
            restored(r#"{"text":"grüße, 東京\u00e9"}"#.as_bytes()),
            Ok("grüße, 東京é".to_owned())
        );
    }

    /// A first version's state: `Notes2` renames `draft`, drops `retired` and adds `pinned`.
    #[derive(Default, serde::Serialize)]
    struct Draft {
        #[serde(rename = "draft")]
        text: String,
        edits: u64,
        retired: Option<bool>,
    }

    impl crate::Plugin for Draft {}

    std::thread_local! {
        static DRAFT: RefCell<Option<Draft>> = const { RefCell::new(None) };
    }

    #[derive(Default, serde::Deserialize)]
    struct Notes2 {
        #[serde(alias = "draft")]
        text: String,
        edits: u64,
        #[serde(default)]
        pinned: Vec<String>,
    }

    impl crate::Plugin for Notes2 {}

    std::thread_local! {
        static NOTES2: RefCell<Option<Notes2>> = const { RefCell::new(None) };
    }

    #[test]
    fn a_saved_state_is_messagepack_that_a_changed_type_reads_by_field_name() {
        let text = format!("grüße, 東京 \"{}\"", "x".repeat(100_000));
        DRAFT.with(|d| {
            *d.borrow_mut() = Some(Draft {
                text: text.clone(),
                edits: u64::MAX,
                retired: Some(true),
            })
        });
        let saved = save_state(&DRAFT);
        assert_eq!(saved[0], MESSAGEPACK);
        assert_eq!(
            saved.capacity(),
            saved.len(),
            "written once, into memory of its size"
        );
        // The string's bytes as they are, not escaped.
        assert!(saved.windows(text.len()).any(|w| w == text.as_bytes()));
        assert!(serde_json::from_slice::<serde_json::Value>(&saved).is_err());

        restore_state(&NOTES2, &saved, "v1".to_owned()).expect("restored");
        let notes = NOTES2.with(|n| n.borrow_mut().take()).expect("restored");
        assert_eq!((notes.text, notes.edits), (text, u64::MAX));
        assert!(notes.pinned.is_empty());
    }

    /// What serde's derive makes of a plugin's fields, in every shape that needs a
    /// self-describing format: flattened, skipped when empty, internally tagged, integer keys,
    /// JSON values, a float JSON cannot hold.
    #[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Shapes {
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        phase: Phase,
        by_port: std::collections::BTreeMap<u32, String>,
        ratio: f64,
        #[serde(flatten)]
        rest: std::collections::BTreeMap<String, serde_json::Value>,
    }

    #[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    #[serde(tag = "kind")]
    enum Phase {
        #[default]
        Idle,
        Syncing {
            done: u32,
        },
    }

    impl crate::Plugin for Shapes {}

    std::thread_local! {
        static SHAPES: RefCell<Option<Shapes>> = const { RefCell::new(None) };
    }

    #[test]
    fn every_shape_of_field_comes_back_the_same() {
        let shapes = Shapes {
            note: None,
            phase: Phase::Syncing { done: 7 },
            by_port: [(80, "http".to_owned()), (443, "https".to_owned())].into(),
            ratio: f64::INFINITY,
            rest: [(
                "extra".to_owned(),
                serde_json::json!({"a": [1, -2, 3.5, null, "x"]}),
            )]
            .into(),
        };
        let expected = format!("{shapes:?}");
        SHAPES.with(|s| *s.borrow_mut() = Some(shapes));
        let saved = save_state(&SHAPES);
        restore_state(&SHAPES, &saved, "v1".to_owned()).expect("restored");
        let restored = SHAPES.with(|s| s.borrow_mut().take()).expect("restored");
        assert_eq!(format!("{restored:?}"), expected);
    }

    #[test]
    fn a_messagepack_state_of_another_shape_is_refused() {
        let mut saved = vec![MESSAGEPACK];
        rmp_serde::encode::write_named(&mut saved, &[1, 2, 3]).expect("encoded");
        let error = restored(&saved).expect_err("a list is not Notes");
        assert!(error.contains("does not read as"), "{error}");
        let error = restored(&[MESSAGEPACK, 0x81]).expect_err("a map cut short");
        assert!(error.contains("does not read as"), "{error}");
    }

    #[test]
    fn a_state_that_is_not_utf8_is_refused() {
        let mut bytes = br#"{"text":"abcdefghijklmnopqrstuvwxyz"}"#.to_vec();
        bytes[12] = 0xff;
        let error = restored(&bytes).expect_err("not UTF-8");
        assert!(error.contains("does not read as"), "{error}");
    }

    proptest! {
        /// Any byte at or above 0x80, at any place (in a 16-byte step or in the tail), makes the
        /// bytes not text; without one they are the same text.
        #[test]
        fn ascii_text_is_some_exactly_for_ascii(
            mut bytes in proptest::collection::vec(0u8..0x80, 0..100),
            high in proptest::option::of((any::<prop::sample::Index>(), 0x80u8..=0xff)),
        ) {
            if let (Some((at, byte)), false) = (high, bytes.is_empty()) {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
            let text = ascii_text(&bytes);
            prop_assert_eq!(text.is_some(), bytes.is_ascii());
            if let Some(text) = text {
                prop_assert_eq!(text.as_bytes(), &bytes[..]);
            }
        }
    }
}
