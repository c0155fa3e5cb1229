//! Loading one plugin version: read, check it is a component of our contract, compile (or take
//! from the cache), and resolve its imports against the host's linker.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::component::Component;
use wasmtime::{Engine, Store};

use super::engine::{Compiled, PluginEngine, Reloader, content_digest};
use super::host::{Grants, HostState, LogSink};
use super::world::Pre;
use super::{CONTRACT_PACKAGE, CONTRACT_VERSION, LEGACY_CONTRACT_VERSIONS, LoadError};

/// The interface every plugin exports (without version).
const HANDLER_INTERFACE: &str = "wasmformer:plugin/handler";
/// The interface a controller plugin exports besides (since 0.3.1; without version).
const RECONCILER_INTERFACE: &str = "wasmformer:plugin/reconciler";
/// The interface a plugin whose state survives unloading and hot swap exports (since 0.3.2;
/// without version).
const STATE_INTERFACE: &str = "wasmformer:plugin/state";

/// What a component says about itself: the contract it was built for and what it imports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractInfo {
    /// The `wasmformer:plugin` version its handler export was built for, if it has one.
    pub contract_version: Option<String>,
    /// Whether it exports `reconciler` (a controller, since 0.3.1).
    pub reconciler: bool,
    /// Whether it exports `state` (its state survives unloading and hot swap, since 0.3.2).
    pub state: bool,
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
    /// The compiled code, linked; `None` while released (see [`LoadedPlugin::release_code`]).
    code: Mutex<Option<Pre>>,
    /// Where the code is loaded again from, if it can be released.
    reload: Option<Reloader>,
    /// The minor version of the contract its handler was built for (its world).
    minor: u64,
    reconciles: bool,
    keeps_state: bool,
    from_cache: bool,
    load_time: Duration,
    contract: String,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.inner.name)
            .field("digest", &self.inner.digest)
            .finish()
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
    pub fn from_bytes(
        engine: &PluginEngine,
        name: &str,
        path: &Path,
        wasm: &[u8],
    ) -> Result<Self, LoadError> {
        let started = Instant::now();
        let (plugin, file) = (name.to_owned(), path.to_owned());
        check_header(wasm).map_err(|core| match core {
            true => LoadError::CoreModule {
                plugin: plugin.clone(),
                path: file.clone(),
            },
            false => LoadError::NotWasm {
                plugin: plugin.clone(),
                path: file.clone(),
            },
        })?;
        let digest = content_digest(wasm);
        super::let_waiting_threads_run();
        let compiled = engine
            .compile(wasm, &digest)
            .map_err(|source| LoadError::Compile {
                plugin: plugin.clone(),
                path: file.clone(),
                source,
            })?;
        let (component, from_cache) = (&compiled.component, compiled.from_cache);
        let info = describe(engine.engine(), component);
        let minor = check_contract(&info, &plugin, &file)?;
        let contract = info.contract_version.clone().unwrap_or_default();
        let instance_pre = engine
            .linker()
            .instantiate_pre(component)
            .map_err(|source| unlinked(&info, &plugin, &file, source))?;
        let pre = Pre::new(
            minor,
            info.reconciler,
            info.state,
            instance_pre,
            compiled.mapped,
        )
        .map_err(|source| LoadError::UnsatisfiedImport {
            plugin: plugin.clone(),
            path: file.clone(),
            source,
        })?;
        super::let_waiting_threads_run();
        let (reconciles, keeps_state) = (pre.reconciles(), pre.keeps_state());
        let reload = engine.reloader();
        let load_time = started.elapsed();
        tracing::info!(
            plugin.id = %plugin, plugin.version = %&digest[..12], plugin.fromCache = from_cache,
            plugin.loadMs = load_time.as_secs_f64() * 1e3, "plugin loaded"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                name: plugin,
                path: file,
                digest,
                code: Mutex::new(Some(pre)),
                reload,
                minor,
                reconciles,
                keeps_state,
                from_cache,
                load_time,
                contract,
            }),
        })
    }

    /// The contract version it was built for (`0.2.0`).
    pub fn contract(&self) -> &str {
        &self.inner.contract
    }

    /// Whether it exports `reconciler` (it is a controller).
    pub fn reconciles(&self) -> bool {
        self.inner.reconciles
    }

    /// Whether it exports `state` (its state survives unloading and hot swap).
    pub fn keeps_state(&self) -> bool {
        self.inner.keeps_state
    }

    /// The plugin's name from the configuration.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The BLAKE3 hash of its wasm (hex): this version's identity.
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

    /// The compiled, linked code; loaded again from the compile cache if it was released.
    pub(crate) fn pre(&self) -> wasmtime::Result<Pre> {
        let mut code = self.inner.code.lock().expect("plugin code lock poisoned");
        if let Some(pre) = &*code {
            return Ok(pre.clone());
        }
        let reloader = self
            .inner
            .reload
            .as_ref()
            .expect("only code that can be loaded again is released");
        let compiled = match reloader.cache.load(&reloader.engine, &self.inner.digest) {
            Some(mapped) => Compiled::mapped(mapped, true),
            None => self.compile_again(reloader)?,
        };
        // The world it was checked for at load: the same exports, so the same flags.
        let pre = Pre::new(
            self.inner.minor,
            self.reconciles(),
            self.keeps_state(),
            reloader.linker.instantiate_pre(&compiled.component)?,
            compiled.mapped,
        )?;
        *code = Some(pre.clone());
        Ok(pre)
    }

    /// Compiles the released code again from the plugin's file, if it still holds this version
    /// (the compile cache lost the artifact meanwhile).
    fn compile_again(&self, reloader: &Reloader) -> wasmtime::Result<Compiled> {
        let digest = &self.inner.digest;
        let wasm = std::fs::read(&self.inner.path)
            .ok()
            .filter(|wasm| content_digest(wasm) == *digest)
            .ok_or_else(|| {
                wasmtime::Error::msg(format!(
                    "its compiled code, released while it was unloaded, is no longer in the compile cache, and {} no longer holds version {}",
                    self.inner.path.display(),
                    &digest[..12]
                ))
            })?;
        tracing::warn!(plugin.id = %self.inner.name, plugin.version = %&digest[..12], "compiled code of an unloaded plugin missing from the compile cache: compiling it again");
        reloader.compile(&wasm, digest)
    }

    /// Drops this version's compiled code (an unloaded plugin's) if it can be loaded again from
    /// the compile cache, so an idle plugin keeps neither its instance nor its code; the next
    /// [`pre`](Self::pre) loads it again. Instances alive keep the code they run. Returns
    /// whether the code was released.
    pub fn release_code(&self) -> bool {
        if self.inner.reload.is_none() {
            return false;
        }
        self.inner
            .code
            .lock()
            .expect("plugin code lock poisoned")
            .take()
            .is_some()
    }

    /// Gives back, in the background, the pages of code the first `init` of an instance of this
    /// code ran, once: an idle plugin then keeps only what its events run resident.
    pub(crate) fn settle_code(&self) {
        let code = self.inner.code.lock().expect("plugin code lock poisoned");
        if let Some(pre) = &*code {
            pre.settle_code();
        }
    }

    /// Loads the code again if it was released (what the next instance does anyway).
    pub fn load_code(&self) -> wasmtime::Result<()> {
        self.pre().map(drop)
    }

    /// Whether its code is in memory (not released).
    pub fn code_loaded(&self) -> bool {
        self.inner
            .code
            .lock()
            .expect("plugin code lock poisoned")
            .is_some()
    }

    /// The size of the largest linear memory of a fresh instance, before `init`: what an
    /// instance needs at the least (Python and JavaScript plugins start at about 10-20 MiB).
    /// `wasmformer validate` compares it with the plugin's memory limit.
    pub fn memory_at_start(&self) -> wasmtime::Result<usize> {
        let log = Arc::new(Mutex::new(LogSink::new(
            self.inner.name.as_str().into(),
            0,
            None,
        )));
        let state = HostState::new(
            self.inner.name.as_str().into(),
            usize::MAX,
            Arc::new(Grants::none()),
            log,
        );
        let pre = self.pre()?;
        let mut store = Store::new(pre.engine(), state);
        store.limiter(|s| &mut s.memory);
        store.set_epoch_deadline(u64::MAX / 2);
        pre.instantiate(&mut store)?;
        Ok(store.data().memory.peak)
    }
}

/// The error for a component whose imports the linker cannot satisfy: names the first import
/// wasmtime's message mentions and how to build without it.
fn unlinked(info: &ContractInfo, plugin: &str, path: &Path, source: wasmtime::Error) -> LoadError {
    let message = format!("{source:#}");
    match info
        .imports
        .iter()
        .find(|import| message.contains(import.as_str()))
    {
        Some(import) => LoadError::UnlinkedImport {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
            import: import.clone(),
            fix: import_fix(import),
            source,
        },
        None => LoadError::UnsatisfiedImport {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
            source,
        },
    }
}

/// How to build a plugin without `import`, which the host does not link.
fn import_fix(import: &str) -> Cow<'static, str> {
    if let Some(version) = newer_contract(import) {
        return format!(
            "it was built for contract {version}, newer than this host's {CONTRACT_VERSION}, and \
             calls what this host does not have: upgrade wasmformer, or rebuild the plugin with \
             the SDK for {CONTRACT_VERSION}"
        )
        .into();
    }
    let fix = if import.starts_with("wasi:http/") {
        "plugins get no network; a JavaScript plugin built with componentize-js imports wasi:http unless \
         its `http` and `fetch-event` features are disabled (`disableFeatures: [\"http\", \"fetch-event\"]`, \
         as `wasmformer build` does)"
    } else if import.starts_with("wasi:sockets/") {
        "plugins get no network; build without sockets (this host links wasi:sockets 0.2 only, and denies every address)"
    } else if import.starts_with("wasmformer:plugin/") {
        "it was built for another contract: rebuild it with this host's SDK"
    } else if import.starts_with("wasi:") {
        "this host links WASI 0.2 cli, clocks, filesystem, io, random and sockets (no files, network or \
         environment); build for WASI 0.2 (Rust: wasm32-wasip2) without this import"
    } else {
        "this host provides only wasmformer:plugin (lister, log) and WASI 0.2; remove the import"
    };
    fix.into()
}

/// The contract version of `import`, a `wasmformer:plugin` interface, if it is newer than this
/// host's: a plugin built with a later SDK of the same minor, which this host loads unless it
/// calls something the later contract added.
fn newer_contract(import: &str) -> Option<&str> {
    let (_, version) = import
        .strip_prefix(CONTRACT_PACKAGE)?
        .strip_prefix('/')?
        .split_once('@')?;
    let triple = |v: &str| -> Option<[u64; 3]> {
        let mut numbers = version_numbers(v);
        Some([numbers.next()??, numbers.next()??, numbers.next()??])
    };
    (triple(version)? > triple(CONTRACT_VERSION)?).then_some(version)
}

/// Reads a plugin's contract version and imports without loading it (for `wasmformer inspect`).
pub fn inspect(engine: &PluginEngine, path: &Path) -> Result<ContractInfo, LoadError> {
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let wasm = std::fs::read(path).map_err(|source| LoadError::Read {
        plugin: name.clone(),
        path: path.to_owned(),
        source,
    })?;
    check_header(&wasm).map_err(|core| match core {
        true => LoadError::CoreModule {
            plugin: name.clone(),
            path: path.to_owned(),
        },
        false => LoadError::NotWasm {
            plugin: name.clone(),
            path: path.to_owned(),
        },
    })?;
    let compiled = engine
        .compile(&wasm, &content_digest(&wasm))
        .map_err(|source| LoadError::Compile {
            plugin: name.clone(),
            path: path.to_owned(),
            source,
        })?;
    Ok(describe(engine.engine(), &compiled.component))
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
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let imports = ty
        .imports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let contract_version = exports.iter().find_map(|e| {
        e.strip_prefix(HANDLER_INTERFACE)
            .map(|rest| rest.strip_prefix('@').unwrap_or("unversioned").to_owned())
    });
    let exports_interface = |interface: &str| {
        exports.iter().any(|e| {
            e.strip_prefix(interface)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('@'))
        })
    };
    let reconciler = exports_interface(RECONCILER_INTERFACE);
    let state = exports_interface(STATE_INTERFACE);
    ContractInfo {
        contract_version,
        reconciler,
        state,
        exports,
        imports,
    }
}

/// Checks the contract version; returns its minor version (which world to instantiate).
fn check_contract(info: &ContractInfo, plugin: &str, path: &Path) -> Result<u64, LoadError> {
    let Some(found) = &info.contract_version else {
        return Err(LoadError::WrongWorld {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
            exports: if info.exports.is_empty() {
                "nothing".into()
            } else {
                info.exports.join(", ")
            },
            expected: format!("{HANDLER_INTERFACE}@{CONTRACT_VERSION}"),
        });
    };
    match compatible(found) {
        Some(minor) => Ok(minor),
        None => Err(LoadError::IncompatibleContract {
            plugin: plugin.to_owned(),
            path: path.to_owned(),
            found: format!("{CONTRACT_PACKAGE}@{found}"),
            accepted: accepted_versions(),
        }),
    }
}

fn parse_version(v: &str) -> Option<(u64, u64)> {
    let mut numbers = version_numbers(v);
    Some((numbers.next()??, numbers.next()??))
}

/// The numbers of a version, major first (`None` where a part is not one), up to any
/// pre-release or build suffix's own parts.
fn version_numbers(v: &str) -> impl Iterator<Item = Option<u64>> + '_ {
    v.split(['.', '-', '+']).map(|part| part.parse().ok())
}

/// Semver compatibility as the component model applies it (same major, and for `0.x` the same
/// minor) with the current version or a linked legacy one; returns the matching minor version.
fn compatible(found: &str) -> Option<u64> {
    let found = parse_version(found)?;
    std::iter::once(CONTRACT_VERSION)
        .chain(LEGACY_CONTRACT_VERSIONS.iter().copied())
        .filter_map(parse_version)
        .find_map(|ours| match (found, ours) {
            ((0, minor), (0, our_minor)) if minor == our_minor => Some(minor),
            ((major, _), (our_major, minor)) if major != 0 && major == our_major => Some(minor),
            _ => None,
        })
}

fn accepted_versions() -> String {
    let pattern = |v: &str| {
        let (major, minor) = parse_version(v).unwrap_or((0, 0));
        if major == 0 {
            format!("{CONTRACT_PACKAGE}@0.{minor}.x")
        } else {
            format!("{CONTRACT_PACKAGE}@{major}.x")
        }
    };
    std::iter::once(CONTRACT_VERSION)
        .chain(LEGACY_CONTRACT_VERSIONS.iter().copied())
        .map(pattern)
        .collect::<Vec<_>>()
        .join(" or ")
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
    fn an_unlinked_import_gets_a_fix_naming_what_to_change() {
        assert!(
            import_fix("wasi:http/outgoing-handler@0.2.3")
                .contains("disableFeatures: [\"http\", \"fetch-event\"]")
        );
        assert!(import_fix("wasi:sockets/tcp@0.3.0").contains("no network"));
        assert!(import_fix("wasi:keyvalue/store@0.2.0").contains("WASI 0.2"));
        assert!(import_fix("wasmformer:plugin/writer@0.3.0").contains("another contract"));
        assert_eq!(
            import_fix("wasmformer:plugin/lister@0.3.99"),
            format!(
                "it was built for contract 0.3.99, newer than this host's {CONTRACT_VERSION}, \
                 and calls what this host does not have: upgrade wasmformer, or rebuild the \
                 plugin with the SDK for {CONTRACT_VERSION}"
            )
        );
        assert!(
            import_fix(&format!("wasmformer:plugin/lister@{CONTRACT_VERSION}"))
                .contains("another contract")
        );
        assert!(import_fix("acme:secrets/vault").contains("remove the import"));
    }

    #[test]
    fn accepts_same_minor_of_zero_major() {
        assert_eq!(
            (compatible("0.3.0"), compatible("0.3.7")),
            (Some(3), Some(3))
        );
        assert_eq!(
            (compatible("0.2.0"), compatible("0.2.7")),
            (Some(2), Some(2)),
            "0.2 plugins still load"
        );
        assert!(
            [
                compatible("0.1.0"),
                compatible("0.4.0"),
                compatible("1.0.0"),
                compatible("unversioned")
            ]
            .iter()
            .all(Option::is_none)
        );
        assert_eq!(
            accepted_versions(),
            "wasmformer:plugin@0.3.x or wasmformer:plugin@0.2.x"
        );
    }
}
