//! [`Labels`]: an object's labels packed into one allocation.

use std::collections::BTreeMap;
use std::fmt;

/// `metadata.labels` of a cached object, sorted by key, packed as `key\0value\0key\0value` in one
/// string. A map of eight labels took one B-tree node and sixteen strings (about 1.2 KiB); this
/// takes their bytes. Labels never hold a NUL (the API server refuses them; the cache rejects
/// objects whose labels do).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Labels {
    packed: Box<str>,
    len: usize,
}

impl Labels {
    /// Packs `labels`; `None` if a key or value holds a NUL.
    pub fn new(labels: &BTreeMap<String, String>) -> Option<Self> {
        let bytes = labels.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        let mut packed = String::with_capacity(bytes);
        for (key, value) in labels {
            if key.contains('\0') || value.contains('\0') {
                return None;
            }
            packed.push_str(key);
            packed.push('\0');
            packed.push_str(value);
            packed.push('\0');
        }
        Some(Self {
            packed: packed.into_boxed_str(),
            len: labels.len(),
        })
    }

    /// The labels in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        let mut fields = self.packed.split_terminator('\0');
        std::iter::from_fn(move || Some((fields.next()?, fields.next()?)))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.iter().map(|(k, _)| k)
    }

    /// How many labels there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The packed form, `key\0value\0…` (what plugins receive after the identity fields).
    pub(crate) fn packed(&self) -> &str {
        &self.packed
    }

    /// Heap bytes held.
    pub(crate) fn heap_size(&self) -> usize {
        self.packed.len()
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl std::ops::Index<&str> for Labels {
    type Output = str;

    fn index(&self, key: &str) -> &str {
        self.get(key).unwrap_or_else(|| panic!("no label {key:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_in_key_order_and_reads_back() {
        let map: BTreeMap<String, String> =
            [("b", "2"), ("a", ""), ("app.kubernetes.io/name", "web")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        let labels = Labels::new(&map).unwrap();
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            [("a", ""), ("app.kubernetes.io/name", "web"), ("b", "2")]
        );
        assert_eq!(
            (labels.get("b"), labels.get("a"), labels.get("c")),
            (Some("2"), Some(""), None)
        );
        assert_eq!(labels.len(), 3);
        assert_eq!(
            labels.packed(),
            "a\0\0app.kubernetes.io/name\0web\0b\x002\0"
        );
        assert!(Labels::default().iter().next().is_none());
        let nul: BTreeMap<String, String> = [("k".to_owned(), "v\0".to_owned())].into();
        assert!(Labels::new(&nul).is_none());
    }
}
