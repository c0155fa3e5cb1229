//! Plugins from OCI registries: `wasm: oci://registry/repository:tag` or `…@sha256:<hex>`.
//!
//! The layout is the one wasm tooling publishes (the CNCF Wasm OCI artifact: `wkg`,
//! `rust-oci-wasm`): an image manifest whose config has media type
//! `application/vnd.wasm.config.v0+json` and whose one layer, `application/wasm`, is the component
//! (the older `application/vnd.wasm.content.layer.v1+wasm` is accepted on pull). A pull resolves the
//! reference to a manifest digest (a tag is asked anew every time: reloading re-resolves it), checks
//! it against a pinned digest, and takes the layer from the digest-addressed [`BlobCache`] or the
//! registry; every blob is checked against its digest. [`push`] publishes a component the same way.
//!
//! Registries are spoken to over HTTPS; `host.insecureRegistries` (or `push --insecure`) names
//! the ones reached over plain HTTP instead. Credentials come from a Docker `config.json`
//! ([`auth`]); a registry it does not name is spoken to anonymously.

mod auth;
mod cache;
mod source;

pub use auth::credentials;
pub use cache::BlobCache;
pub use source::PluginSource;

use std::path::{Path, PathBuf};
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciImageManifest;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};

/// How a plugin's `wasm` names a registry artifact.
pub const SCHEME: &str = "oci://";
/// The layer media type of a Wasm component (CNCF Wasm OCI artifact).
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The config media type of a Wasm artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// The reference after `oci://` when `wasm` names a registry artifact, else `None` (a file).
pub fn reference_of(wasm: &Path) -> Option<&str> {
    wasm.to_str()?.strip_prefix(SCHEME)
}

/// How registries are reached and where pulled blobs are kept.
#[derive(Debug, Clone, Default)]
pub struct Registries {
    /// `host:port`s spoken to over plain HTTP (`host.insecureRegistries`).
    pub insecure: Vec<String>,
    /// Pulled components by digest; `None`: pull every time.
    pub cache: Option<BlobCache>,
    /// The Docker `config.json` to take credentials from (`host.registryAuth`, `push
    /// --registry-auth`); `None`: the Docker CLI's own, when there is one.
    pub auth_file: Option<PathBuf>,
}

/// A component pulled from a registry.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The component.
    pub wasm: Vec<u8>,
    /// The manifest the reference resolved to (`sha256:…`).
    pub manifest_digest: String,
    /// Whether no request was made (a pinned digest found in the cache).
    pub from_cache: bool,
}

/// Why a plugin's component could not be pulled. Each message names the plugin and the reference.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The text after `oci://` is not a reference.
    #[error("plugin {plugin}: oci://{reference} is not a valid OCI reference")]
    BadReference {
        /// The plugin.
        plugin: String,
        /// The reference.
        reference: String,
        /// The parser's reason.
        #[source]
        source: oci_client::ParseError,
    },
    /// The registry could not be reached (connection refused, DNS, TLS, timeout).
    #[error("plugin {plugin}: cannot reach the registry of oci://{reference}")]
    Unreachable {
        /// The plugin.
        plugin: String,
        /// The reference.
        reference: String,
        /// The transport error.
        #[source]
        source: OciDistributionError,
    },
    /// The registry has no such tag, digest or repository.
    #[error("plugin {plugin}: oci://{reference} does not exist in its registry (no such {what})")]
    NotFound {
        /// The plugin.
        plugin: String,
        /// The reference.
        reference: String,
        /// `tag`, `digest` or `repository`.
        what: &'static str,
    },
    /// The manifest's digest differs from the one the reference pins.
    #[error(
        "plugin {plugin}: oci://{reference} resolved to manifest {actual}, not the pinned digest"
    )]
    DigestMismatch {
        /// The plugin.
        plugin: String,
        /// The reference.
        reference: String,
        /// What the registry served.
        actual: String,
    },
    /// The artifact is not one Wasm component layer.
    #[error("plugin {plugin}: oci://{reference} is not a Wasm component artifact: {why}")]
    NotWasm {
        /// The plugin.
        plugin: String,
        /// The reference.
        reference: String,
        /// What it is instead.
        why: String,
    },
    /// The credentials for the registry could not be read.
    #[error("plugin {plugin}: no credentials for oci://{reference}: {why}")]
    Credentials {
        /// The plugin.
        plugin: String,
        /// The reference.
        reference: String,
        /// Which file, and what is wrong with it.
        why: String,
    },
    /// The registry refused the request: no credentials, wrong ones, or no access to the repository.
    #[error("plugin {plugin}: the registry refused access to oci://{reference} ({how})")]
    Unauthorized {
        /// The plugin.
        plugin: String,
        /// The reference.
        reference: String,
        /// `anonymously: …` or `with the credentials of …`.
        how: String,
        /// The registry's error.
        #[source]
        source: OciDistributionError,
    },
    /// Any other registry answer (a server error, a blob that fails its digest).
    #[error("plugin {plugin}: pulling oci://{reference} failed")]
    Registry {
        /// The plugin.
        plugin: String,
        /// The reference.
        reference: String,
        /// The registry's error.
        #[source]
        source: OciDistributionError,
    },
}

/// Why `wasmformer push` failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The target is not a reference.
    #[error("oci://{reference} is not a valid OCI reference")]
    BadReference {
        /// The reference.
        reference: String,
        /// The parser's reason.
        #[source]
        source: oci_client::ParseError,
    },
    /// The credentials for the registry could not be read.
    #[error("no credentials for oci://{reference}: {why}")]
    Credentials {
        /// The reference.
        reference: String,
        /// Which file, and what is wrong with it.
        why: String,
    },
    /// The push was refused or the registry could not be reached.
    #[error("pushing to oci://{reference} failed")]
    Registry {
        /// The reference.
        reference: String,
        /// The registry's error.
        #[source]
        source: OciDistributionError,
    },
}

/// What a push published.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The manifest's digest: pin it with `oci://…@<digest>`.
    pub manifest_digest: String,
    /// The component layer's digest (the plugin's version in `wasmformer status`).
    pub layer_digest: String,
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn client(registries: &Registries) -> Client {
    // reqwest is built without a TLS provider of its own: use ring, like kube.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(registries.insecure.clone()),
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(60)),
        platform_resolver: None,
        user_agent: concat!("wasmformer/", env!("CARGO_PKG_VERSION")),
        ..ClientConfig::default()
    })
}

/// Pulls the component `reference` (the text after `oci://`) names for `plugin`.
pub async fn pull(
    plugin: &str,
    reference: &str,
    registries: &Registries,
) -> Result<Pulled, PullError> {
    let (plugin, text) = (plugin.to_owned(), reference.to_owned());
    let parsed: Reference = text.parse().map_err(|source| PullError::BadReference {
        plugin: plugin.clone(),
        reference: text.clone(),
        source,
    })?;
    let pinned = parsed.digest().map(str::to_owned);
    if let (Some(pinned), Some(cache)) = (&pinned, &registries.cache)
        && let Some(wasm) = cache.component_of(pinned)
    {
        return Ok(Pulled {
            wasm,
            manifest_digest: pinned.clone(),
            from_cache: true,
        });
    }
    let (auth, how) = credentials(registries.auth_file.as_deref(), &parsed).map_err(|why| {
        PullError::Credentials {
            plugin: plugin.clone(),
            reference: text.clone(),
            why,
        }
    })?;
    let failed = |source: OciDistributionError| classify(&plugin, &text, &parsed, &how, source);
    let client = client(registries);
    let (manifest, digest) = client
        .pull_image_manifest(&parsed, &auth)
        .await
        .map_err(failed)?;
    if let Some(pinned) = &pinned
        && *pinned != digest
    {
        return Err(PullError::DigestMismatch {
            plugin,
            reference: text,
            actual: digest,
        });
    }
    let layer = wasm_layer(&manifest).map_err(|why| PullError::NotWasm {
        plugin: plugin.clone(),
        reference: text.clone(),
        why,
    })?;
    let cached = registries
        .cache
        .as_ref()
        .and_then(|c| c.blob(&layer.digest));
    let wasm = match cached {
        Some(wasm) => wasm,
        None => {
            let mut wasm = Vec::with_capacity(usize::try_from(layer.size).unwrap_or(0));
            // pull_blob checks the bytes against the layer's digest.
            client
                .pull_blob(&parsed, layer, &mut wasm)
                .await
                .map_err(failed)?;
            wasm
        }
    };
    if let Some(cache) = &registries.cache {
        cache.store(&digest, &layer.digest, &wasm);
    }
    Ok(Pulled {
        wasm,
        manifest_digest: digest,
        from_cache: false,
    })
}

/// The one component layer of `manifest`, or why there is none.
fn wasm_layer(manifest: &OciImageManifest) -> Result<&oci_client::manifest::OciDescriptor, String> {
    let accepted = [
        WASM_LAYER_MEDIA_TYPE,
        oci_client::manifest::WASM_LAYER_MEDIA_TYPE,
    ];
    match manifest.layers.as_slice() {
        [layer] if accepted.contains(&layer.media_type.as_str()) => Ok(layer),
        [layer] => Err(format!(
            "its layer has media type {}, not {WASM_LAYER_MEDIA_TYPE}",
            layer.media_type
        )),
        layers => Err(format!(
            "it has {} layers, not one {WASM_LAYER_MEDIA_TYPE} layer",
            layers.len()
        )),
    }
}

fn classify(
    plugin: &str,
    text: &str,
    parsed: &Reference,
    how: &str,
    source: OciDistributionError,
) -> PullError {
    let (plugin, reference) = (plugin.to_owned(), text.to_owned());
    let refused = match &source {
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)),
        OciDistributionError::AuthenticationFailure(_)
        | OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::ServerError {
            code: 401 | 403, ..
        } => true,
        _ => false,
    };
    if refused {
        return PullError::Unauthorized {
            plugin,
            reference,
            how: how.to_owned(),
            source,
        };
    }
    let missing = match &source {
        OciDistributionError::RegistryError { envelope, .. } => {
            envelope.errors.iter().find_map(|e| match e.code {
                OciErrorCode::ManifestUnknown | OciErrorCode::ManifestBlobUnknown => {
                    Some(if parsed.digest().is_some() {
                        "digest"
                    } else {
                        "tag"
                    })
                }
                OciErrorCode::NameUnknown => Some("repository"),
                _ => None,
            })
        }
        OciDistributionError::ImageManifestNotFoundError(_) => Some("tag"),
        OciDistributionError::ServerError { code: 404, .. } => Some(if parsed.digest().is_some() {
            "digest"
        } else {
            "tag"
        }),
        _ => None,
    };
    if let Some(what) = missing {
        return PullError::NotFound {
            plugin,
            reference,
            what,
        };
    }
    let unreachable = matches!(&source, OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout());
    if unreachable {
        PullError::Unreachable {
            plugin,
            reference,
            source,
        }
    } else {
        PullError::Registry {
            plugin,
            reference,
            source,
        }
    }
}

/// Publishes `wasm` as `reference` (the text after `oci://`) in the Wasm OCI layout; `component`
/// is the config's `component` field (its exports and imports).
pub async fn push(
    wasm: Vec<u8>,
    reference: &str,
    component: serde_json::Value,
    registries: &Registries,
) -> Result<Pushed, PushError> {
    let text = reference.to_owned();
    let parsed: Reference = text.parse().map_err(|source| PushError::BadReference {
        reference: text.clone(),
        source,
    })?;
    let (auth, _) = credentials(registries.auth_file.as_deref(), &parsed).map_err(|why| {
        PushError::Credentials {
            reference: text.clone(),
            why,
        }
    })?;
    let failed = |source| PushError::Registry {
        reference: text.clone(),
        source,
    };
    let layer_digest = sha256_digest(&wasm);
    let config = serde_json::json!({
        "created": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
        "component": component,
    });
    let config = Config::new(
        serde_json::to_vec(&config).expect("the config serialises"),
        WASM_CONFIG_MEDIA_TYPE.to_owned(),
        None,
    );
    let layers = [ImageLayer::new(
        wasm,
        WASM_LAYER_MEDIA_TYPE.to_owned(),
        None,
    )];
    let client = client(registries);
    client
        .push(&parsed, &layers, config, &auth, None)
        .await
        .map_err(failed)?;
    let manifest_digest = client
        .fetch_manifest_digest(&parsed, &auth)
        .await
        .map_err(failed)?;
    Ok(Pushed {
        manifest_digest,
        layer_digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_oci_urls_are_references() {
        assert_eq!(
            reference_of(Path::new("oci://r.example/p:1")),
            Some("r.example/p:1")
        );
        assert_eq!(reference_of(Path::new("plugins/p.wasm")), None);
    }

    #[test]
    fn an_artifact_must_be_one_wasm_layer() {
        let layer = |media: &str| oci_client::manifest::OciDescriptor {
            media_type: media.into(),
            ..Default::default()
        };
        let manifest = |layers| OciImageManifest {
            layers,
            ..Default::default()
        };
        assert!(wasm_layer(&manifest(vec![layer(WASM_LAYER_MEDIA_TYPE)])).is_ok());
        assert_eq!(
            wasm_layer(&manifest(vec![layer("application/vnd.oci.image.layer.v1.tar")])).err(),
            Some("its layer has media type application/vnd.oci.image.layer.v1.tar, not application/wasm".into())
        );
        assert_eq!(
            wasm_layer(&manifest(vec![])).err(),
            Some("it has 0 layers, not one application/wasm layer".into())
        );
    }
}
