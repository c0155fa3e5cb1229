//! Benchmark guest: one `lister.get` of a Pod per event, without decoding it. Config
//! `{"name": "x"}` gets Pod `x` in the event's namespace (a missing one answers `not-found`, which
//! is not an error here); without it the guest gets the event's own object back. Config
//! `{"cycle": "x", "count": N}` gets `x-1`, `x-2`, … `x-N`, one per event, then starts over.
//! Config `{"list": "app=web"}` instead lists the Pods of the event's namespace that match the
//! selector; `{"pages": "app=web"}` goes through them a page at a time (`lister::iter_objects`),
//! of `{"page": N}` objects if given, and logs the keys it read with `{"log": true}`.

use wasmformer_guest::serde_json::Value;
use wasmformer_guest::{Gvk, ListerError, Object, Plugin, Result, lister};

#[derive(Default)]
struct ListerGet {
    name: Option<String>,
    list: Option<String>,
    pages: Option<(String, Option<u32>)>,
    log: bool,
    /// The name and count of `cycle`, and the number of the Pod it got last (0: none yet).
    cycle: Option<(String, u64)>,
    next: u64,
    found_bytes: u64,
}

impl Plugin for ListerGet {
    fn init(&mut self, config: Value) -> Result<()> {
        self.name = config
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.list = config
            .get("list")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.pages = config.get("pages").and_then(Value::as_str).map(|selector| {
            let size = config.get("page").and_then(Value::as_u64);
            (selector.to_owned(), size.map(|n| n as u32))
        });
        self.log = config.get("log").and_then(Value::as_bool) == Some(true);
        self.cycle = config
            .get("cycle")
            .and_then(Value::as_str)
            .zip(config.get("count").and_then(Value::as_u64))
            .map(|(name, count)| (name.to_owned(), count));
        Ok(())
    }

    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        let pod = Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
        };
        if let Some(selector) = &self.list {
            let found = lister::list_objects(&pod, Some(obj.namespace()), selector)?;
            self.found_bytes += found.iter().map(|o| o.json().len() as u64).sum::<u64>();
            return Ok(());
        }
        if let Some((selector, size)) = &self.pages {
            let mut pages = lister::iter_objects(&pod, Some(obj.namespace()), selector);
            if let Some(size) = size {
                pages = pages.page_size(*size);
            }
            let mut keys = Vec::new();
            for found in pages {
                let found = found?;
                self.found_bytes += found.json().len() as u64;
                if self.log {
                    keys.push(format!("{}/{}", found.namespace(), found.name()));
                }
            }
            if self.log {
                wasmformer_guest::info!("read {}", keys.join(" "));
            }
            return Ok(());
        }
        let cycled = self.cycle.as_ref().map(|(name, count)| {
            self.next = self.next % count + 1;
            format!("{name}-{}", self.next)
        });
        let name = (cycled.as_deref())
            .or(self.name.as_deref())
            .unwrap_or(obj.name());
        match lister::get_object(&pod, obj.namespace(), name) {
            Ok(found) => self.found_bytes += found.json().len() as u64,
            Err(ListerError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}

wasmformer_guest::export!(ListerGet);
