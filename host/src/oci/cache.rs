//! [`BlobCache`]: pulled components by digest, beside the compile cache.
//!
//! `blobs/sha256/<hex>` holds a component layer; `manifests/sha256/<hex>` the layer digest of a
//! manifest, so a reference pinned by digest loads with no request at all (a restart while the
//! registry is down). Whatever is read back is checked against its digest first: a damaged or
//! replaced file is ignored (and pulled again), never loaded.

use std::path::{Path, PathBuf};

use super::sha256_digest;

/// Pulled components by digest.
#[derive(Debug, Clone)]
pub struct BlobCache {
    dir: PathBuf,
}

impl BlobCache {
    /// The cache in `dir` (created on first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// Where it keeps its files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, kind: &str, digest: &str) -> Option<PathBuf> {
        let hex = digest.strip_prefix("sha256:")?;
        let valid = hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit());
        valid.then(|| self.dir.join(kind).join("sha256").join(hex))
    }

    /// The blob `digest`, if cached and intact.
    pub fn blob(&self, digest: &str) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.path("blobs", digest)?).ok()?;
        (sha256_digest(&bytes) == digest).then_some(bytes)
    }

    /// The component of manifest `digest`, if both are cached.
    pub fn component_of(&self, manifest_digest: &str) -> Option<Vec<u8>> {
        let layer = std::fs::read_to_string(self.path("manifests", manifest_digest)?).ok()?;
        self.blob(layer.trim())
    }

    /// Keeps `wasm` (layer `layer_digest` of manifest `manifest_digest`). Best effort: a cache that
    /// cannot be written is logged, and the next load pulls again.
    pub fn store(&self, manifest_digest: &str, layer_digest: &str, wasm: &[u8]) {
        let written = (|| {
            let blob = self.path("blobs", layer_digest)?;
            let manifest = self.path("manifests", manifest_digest)?;
            Some(
                write_atomically(&blob, wasm)
                    .and_then(|()| write_atomically(&manifest, layer_digest.as_bytes())),
            )
        })();
        if let Some(Err(e)) = written {
            tracing::warn!(cache.dir = %self.dir.display(), error = %e, "cannot write the OCI blob cache");
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("cache paths have a parent");
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_blob_is_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::new(dir.path());
        let wasm = b"\0asm component".to_vec();
        let (layer, manifest) = (sha256_digest(&wasm), sha256_digest(b"manifest"));
        cache.store(&manifest, &layer, &wasm);
        assert_eq!(cache.component_of(&manifest), Some(wasm));
        let hex = layer.strip_prefix("sha256:").unwrap();
        std::fs::write(dir.path().join("blobs/sha256").join(hex), b"other").unwrap();
        assert_eq!(cache.component_of(&manifest), None);
        assert_eq!(cache.blob("sha256:../../etc/passwd"), None);
    }
}
