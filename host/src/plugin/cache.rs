//! [`CompileCache`]: compiled components on disk, loaded only if this host wrote them.
//!
//! A compiled component is native code that runs outside the sandbox, so the cache trusts
//! nothing it did not write itself:
//! - the directory is created `0700`; one owned by another user, or writable by group or others,
//!   is refused with an error that names it and the fix;
//! - a random 32-byte key lives beside the artifacts (`key`, `0600`); each artifact
//!   `<digest>.cwasm` has a `<digest>.mac` holding the keyed BLAKE3 hash (a MAC) of the digest and
//!   the artifact, so an artifact copied from another plugin, another host or written by anyone
//!   else is recompiled;
//! - the MAC is checked the first time this process loads an artifact; later loads of the same
//!   file (same device, inode, size and ctime, which no unprivileged process can set back) skip
//!   reading it again, so a repeated load costs what it did before the MAC;
//! - a loaded component maps the checked file (the identity is checked again after the map), so
//!   its code is file-backed: resident only where it runs ([`MappedCode`]).

use std::collections::HashMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::code::MappedCode;

/// Why the compile cache cannot be used. Each message names the directory or file and the fix.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The directory belongs to someone else.
    #[error(
        "compile cache {dir} is owned by uid {owner}, not by this user (uid {user}): choose a directory of your own \
         with --cache-dir, or run with --no-cache"
    )]
    NotOwned {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective user.
        user: u32,
    },
    /// Group or others may write the directory (or read or write the key).
    #[error(
        "compile cache {path} is accessible to group or others (mode {mode:03o}): run `chmod {fix:03o} {path}`, or choose another --cache-dir"
    )]
    TooOpen {
        /// The directory or key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// The mode it should have.
        fix: u32,
    },
    /// The key file is not a key.
    #[error("compile cache key {path} is not 32 bytes: delete it (the cache is rebuilt)")]
    BadKey {
        /// The key file.
        path: PathBuf,
    },
    /// The directory or key could not be created or read.
    #[error("compile cache {path}: cannot create or read it")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// What identifies one artifact file's content without reading it: any write or rename changes
/// the inode or the ctime, and no unprivileged process can set a ctime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    ctime: (i64, i64),
}

impl FileIdentity {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The compile cache of one engine: `<dir>/engine-<hash>/<digest>.cwasm`, key in `<dir>/key`.
pub(crate) struct CompileCache {
    artifacts: PathBuf,
    key: [u8; 32],
    /// Artifacts whose MAC this process has checked (or which it wrote), by path.
    verified: Mutex<HashMap<PathBuf, FileIdentity>>,
}

impl CompileCache {
    /// Opens (creating if needed) the cache under `dir` for the engine whose compatibility key is
    /// `engine_key`.
    pub(crate) fn open(dir: &Path, engine_key: &str) -> Result<Self, CacheError> {
        private_dir(dir)?;
        let key = load_or_create_key(&dir.join("key"))?;
        let artifacts = dir.join(engine_key);
        private_dir(&artifacts)?;
        Ok(Self {
            artifacts,
            key,
            verified: Mutex::new(HashMap::new()),
        })
    }

    /// Where `digest`'s artifact and its MAC are kept.
    pub(super) fn paths(&self, digest: &str) -> (PathBuf, PathBuf) {
        (
            self.artifacts.join(format!("{digest}.cwasm")),
            self.artifacts.join(format!("{digest}.mac")),
        )
    }

    /// The MAC of `artifact` stored as `digest`'s: keyed BLAKE3 of the digest, a 0 byte, and the
    /// artifact.
    fn mac(&self, digest: &str, artifact: &[u8]) -> blake3::Hash {
        let mut mac = blake3::Hasher::new_keyed(&self.key);
        mac.update(digest.as_bytes());
        mac.update(&[0]);
        mac.update(artifact);
        mac.finalize()
    }

    /// The cached component for `digest`, if there is one this host wrote and `engine` accepts.
    ///
    /// The component maps the artifact file rather than a copy of it: its code is then resident
    /// only where it runs, and given back by the kernel under pressure (issue 16: a copy kept
    /// ~0.5 MiB of code resident per plugin).
    pub(crate) fn load(&self, engine: &Engine, digest: &str) -> Option<MappedCode> {
        let (path, mac_path) = self.paths(digest);
        let identity = FileIdentity::of(&std::fs::metadata(&path).ok()?);
        let known = self
            .verified
            .lock()
            .expect("cache lock poisoned")
            .get(&path)
            == Some(&identity);
        if known {
            return self.map_verified(engine, &path, identity);
        }
        let mut file = File::open(&path).ok()?;
        let identity = FileIdentity::of(&file.metadata().ok()?);
        let mut artifact = Vec::with_capacity(identity.size as usize);
        file.read_to_end(&mut artifact).ok()?;
        let expected = std::fs::read(&mac_path)
            .ok()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok());
        // `blake3::Hash`'s equality is constant-time.
        if expected.map(blake3::Hash::from_bytes) != Some(self.mac(digest, &artifact)) {
            tracing::warn!(path = %path.display(), "compiled component in the cache was not written by this host; recompiling");
            return None;
        }
        drop(artifact);
        self.verified
            .lock()
            .expect("cache lock poisoned")
            .insert(path.clone(), identity);
        self.map_verified(engine, &path, identity)
    }

    /// Maps the artifact at `path`, whose MAC this process checked when the file had `identity`
    /// (or which it wrote); `None` (and forgotten) if the file changed since or the engine
    /// refuses it.
    fn map_verified(
        &self,
        engine: &Engine,
        path: &Path,
        identity: FileIdentity,
    ) -> Option<MappedCode> {
        // SAFETY: this process checked this very file's MAC (same inode, size and ctime, so
        // not written since) or wrote it; the path includes the engine's compatibility hash.
        let component = unsafe { Component::deserialize_file(engine, path) };
        super::let_waiting_threads_run();
        // The file could have been replaced between the check and the open: check again.
        let unchanged = std::fs::metadata(path).is_ok_and(|m| FileIdentity::of(&m) == identity);
        match component {
            Ok(component) if unchanged => return Some(MappedCode::map(component)),
            Ok(_) => {
                tracing::warn!(path = %path.display(), "compiled component changed while it was loaded; recompiling")
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "discarding unusable compiled component")
            }
        }
        self.verified
            .lock()
            .expect("cache lock poisoned")
            .remove(path);
        None
    }

    /// Writes `component`'s artifact for `digest` with its MAC. Failures are logged: the cache is
    /// an optimisation.
    pub(crate) fn store(&self, digest: &str, component: &Component) {
        let (path, mac_path) = self.paths(digest);
        let written = component
            .serialize()
            .map_err(std::io::Error::other)
            .and_then(|artifact| {
                write_atomically(&mac_path, self.mac(digest, &artifact).as_bytes())?;
                write_atomically(&path, &artifact)
            });
        match written.and_then(|()| std::fs::metadata(&path)) {
            Ok(meta) => {
                self.verified
                    .lock()
                    .expect("cache lock poisoned")
                    .insert(path, FileIdentity::of(&meta));
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot write compiled component to the cache")
            }
        }
    }
}

/// Creates `dir` (and missing parents) `0700`, or checks the existing one is this user's and not
/// writable by anyone else.
fn private_dir(dir: &Path) -> Result<(), CacheError> {
    let io = |source| CacheError::Io {
        path: dir.to_owned(),
        source,
    };
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    let meta = std::fs::metadata(dir).map_err(io)?;
    let user = effective_user();
    if meta.uid() != user {
        return Err(CacheError::NotOwned {
            dir: dir.to_owned(),
            owner: meta.uid(),
            user,
        });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(CacheError::TooOpen {
            path: dir.to_owned(),
            mode,
            fix: 0o700,
        });
    }
    Ok(())
}

/// Reads the cache's key, or creates one (`0600`, 32 random bytes) if there is none.
fn load_or_create_key(path: &Path) -> Result<[u8; 32], CacheError> {
    let io = |source| CacheError::Io {
        path: path.to_owned(),
        source,
    };
    // From getrandom(2), before the file exists: a root without `/dev` (a `scratch` image, a
    // chroot) has no `/dev/urandom`, and an empty key file left by a failure would be refused
    // at every later start.
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| {
        io(e.raw_os_error().map_or_else(
            || std::io::Error::other(e.to_string()),
            std::io::Error::from_raw_os_error,
        ))
    })?;
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut file) => {
            file.write_all(&key)
                .and_then(|()| file.sync_all())
                .map_err(io)?;
            return Ok(key);
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let mut file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    let user = effective_user();
    if meta.uid() != user {
        return Err(CacheError::NotOwned {
            dir: path.to_owned(),
            owner: meta.uid(),
            user,
        });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(CacheError::TooOpen {
            path: path.to_owned(),
            mode,
            fix: 0o600,
        });
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io)?;
    // A key file another process is still writing reads short: it is refused, not guessed.
    bytes.try_into().map_err(|_| CacheError::BadKey {
        path: path.to_owned(),
    })
}

fn effective_user() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Writes by rename, so a loaded component (which maps its file) is never overwritten in place.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().expect("cache path has a parent");
    let unique = format!(
        "{}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    );
    let tmp = dir.join(format!(
        ".{unique}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_the_directory_and_key_private() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("a/components");
        let cache = CompileCache::open(&dir, "engine-1").unwrap();
        for d in [&dir, &dir.join("engine-1")] {
            assert_eq!(
                std::fs::metadata(d).unwrap().permissions().mode() & 0o777,
                0o700,
                "{}",
                d.display()
            );
        }
        assert_eq!(
            std::fs::metadata(dir.join("key"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        let again = CompileCache::open(&dir, "engine-1").unwrap();
        assert_eq!(again.key, cache.key, "the key is kept");
    }

    #[test]
    fn refuses_a_directory_others_can_write() {
        let base = tempfile::tempdir().unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = CompileCache::open(base.path(), "engine-1")
            .err()
            .expect("refused");
        let text = err.to_string();
        assert!(
            text.contains(&base.path().display().to_string())
                && text.contains("mode 777")
                && text.contains("chmod 700"),
            "{text}"
        );
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o750)).unwrap();
        CompileCache::open(base.path(), "engine-1").unwrap();
    }

    #[test]
    fn refuses_a_key_others_can_read() {
        let base = tempfile::tempdir().unwrap();
        CompileCache::open(base.path(), "engine-1").unwrap();
        std::fs::set_permissions(
            base.path().join("key"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let text = CompileCache::open(base.path(), "engine-1")
            .err()
            .expect("refused")
            .to_string();
        assert!(text.contains("key") && text.contains("chmod 600"), "{text}");
    }
}
