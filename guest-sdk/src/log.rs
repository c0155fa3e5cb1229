//! Logging into the host's log, tagged with the plugin's name.
//!
//! Use the macros: `info!("pod {} added", pod.name())`. Output to stdout and stderr reaches the
//! host's log too, at info and warn level.

pub use crate::bindings::wasmformer::plugin::log::Level;

/// Writes one message at `level`.
pub fn write(level: Level, message: &str) {
    crate::bindings::wasmformer::plugin::log::log(level, message);
}

/// Logs at error level, with `format!` arguments.
#[macro_export]
macro_rules! error { ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Error, &::std::format!($($arg)*)) }; }
/// Logs at warn level, with `format!` arguments.
#[macro_export]
macro_rules! warn { ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Warn, &::std::format!($($arg)*)) }; }
/// Logs at info level, with `format!` arguments.
#[macro_export]
macro_rules! info { ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Info, &::std::format!($($arg)*)) }; }
/// Logs at debug level, with `format!` arguments.
#[macro_export]
macro_rules! debug { ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Debug, &::std::format!($($arg)*)) }; }
/// Logs at trace level, with `format!` arguments.
#[macro_export]
macro_rules! trace { ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Trace, &::std::format!($($arg)*)) }; }
