//! [`PluginEngine`]: the one wasmtime engine, its epoch ticker, and the compiled-component cache
//! ([`CompileCache`]).
//!
//! **Instance pool.** Instances come from wasmtime's pooling allocator: linear memories, tables
//! and instance metadata live in slots reserved once, and a slot given back is reset in place
//! (dirty pages only, the memory's copy-on-write image kept mapped) rather than unmapped, so
//! starting an instance makes no `mmap` and few page faults. The pool holds
//! [`PoolSettings::max_instances`] instances (`host.maxInstances`), with [`MEMORIES_PER_INSTANCE`]
//! memory and [`TABLES_PER_INSTANCE`] tables each. Every memory slot
//! reserves 4 GiB of address space plus a guard (not memory: nothing is committed until used),
//! the same as one live instance did before, but all of it up front: 1,000 instances reserve about
//! 4 TiB of the 128 TiB a process may address. A plugin's own memory limit (`memoryBytes`) is
//! still enforced by its store's limiter, below the slot's 4 GiB. When every slot is taken,
//! starting one more instance fails with [`CallError::InstancePoolExhausted`](super::CallError::InstancePoolExhausted).
//!
//! **Pages kept resident.** When an instance is dropped, up to [`PoolSettings::keep_resident_bytes`]
//! (`host.keepResidentBytes`) of the pages it wrote in its linear memory, and one page of each of
//! its tables, are reset in place (copied back from the memory image, or zeroed) instead of given
//! back to the kernel: the next instance in that slot does not fault them in again, and the release
//! makes no `madvise` (no TLB shootdown) when nothing more was written. wasmtime finds the written
//! pages with Linux's `PAGEMAP_SCAN` (6.7+); without it, keeping would reset the lowest addresses,
//! which a Rust guest's stack leaves untouched, so nothing is kept (with a warning if
//! `host.keepResidentBytes` was set explicitly).
//! The price: a released slot holds that much memory until it is used again, and the image pages
//! its instance read stay mapped. An unloaded plugin's slot keeps none of its memory: the unload
//! gives every page back itself first (`memory.rs`), so only its tables' pages stay. The default,
//! [`START_PAGES_BYTES`], covers an empty Rust plugin's start.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings_v02::Plugin as LegacyWorld;
use super::cache::CompileCache;
use super::code::MappedCode;
use super::host::HostState;

/// How often the epoch advances; deadlines are enforced to within about one tick.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Linear memory slots per instance of the pool (a component has one; one with more takes
/// the slots of others).
pub const MEMORIES_PER_INSTANCE: u32 = 1;
/// Tables one instance may have (a Rust component has about three: its own and the shims').
pub const TABLES_PER_INSTANCE: u32 = 8;
/// Core wasm instances one component instance may contain.
const CORE_INSTANCES_PER_INSTANCE: u32 = 16;
/// Elements one table may hold (interpreters built to wasm have tens of thousands of functions).
const TABLE_ELEMENTS: usize = 100_000;
/// The largest instance metadata (`VMContext`) allowed, per core instance and per component: a
/// bound checked when a component is loaded, not memory set aside. An interpreter's context
/// (tens of thousands of functions) would not fit wasmtime's default of 1 MiB.
const INSTANCE_METADATA_BYTES: usize = 16 << 20;
/// The most of each table a released slot keeps resident: one page, the one a Rust plugin's start
/// writes (its lazily initialised function references); more would keep pages no start needs
/// (an interpreter's tables are larger), and per table, for every released slot.
const TABLE_KEEP_RESIDENT_BYTES: usize = 4 << 10;
/// The most memory one instance's slot of the pool holds (wasmtime's default, set explicitly
/// because [`MemoryCap::release`](super::host::MemoryCap::release) relies on it: nothing it gives
/// back lies beyond).
pub(crate) const SLOT_MEMORY_BYTES: usize = 4 << 30;
/// Released slots that keep their affinity (wasmtime's default): the next instance of the same
/// component reuses one, its memory image still mapped. Their dirty pages are given back.
const WARM_SLOTS: u32 = 100;

/// How the instance pool is sized and how it resets a released slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Plugin instances that may be live at once (`host.maxInstances`): each running plugin
    /// version holds one, a hot swap briefly two.
    pub max_instances: u32,
    /// Bytes of written pages a released slot keeps resident of its linear memory, and up to one
    /// page per table (`host.keepResidentBytes`; rounded up to whole pages): see the module
    /// documentation.
    pub keep_resident_bytes: usize,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            max_instances: DEFAULT_MAX_INSTANCES,
            keep_resident_bytes: DEFAULT_KEEP_RESIDENT_BYTES,
        }
    }
}

/// The default of `host.maxInstances`.
pub const DEFAULT_MAX_INSTANCES: u32 = 1000;

/// The default of `host.keepResidentBytes`: what an empty Rust plugin's start writes, so a start in
/// a released slot faults none in (issue 17, item 6). Keeping costs more than the pages kept (a
/// slot whose written pages all fit is not `madvise`d at all, so the memory image's pages its
/// instance read stay mapped too), but not for an unloaded plugin, whose memory the unload gives
/// back (issue 16).
pub const DEFAULT_KEEP_RESIDENT_BYTES: usize = START_PAGES_BYTES;

/// What an empty Rust plugin's start writes in its linear memory: four pages (stack, allocator
/// state, heap start and end). Kept resident, a start in a released slot faults no page in.
pub const START_PAGES_BYTES: usize = 16 << 10;

/// Shared by every plugin: one engine (so compiled code and settings are shared), one linker
/// with the host's imports, one epoch ticker, and where compiled components are cached.
pub struct PluginEngine {
    engine: Engine,
    linker: Arc<Linker<HostState>>,
    cache: Option<Arc<CompileCache>>,
    /// Where `cache` lives (pulled OCI components are kept in its `oci/`).
    cache_dir: Option<PathBuf>,
    /// What a released slot keeps resident, in bytes (after [`effective_keep_resident`]).
    keep_resident_bytes: usize,
    /// Advances the epoch while the engine lives; stopped and joined on drop.
    _ticker: Ticker,
}

struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl PluginEngine {
    /// An engine that caches compiled components under `cache_dir` (`None`: compile every time),
    /// with the default instance pool. Fails with a [`CacheError`](super::CacheError)'s message (and its cause) if that
    /// directory is not this user's alone.
    pub fn new(cache_dir: Option<PathBuf>) -> wasmtime::Result<Self> {
        Self::with_pool(cache_dir, PoolSettings::default())
    }

    /// [`PluginEngine::new`] with an instance pool set up by `pool`.
    pub fn with_pool(cache_dir: Option<PathBuf>, pool: PoolSettings) -> wasmtime::Result<Self> {
        let instances = pool.max_instances.max(1);
        let keep_resident = effective_keep_resident(pool.keep_resident_bytes);
        let mut pooling = PoolingAllocationConfig::new();
        pooling
            .total_component_instances(instances)
            .total_core_instances(instances.saturating_mul(CORE_INSTANCES_PER_INSTANCE))
            .total_memories(instances.saturating_mul(MEMORIES_PER_INSTANCE))
            .total_tables(instances.saturating_mul(TABLES_PER_INSTANCE))
            .table_elements(TABLE_ELEMENTS)
            .max_memory_size(SLOT_MEMORY_BYTES)
            .max_core_instance_size(INSTANCE_METADATA_BYTES)
            .max_component_instance_size(INSTANCE_METADATA_BYTES)
            .max_unused_warm_slots(WARM_SLOTS)
            .linear_memory_keep_resident(keep_resident)
            .table_keep_resident(keep_resident.min(TABLE_KEEP_RESIDENT_BYTES))
            .pagemap_scan(wasmtime::Enabled::Auto);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .cranelift_opt_level(wasmtime::OptLevel::Speed)
            // No `.eh_frame` for the system unwinder: wasmtime's own backtraces walk frame
            // pointers. Registered tables would cost every native backtrace in the host (a
            // panic, an error under RUST_BACKTRACE=1) a search of every plugin's, and the first
            // one would fault them all back in (docs/design.md, "Memory given back").
            .native_unwind_info(false)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        super::host::poll::add_to_linker(&mut linker)?;
        // The current contract's imports, interface by interface: `lister` is linked by hand.
        {
            use super::bindings::wasmformer::plugin::{log, retry, types, writer};
            use wasmtime::component::HasSelf;
            types::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
            log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
            writer::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
            retry::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
            super::host::add_lister_to_linker(&mut linker)?;
        }
        LegacyWorld::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(
            &mut linker,
            |s| s,
        )?;
        let cache = match &cache_dir {
            Some(dir) => {
                Some(Arc::new(
                    CompileCache::open(dir, &engine_key(&engine)).map_err(|e| {
                        // The cause (an io::Error) on the same line: callers print only the
                        // message.
                        wasmtime::Error::msg(crate::error_chain(&e))
                    })?,
                ))
            }
            None => None,
        };
        let ticker = Self::start_ticker(&engine);
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            cache,
            cache_dir,
            keep_resident_bytes: keep_resident,
            _ticker: ticker,
        })
    }

    /// The default compile cache directory: `$WASMFORMER_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/wasmformer`, else `~/.cache/wasmformer`, each with `/components`.
    pub fn default_cache_dir() -> Option<PathBuf> {
        let base = std::env::var_os("WASMFORMER_CACHE_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("wasmformer"))
            })
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/wasmformer"))
            })?;
        Some(base.join("components"))
    }

    fn start_ticker(engine: &Engine) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let (engine, flag) = (engine.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("wasmformer-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawn epoch ticker thread");
        Ticker {
            stop,
            thread: Some(thread),
        }
    }

    /// Bytes of written pages a released slot keeps resident (see the module documentation): as
    /// asked for, or 0 where the kernel cannot find the written pages.
    pub fn keep_resident_bytes(&self) -> usize {
        self.keep_resident_bytes
    }

    /// The compile cache's directory, if caching.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.cache_dir.as_deref()
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn linker(&self) -> &Linker<HostState> {
        &self.linker
    }

    /// What a loaded plugin needs to load its compiled code again from the compile cache after
    /// dropping it (`None` without a cache: the code is then kept).
    pub(crate) fn reloader(&self) -> Option<Reloader> {
        Some(Reloader {
            engine: self.engine.clone(),
            linker: self.linker.clone(),
            cache: self.cache.clone()?,
        })
    }

    /// Compiles `wasm` (hashed to `digest`), or loads it from the compile cache. A cached
    /// artifact this host did not write, or that this engine rejects, is recompiled and replaced.
    pub(crate) fn compile(&self, wasm: &[u8], digest: &str) -> wasmtime::Result<Compiled> {
        match &self.cache {
            Some(cache) => compile_cached(&self.engine, cache, wasm, digest),
            None => Ok(Compiled {
                component: Component::new(&self.engine, wasm)?,
                mapped: None,
                from_cache: false,
            }),
        }
    }
}

/// A compiled component.
pub(crate) struct Compiled {
    pub component: Component,
    /// Its code as mapped from the compile cache (`None` without one: its code is then a copy in
    /// anonymous memory, resident whole).
    pub mapped: Option<Arc<MappedCode>>,
    /// Whether the compile cache had it.
    pub from_cache: bool,
}

impl Compiled {
    /// `mapped`, loaded from the compile cache (`from_cache`) or just compiled into it.
    pub(crate) fn mapped(mapped: MappedCode, from_cache: bool) -> Self {
        Self {
            component: mapped.component().clone(),
            mapped: Some(Arc::new(mapped)),
            from_cache,
        }
    }
}

/// Loads `digest` from `cache`, or compiles `wasm` and caches it.
fn compile_cached(
    engine: &Engine,
    cache: &CompileCache,
    wasm: &[u8],
    digest: &str,
) -> wasmtime::Result<Compiled> {
    if let Some(mapped) = cache.load(engine, digest) {
        return Ok(Compiled::mapped(mapped, true));
    }
    let component = Component::new(engine, wasm)?;
    cache.store(digest, &component);
    // Mapped from the file just written, its code is file-backed like a cached load's.
    Ok(match cache.load(engine, digest) {
        Some(mapped) => Compiled::mapped(mapped, false),
        None => Compiled {
            component,
            mapped: None,
            from_cache: false,
        },
    })
}

/// The engine, linker and compile cache a plugin's code is loaded again from.
#[derive(Clone)]
pub(crate) struct Reloader {
    pub engine: Engine,
    pub linker: Arc<Linker<HostState>>,
    pub cache: Arc<CompileCache>,
}

impl Reloader {
    /// [`PluginEngine::compile`], with the compile cache.
    pub fn compile(&self, wasm: &[u8], digest: &str) -> wasmtime::Result<Compiled> {
        compile_cached(&self.engine, &self.cache, wasm, digest)
    }
}

/// What a released slot keeps resident for `requested` bytes: all of it where wasmtime can find the
/// written pages (`PAGEMAP_SCAN`), else nothing: keeping the lowest addresses instead would copy
/// pages a Rust guest never wrote (its stack sits at the bottom) on every release and save no
/// fault. A value set explicitly (not the default) that cannot be kept is reported with a warning.
fn effective_keep_resident(requested: usize) -> usize {
    if requested == 0 || PoolingAllocationConfig::is_pagemap_scan_available() {
        return requested;
    }
    if requested == DEFAULT_KEEP_RESIDENT_BYTES {
        tracing::debug!("released instances keep no pages: the kernel lacks PAGEMAP_SCAN");
        return 0;
    }
    tracing::warn!(
        host.keepResidentBytes = requested,
        "host.keepResidentBytes has no effect here: the kernel lacks PAGEMAP_SCAN (Linux 6.7+), \
         so released instances give back all their pages"
    );
    0
}

/// `engine-<hash>`: artifacts of engines with other settings or versions live elsewhere.
fn engine_key(engine: &Engine) -> String {
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("engine-{:016x}", hasher.finish())
}

/// The hex BLAKE3 hash of `bytes`: a plugin version's identity, and its key in the compile
/// cache. BLAKE3 is a cryptographic hash like SHA-256 (same 256-bit output, no known collision)
/// and about three times faster here: hashing the wasm is most of a cached load.
pub fn content_digest(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `component`'s compiled image lies in a mapping of a `.cwasm` file (rather than in
    /// anonymous memory holding a copy).
    fn mapped_from_a_file(component: &Component) -> bool {
        let start = component.image_range().start as u64;
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .any(|line| {
                let Some((range, rest)) = line.split_once(' ') else {
                    return false;
                };
                let (from, to) = range.split_once('-').unwrap();
                let (from, to) = (
                    u64::from_str_radix(from, 16).unwrap(),
                    u64::from_str_radix(to, 16).unwrap(),
                );
                rest.trim_end().ends_with(".cwasm") && (from..to).contains(&start)
            })
    }

    /// The `counter` guest's wasm and digest, and an empty compile cache directory.
    fn counter_and_a_cache() -> (Vec<u8>, String, tempfile::TempDir) {
        let wasm = std::fs::read(wasmformer_tests::guests::COUNTER).unwrap();
        let digest = content_digest(&wasm);
        (wasm, digest, tempfile::tempdir().unwrap())
    }

    /// Issue 16: with a compile cache, a plugin's code maps the artifact file, whether just
    /// compiled or loaded by a process that has not checked the file before (a copy in anonymous
    /// memory kept ~0.5 MiB resident per plugin).
    #[test]
    fn compiled_code_maps_the_cached_artifact() {
        let (wasm, digest, dir) = counter_and_a_cache();
        let first = PluginEngine::new(Some(dir.path().to_owned())).unwrap();
        let compiled = first.compile(&wasm, &digest).unwrap();
        assert!(!compiled.from_cache);
        assert!(mapped_from_a_file(&compiled.component), "just compiled");
        // A new engine is a new process's view: it checks the artifact's MAC first.
        let second = PluginEngine::new(Some(dir.path().to_owned())).unwrap();
        let loaded = second.compile(&wasm, &digest).unwrap();
        assert!(loaded.from_cache);
        assert!(
            mapped_from_a_file(&loaded.component),
            "loaded from the cache"
        );
    }

    /// Bytes of the compile cache's artifact for `digest` resident in this process now.
    fn artifact_rss(engine: &PluginEngine, digest: &str) -> u64 {
        let (artifact, _) = engine.cache.as_ref().unwrap().paths(digest);
        wasmformer_tests::bench::proc::file_rss(std::process::id(), &artifact).unwrap()
    }

    /// Issue 16: a cached load keeps no page of the artifact it read resident: not its headers
    /// and metadata, nor the code, which comes back as it runs (`code`).
    #[test]
    fn a_cached_load_keeps_no_page_resident() {
        let (wasm, digest, dir) = counter_and_a_cache();
        let engine = PluginEngine::new(Some(dir.path().to_owned())).unwrap();
        let compiled = engine.compile(&wasm, &digest).unwrap();
        let resident = artifact_rss(&engine, &digest);
        assert_eq!(resident, 0, "bytes of the artifact resident after its load");
        // The code is still there and runs.
        let path = std::path::Path::new(wasmformer_tests::guests::COUNTER);
        let plugin = crate::plugin::LoadedPlugin::from_bytes(&engine, "counter", path, &wasm);
        assert!(plugin.is_ok(), "{plugin:?}");
        drop(compiled);
    }

    /// A native backtrace (a host panic, or any error's backtrace under `RUST_BACKTRACE=1`)
    /// walks the host's stack with the system unwinder. Plugins' code registers no unwind
    /// tables with it, so the walk reads no artifact: libgcc would otherwise sort every
    /// registered plugin's tables on the first walk, faulting their pages back in, and search
    /// them all on every frame of every walk after it.
    #[test]
    fn a_native_backtrace_reads_no_artifact() {
        let (wasm, digest, dir) = counter_and_a_cache();
        let engine = PluginEngine::new(Some(dir.path().to_owned())).unwrap();
        let compiled = engine.compile(&wasm, &digest).unwrap();
        let before = artifact_rss(&engine, &digest);
        let backtrace = std::backtrace::Backtrace::force_capture();
        assert_eq!(
            backtrace.status(),
            std::backtrace::BacktraceStatus::Captured
        );
        let after = artifact_rss(&engine, &digest);
        assert_eq!(
            (before, after),
            (0, 0),
            "bytes of the artifact resident after its load, then after a native backtrace"
        );
        drop(compiled);
    }
}
