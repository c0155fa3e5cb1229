//! [`MappedCode`]: a component's compiled code as mapped from the compile cache, resident only
//! where it runs (`crate::resident`).
//!
//! A load gives back every page of the artifact it read ([`MappedCode::map`]): the cache's check
//! has just read the whole file, and the kernel maps its cached neighbours with every page a load
//! faults in, so a load alone made it all resident (370 KiB for a small Rust plugin, of which its
//! code is 212 KiB). After the first `init` of an instance of it, a background thread
//! ([`crate::trim`]) cuts the code's mapping in pieces of a page and gives its pages back
//! ([`MappedCode::settle`]): an idle plugin then holds the pages its events ran, not those of
//! `init` (its config's parsing: serde_json, formatting), nor 64 KiB around each (issue 16: 212
//! KiB of code resident per idle `bench-probe` before, about 52 KiB after a few hundred events).
//! A plugin's code is small and there may be a thousand: a page each keeps the most out.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use wasmtime::component::Component;

use crate::resident::{cut, give_back, page_size, uncut};

/// The compiled code of a component mapped from the compile cache.
pub(crate) struct MappedCode {
    /// Keeps the mapping alive.
    component: Component,
    /// The code's pages, in the mapping.
    code: Option<Range<usize>>,
    /// Whether [`settle`](Self::settle) was asked for.
    settling: AtomicBool,
    /// The pieces it was cut in (`resident::cut`), given back to the budget when it goes.
    pieces: AtomicUsize,
}

impl MappedCode {
    /// Takes `component`, just mapped from a file of the compile cache (read-only, never written),
    /// and gives back every resident page of its artifact: headers and metadata are read again
    /// only on a trap, the code as it runs, the memory image through its own mapping.
    pub(crate) fn map(component: Component) -> Self {
        let image = component.image_range();
        let (start, end) = (image.start as usize, image.end as usize);
        // SAFETY: wasmtime keeps the image mapped, and unchanged, while `component` lives.
        let bytes = unsafe { std::slice::from_raw_parts(image.start, end - start) };
        // Read before the pages are given back: it reads the headers.
        let code = code_range(bytes).map(|code| {
            let page = page_size();
            start + code.start / page * page..start + code.end.next_multiple_of(page)
        });
        // SAFETY: the image is wasmtime's read-only, file-backed private mapping, never written:
        // only its page-table entries are dropped.
        unsafe { give_back(start, end.next_multiple_of(page_size()) - start) };
        Self {
            component,
            code,
            settling: AtomicBool::new(false),
            pieces: AtomicUsize::new(0),
        }
    }

    pub(crate) fn component(&self) -> &Component {
        &self.component
    }

    /// Asks, the first time only, for [`settle`](Self::settle) on the background thread: after
    /// the first `init` of an instance of this code.
    pub(crate) fn settle_soon(self: &Arc<Self>) {
        if self.settling.swap(true, Ordering::Relaxed) {
            return;
        }
        let code = Arc::downgrade(self);
        crate::trim::later(move || {
            if let Some(code) = code.upgrade() {
                code.settle();
            }
        });
    }

    /// Cuts the code's mapping in pieces and gives back its resident pages: they come back, a
    /// piece at a time, as they run again. Called once ([`settle_soon`](Self::settle_soon)).
    fn settle(&self) {
        let Some(code) = &self.code else {
            return;
        };
        self.pieces
            .store(cut(code.clone(), page_size()), Ordering::Relaxed);
        // SAFETY: the code's pages in the mapping `self.component` keeps alive, read-only and
        // file-backed; a page running meanwhile faults in again.
        unsafe { give_back(code.start, code.len()) };
    }
}

impl Drop for MappedCode {
    fn drop(&mut self) {
        uncut(*self.pieces.get_mut());
    }
}

/// Where the executable section lies in a compiled artifact (an ELF object).
pub(super) fn code_range(artifact: &[u8]) -> Option<Range<usize>> {
    use object::{Object, ObjectSection, SectionKind};
    let file = object::File::parse(artifact).ok()?;
    let text = file.sections().find(|s| s.kind() == SectionKind::Text)?;
    let (offset, size) = text.file_range()?;
    Some(offset as usize..(offset + size) as usize)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::*;
    use crate::cache::{CachedObject, Event, Gvk};
    use crate::plugin::{Grants, Limits, LoadedPlugin, PluginEngine, PluginInstance};

    /// The resident bytes of each executable mapping of `path` in this process, in address order.
    fn code_mappings(path: &Path) -> Vec<u64> {
        let path = path.to_string_lossy();
        wasmformer_tests::bench::proc::mappings(std::process::id())
            .unwrap()
            .into_iter()
            .filter(|m| m.perms == "r-xp" && m.path == path)
            .map(|m| m.rss)
            .collect()
    }

    /// The one artifact in the compile cache under `dir`.
    fn artifact_in(dir: &Path) -> PathBuf {
        let engine_dir = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .unwrap();
        std::fs::read_dir(engine_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
            .unwrap()
    }

    /// Issue 16: after its first `init`, a plugin's code is cut in pieces of a page and given
    /// back, so what stays resident is what its events run: for the `counter` guest, handling a
    /// Pod keeps about a fifth of its code resident, where one mapping kept all of it.
    #[test]
    fn after_init_only_the_code_events_run_stays_resident() {
        let dir = tempfile::tempdir().unwrap();
        let engine = PluginEngine::new(Some(dir.path().to_owned())).unwrap();
        let path = Path::new(wasmformer_tests::guests::COUNTER);
        let loaded = LoadedPlugin::load(&engine, "counter", path).unwrap();
        let artifact = artifact_in(dir.path());
        let code = code_range(&std::fs::read(&artifact).unwrap()).unwrap();
        let pages = code.len().div_ceil(page_size());
        assert_eq!(code_mappings(&artifact).len(), 1, "before init");

        let mut instance =
            PluginInstance::start(loaded, Limits::default(), Grants::none(), &json!({}), None)
                .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while code_mappings(&artifact).len() == 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let pieces = code_mappings(&artifact);
        assert_eq!(pieces.len(), pages, "pieces of the code's mapping");
        assert_eq!(pieces.iter().sum::<u64>(), 0, "resident after the settle");

        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "default", "resourceVersion": "1", "uid": "u"},
        });
        let obj = std::sync::Arc::new(CachedObject::from_value(pod, true, &[]).unwrap());
        let gvk = Gvk::from_api_version("v1", "Pod");
        instance
            .handle(
                &gvk,
                &Event::Add {
                    obj,
                    initial: false,
                },
            )
            .unwrap();
        let resident: u64 = code_mappings(&artifact).iter().sum();
        assert!(
            resident > 0 && resident < code.len() as u64 / 3,
            "{resident} bytes of {} of code resident after one event",
            code.len()
        );
    }
}
