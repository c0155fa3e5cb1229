//! Loading one plugin version: read, check it is a component of our contract, compile (or take
//! from the cache), and resolve its imports against the host's linker.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::bindings::PluginPre;
use super::engine::{PluginEngine, content_hash};
use super::host::HostState;
use super::{CONTRACT_PACKAGE, CONTRACT_VERSION, LoadError};

/// The interface every plugin exports (without version).
const HANDLER_INTERFACE: &str = "wasmformer:plugin/handler";

/// What a component says about itself: the contract it was built for and what it imports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractInfo {
    /// The `wasmformer:plugin` version its handler export was built for, if it has one.
    pub contract_version: Option<String>,
    /// Every export name.
    pub exports: Vec<String>,
    /// Every import name.
    pub imports: Vec<String>,
}

/// One compiled, checked plugin version, ready to instantiate cheaply.
#[derive(Clone)]
pub struct LoadedPlugin {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    path: PathBuf,
    digest: String,
    pre: PluginPre<HostState>,
    from_cache: bool,
    load_time: Duration,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin").field("name", &self.inner.name).field("digest", &self.inner.digest).finish()
    }
}

impl LoadedPlugin {
    /// Loads the plugin `name` from `path`.
    pub fn load(engine: &PluginEngine, name: &str, path: &Path) -> Result<Self, LoadError> {
        let wasm = std::fs::read(path).map_err(|source| LoadError::Read {
            plugin: name.to_owned(),
            path: path.to_owned(),
            source,
        })?;
        Self::from_bytes(engine, name, path, &wasm)
    }

    /// Loads the plugin `name` from `wasm`, read from `path` (used in messages).
    pub fn from_bytes(engine: &PluginEngine, name: &str, path: &Path, wasm: &[u8]) -> Result<Self, LoadError> {
        let started = Instant::now();
        let (plugin, file) = (name.to_owned(), path.to_owned());
        check_header(wasm).map_err(|core| match core {
            true => LoadError::CoreModule { plugin: plugin.clone(), path: file.clone() },
            false => LoadError::NotWasm { plugin: plugin.clone(), path: file.clone() },
        })?;
        let digest = content_hash(wasm);
        let (component, from_cache) = engine
            .compile(wasm, &digest)
            .map_err(|source| LoadError::Compile { plugin: plugin.clone(), path: file.clone(), source })?;
        check_contract(&describe(engine.engine(), &component), &plugin, &file)?;
        let instance_pre = engine
            .linker()
            .instantiate_pre(&component)
            .map_err(|source| LoadError::UnsatisfiedImport { plugin: plugin.clone(), path: file.clone(), source })?;
        let pre = PluginPre::new(instance_pre)
            .map_err(|source| LoadError::UnsatisfiedImport { plugin: plugin.clone(), path: file.clone(), source })?;
        let load_time = started.elapsed();
        tracing::info!(
            plugin.id = %plugin, plugin.version = %&digest[..12], plugin.fromCache = from_cache,
            plugin.loadMs = load_time.as_secs_f64() * 1e3, "plugin loaded"
        );
        Ok(Self { inner: Arc::new(Inner { name: plugin, path: file, digest, pre, from_cache, load_time }) })
    }

    /// The plugin's name from the configuration.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The SHA-256 of its wasm: this version's identity.
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// Whether the compiled code came from the compile cache.
    pub fn from_cache(&self) -> bool {
        self.inner.from_cache
    }

    /// How long loading took.
    pub fn load_time(&self) -> Duration {
        self.inner.load_time
    }

    pub(crate) fn pre(&self) -> &PluginPre<HostState> {
        &self.inner.pre
    }
}

/// Reads a plugin's contract version and imports without loading it (for `wasmformer inspect`).
pub fn inspect(engine: &PluginEngine, path: &Path) -> Result<ContractInfo, LoadError> {
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let wasm = std::fs::read(path).map_err(|source| LoadError::Read { plugin: name.clone(), path: path.to_owned(), source })?;
    check_header(&wasm).map_err(|core| match core {
        true => LoadError::CoreModule { plugin: name.clone(), path: path.to_owned() },
        false => LoadError::NotWasm { plugin: name.clone(), path: path.to_owned() },
    })?;
    let (component, _) = engine
        .compile(&wasm, &content_hash(&wasm))
        .map_err(|source| LoadError::Compile { plugin: name.clone(), path: path.to_owned(), source })?;
    Ok(describe(engine.engine(), &component))
}

/// `Ok` for a component; `Err(true)` for a core module, `Err(false)` for anything else.
fn check_header(wasm: &[u8]) -> Result<(), bool> {
    match wasm.get(..8) {
        Some([0, b'a', b's', b'm', _, _, 1, 0]) => Ok(()),
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => Err(true),
        _ => Err(false),
    }
}

fn describe(engine: &Engine, component: &Component) -> ContractInfo {
    let ty = component.component_type();
    let exports: Vec<String> = ty.exports(engine).map(|(name, _)| name.to_owned()).collect();
    let imports = ty.imports(engine).map(|(name, _)| name.to_owned()).collect();
    let contract_version = exports.iter().find_map(|e| {
        e.strip_prefix(HANDLER_INTERFACE).map(|rest| rest.strip_prefix('@').unwrap_or("unversioned").to_owned())
    });
    ContractInfo { contract_version, exports, imports }
}

fn check_contract(info: &ContractInfo, plugin: &str, path: &Path) -> Result<(), LoadError> {
    let Some(found) = &info.contract_version else {
        return Err(LoadError::WrongWorld {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
            exports: if info.exports.is_empty() { "nothing".into() } else { info.exports.join(", ") },
            expected: format!("{HANDLER_INTERFACE}@{CONTRACT_VERSION}"),
        });
    };
    if !compatible(found) {
        return Err(LoadError::IncompatibleContract {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
            found: format!("{CONTRACT_PACKAGE}@{found}"),
            accepted: accepted_versions(),
        });
    }
    Ok(())
}

/// Semver compatibility as the component model applies it: same major, and for `0.x` the same
/// minor.
fn compatible(found: &str) -> bool {
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut parts = v.split(['.', '-', '+']);
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    match (parse(found), parse(CONTRACT_VERSION)) {
        (Some((0, minor)), Some((0, ours))) => minor == ours,
        (Some((major, _)), Some((ours, _))) => major == ours,
        _ => false,
    }
}

fn accepted_versions() -> String {
    let (major, minor) = CONTRACT_VERSION.split_once('.').map(|(a, b)| (a, b.split('.').next().unwrap_or("0"))).unwrap_or(("0", "1"));
    if major == "0" { format!("{CONTRACT_PACKAGE}@{major}.{minor}.x") } else { format!("{CONTRACT_PACKAGE}@{major}.x") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_tells_components_from_modules() {
        assert_eq!(check_header(b"\0asm\x0d\x00\x01\x00rest"), Ok(()));
        assert_eq!(check_header(b"\0asm\x01\x00\x00\x00rest"), Err(true));
        assert_eq!(check_header(b"#!/bin/sh\n"), Err(false));
        assert_eq!(check_header(b""), Err(false));
    }

    #[test]
    fn accepts_same_minor_of_zero_major() {
        assert!(compatible("0.2.0") && compatible("0.2.7"));
        assert!(!compatible("0.1.0") && !compatible("0.3.0") && !compatible("1.0.0") && !compatible("unversioned"));
        assert_eq!(accepted_versions(), "wasmformer:plugin@0.2.x");
    }
}
