//! [`PluginSource`]: where a plugin's component comes from — its file, or its registry — resolved
//! to something [`LoadedPlugin`] loads. The one place both the runtime and `wasmformer validate`
//! ask.

use std::path::PathBuf;

use super::{BlobCache, PullError, Registries, pull, reference_of};
use crate::config::{HostConfig, PluginConfig};
use crate::plugin::{LoadError, LoadedPlugin, PluginEngine};

/// A plugin's component, ready to load.
#[derive(Debug)]
pub enum PluginSource {
    /// `wasm: plugins/p.wasm`: read when loaded.
    File(PathBuf),
    /// `wasm: oci://…`: already pulled.
    Pulled {
        /// `oci://…`, as configured (used in messages).
        reference: PathBuf,
        /// The component.
        wasm: Vec<u8>,
        /// The manifest it came from.
        manifest_digest: String,
    },
}

impl Registries {
    /// The settings of `config` (`host.insecureRegistries`, `host.registryAuth`), keeping pulled
    /// components in the
    /// `oci/` folder of `engine`'s compile cache directory (none when caching is off).
    pub fn of(config: &HostConfig, engine: &PluginEngine) -> Self {
        Self {
            insecure: config.host.insecure_registries.clone(),
            auth_file: config
                .host
                .registry_auth
                .as_ref()
                .map(|file| config.base_dir.join(file)),
            cache: engine
                .cache_dir()
                .map(|dir| BlobCache::new(dir.join("oci"))),
        }
    }
}

impl PluginSource {
    /// Resolves `plugin`'s `wasm`: a file path, or a pull (a tag is resolved anew each time).
    pub async fn resolve(
        config: &HostConfig,
        plugin: &PluginConfig,
        engine: &PluginEngine,
    ) -> Result<Self, PullError> {
        let Some(reference) = reference_of(&plugin.wasm) else {
            return Ok(Self::File(config.wasm_path(plugin)));
        };
        let pulled = pull(
            plugin.name.as_str(),
            reference,
            &Registries::of(config, engine),
        )
        .await?;
        tracing::info!(
            plugin.id = %plugin.name, oci.reference = reference, oci.manifest = %pulled.manifest_digest,
            oci.fromCache = pulled.from_cache, "plugin pulled"
        );
        Ok(Self::Pulled {
            reference: plugin.wasm.clone(),
            wasm: pulled.wasm,
            manifest_digest: pulled.manifest_digest,
        })
    }

    /// Loads it as plugin `name` (blocking: it compiles).
    pub fn load(&self, engine: &PluginEngine, name: &str) -> Result<LoadedPlugin, LoadError> {
        match self {
            Self::File(path) => LoadedPlugin::load(engine, name, path),
            Self::Pulled {
                reference, wasm, ..
            } => LoadedPlugin::from_bytes(engine, name, reference, wasm),
        }
    }
}
