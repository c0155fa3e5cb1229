//! The host configuration: a typed YAML document, validated as a whole.
//!
//! [`HostConfig::load`] reports every problem it finds, each with its location
//! (`plugins[1].handles[0].labelSelector: …`), not just the first: each plugin and each of its
//! entries is decoded on its own, then checked ([`Problem`]), and each problem is given the line
//! and column of its value ([`Locations`]). Paths are relative to the config
//! file's folder. The README's configuration reference documents every field.

mod leader;
mod limits;
mod locate;
mod model;
mod validate;

pub use leader::{LeaderElection, LeaseScope, MEMBER_LABEL};
pub use limits::Limits;
pub use locate::{Locations, Position};
pub use model::{
    BackoffConfig, ClusterConfig, HostSettings, IndexConfig, KindRef, Lifecycle, PluginConfig,
    PluginName, ReconcileConfig, ResourceRef, SwapMode, WatchConfig, WriteGrant, WriteVerb,
};
pub use validate::{ConfigError, Problem};

use std::path::{Path, PathBuf};

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// How to reach the cluster.
    pub cluster: ClusterConfig,
    /// Host-wide settings.
    pub host: HostSettings,
    /// The plugins, in file order.
    pub plugins: Vec<PluginConfig>,
    /// The folder relative paths are resolved against.
    pub base_dir: PathBuf,
    /// The file it was read from, if any (reloads read it again).
    pub path: Option<PathBuf>,
}

impl HostConfig {
    /// Reads and checks the file at `path`: syntax, fields, selectors, index paths, names. Does
    /// not open the plugins' wasm files or contact the cluster (`wasmformer validate` does).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base_dir = path.parent().map(Path::to_owned).unwrap_or_default();
        let mut config = Self::parse(&text, base_dir).map_err(|problems| ConfigError::Invalid {
            path: path.to_owned(),
            problems,
        })?;
        config.path = Some(path.to_owned());
        Ok(config)
    }

    /// Parses and checks configuration text; relative paths resolve against `base_dir`.
    pub fn parse(text: &str, base_dir: PathBuf) -> Result<Self, Vec<Problem>> {
        validate::parse(text, base_dir)
    }

    /// The absolute path of a plugin's wasm file.
    pub fn wasm_path(&self, plugin: &PluginConfig) -> PathBuf {
        self.base_dir.join(&plugin.wasm)
    }

    /// The plugin named `name`.
    pub fn plugin(&self, name: &str) -> Option<&PluginConfig> {
        self.plugins.iter().find(|p| p.name.as_str() == name)
    }
}

#[cfg(test)]
pub(crate) mod props;
