//! [`Object`]: the object a handler receives or the lister returns.

use std::fmt;
use std::sync::OnceLock;

use serde::de::DeserializeOwned;

use crate::bindings::wasmformer::plugin::types;

/// A kind of object: API group (empty for core), version and kind.
pub type Gvk = types::Gvk;

/// The fixed fields at the start of the packed `meta` string, in order.
const FIXED: usize = 7;
const NAMESPACE: usize = 3;
const NAME: usize = 4;
const UID: usize = 5;
const RESOURCE_VERSION: usize = 6;

/// One Kubernetes object from the host's cache.
///
/// Kind, identity and labels are read without parsing anything but one short string (the host
/// sends them NUL-separated, so a call costs the same however many labels the object has);
/// [`Object::decode`] turns the JSON body into a k8s-openapi type (`Pod`, `Deployment`, …) or a
/// `serde_json::Value`.
#[derive(Clone)]
pub struct Object {
    meta: String,
    /// Where each fixed field ends in `meta`; the labels start one byte after the last.
    ends: [usize; FIXED],
    body: String,
    /// Built on the first [`Object::kind`] call.
    kind: OnceLock<Gvk>,
    /// Where each label key and value starts in `meta`, then one past the end of `meta`: found
    /// on the first label read, so each later read is a slice and [`Object::label`] a binary
    /// search (the host sends labels in key order).
    label_starts: OnceLock<Box<[u32]>>,
}

impl From<types::Object> for Object {
    fn from(inner: types::Object) -> Self {
        Self::packed(inner.meta, inner.body)
    }
}

impl Object {
    fn packed(meta: String, body: String) -> Self {
        Self {
            ends: fixed_ends(meta.as_bytes()),
            meta,
            body,
            kind: OnceLock::new(),
            label_starts: OnceLock::new(),
        }
    }

    /// Builds an object from its parts; for tests and native benchmarks of plugin code.
    pub fn new(
        kind: &Gvk,
        namespace: &str,
        name: &str,
        uid: &str,
        resource_version: &str,
        labels: &[(&str, &str)],
        body: String,
    ) -> Self {
        let fixed = [
            kind.group.as_str(),
            &kind.version,
            &kind.kind,
            namespace,
            name,
            uid,
            resource_version,
        ];
        let fields: Vec<&str> = fixed
            .into_iter()
            .chain(labels.iter().flat_map(|(k, v)| [*k, *v]))
            .collect();
        Self::packed(fields.join("\0"), body)
    }

    fn field(&self, i: usize) -> &str {
        let start = if i == 0 {
            0
        } else {
            (self.ends[i - 1] + 1).min(self.meta.len())
        };
        &self.meta[start..self.ends[i]]
    }

    /// The object's group, version and kind.
    pub fn kind(&self) -> &Gvk {
        self.kind.get_or_init(|| Gvk {
            group: self.field(0).to_owned(),
            version: self.field(1).to_owned(),
            kind: self.field(2).to_owned(),
        })
    }

    /// `metadata.namespace`; empty for cluster-scoped objects.
    pub fn namespace(&self) -> &str {
        self.field(NAMESPACE)
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.field(NAME)
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        self.field(UID)
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> &str {
        self.field(RESOURCE_VERSION)
    }

    /// `metadata.labels` as `(key, value)` pairs, in key order.
    pub fn labels(&self) -> Labels<'_> {
        let starts = self.label_starts();
        Labels {
            meta: &self.meta,
            starts,
            next: 0,
            len: (starts.len().saturating_sub(1)) / 2,
        }
    }

    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        let labels = self.labels();
        let (mut low, mut high) = (0, labels.len);
        while low < high {
            let mid = (low + high) / 2;
            match labels.field(2 * mid).cmp(key) {
                std::cmp::Ordering::Equal => return Some(labels.field(2 * mid + 1)),
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
            }
        }
        None
    }

    fn label_starts(&self) -> &[u32] {
        self.label_starts.get_or_init(|| {
            let from = self.ends[FIXED - 1] + 1;
            let Some(section) = self.meta.get(from..) else {
                return Box::default();
            };
            let mut starts = Vec::with_capacity(17);
            starts.push(from as u32);
            starts.extend(nuls(section.as_bytes()).map(|at| (from + at + 1) as u32));
            starts.push(self.meta.len() as u32 + 1);
            starts.into_boxed_slice()
        })
    }

    /// The whole object as compact JSON.
    pub fn json(&self) -> &str {
        &self.body
    }

    /// Decodes the body into `T`: a k8s-openapi type, your own struct, or `serde_json::Value`.
    pub fn decode<T: DeserializeOwned>(&self) -> crate::Result<T> {
        Ok(serde_json::from_str(&self.body)?)
    }
}

/// Where each of the [`FIXED`] fields ends in `meta`: the offsets of its first NULs (the length
/// where there are fewer).
fn fixed_ends(meta: &[u8]) -> [usize; FIXED] {
    let mut ends = [meta.len(); FIXED];
    for (end, at) in ends.iter_mut().zip(nuls(meta)) {
        *end = at;
    }
    ends
}

/// The offsets of the NUL bytes in `bytes`, in order. This runs on every object a handler or the
/// lister receives, so it reads eight bytes at a time: a `memchr` per field cost ~170 wasm
/// instructions, a byte loop ~20 per byte.
fn nuls(bytes: &[u8]) -> impl Iterator<Item = usize> + '_ {
    const LOW7: u64 = u64::from_ne_bytes([0x7f; 8]);
    let words = bytes.chunks_exact(8);
    let tail = words.remainder();
    let tail_at = bytes.len() - tail.len();
    words
        .enumerate()
        .flat_map(|(i, word)| {
            let word = u64::from_le_bytes(word.try_into().expect("chunks of eight"));
            // The high bit of each byte that is zero, and of no other (exact: no carry crosses
            // a byte, unlike the shorter `(w - 0x01…) & !w & 0x80…`).
            let mut zeros = !(((word & LOW7) + LOW7) | word | LOW7);
            std::iter::from_fn(move || {
                (zeros != 0).then(|| {
                    let at = i * 8 + zeros.trailing_zeros() as usize / 8;
                    zeros &= zeros - 1;
                    at
                })
            })
        })
        .chain(
            tail.iter()
                .enumerate()
                .filter(|(_, byte)| **byte == 0)
                .map(move |(at, _)| tail_at + at),
        )
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("kind", self.kind())
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .field("uid", &self.uid())
            .field("resource_version", &self.resource_version())
            .field("labels", &self.labels().collect::<Vec<_>>())
            .field("body", &self.body)
            .finish()
    }
}

/// An object's labels, in key order: see [`Object::labels`].
#[derive(Debug, Clone)]
pub struct Labels<'a> {
    meta: &'a str,
    starts: &'a [u32],
    next: usize,
    len: usize,
}

impl<'a> Labels<'a> {
    /// Label key (even `i`) or value (odd `i`) number `i`.
    fn field(&self, i: usize) -> &'a str {
        &self.meta[self.starts[i] as usize..self.starts[i + 1] as usize - 1]
    }
}

impl<'a> Iterator for Labels<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next == self.len {
            return None;
        }
        let i = self.next;
        self.next += 1;
        Some((self.field(2 * i), self.field(2 * i + 1)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len - self.next, Some(self.len - self.next))
    }
}

impl ExactSizeIterator for Labels<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    proptest! {
        /// The word-at-a-time scan finds the NULs a byte loop finds, wherever they fall in a word
        /// and whatever bytes surround them (0x01 and 0x80 included).
        #[test]
        fn nuls_are_found_as_a_byte_loop_finds_them(
            meta in proptest::collection::vec(
                prop_oneof![Just(0u8), Just(1u8), Just(0x80u8), Just(0xffu8), any::<u8>()],
                0..64,
            )
        ) {
            let all: Vec<usize> = (0..meta.len()).filter(|at| meta[*at] == 0).collect();
            prop_assert_eq!(nuls(&meta).collect::<Vec<_>>(), all.clone());
            let mut expected = [meta.len(); FIXED];
            expected.iter_mut().zip(&all).for_each(|(end, at)| *end = *at);
            prop_assert_eq!(fixed_ends(&meta), expected);
        }
    }

    fn pod() -> Gvk {
        Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
        }
    }

    #[test]
    fn reads_the_packed_fields_and_labels() {
        let obj = Object::new(
            &pod(),
            "shop",
            "web-1",
            "u-1",
            "42",
            &[("app", "web"), ("tier", "")],
            "{}".into(),
        );
        assert_eq!(
            (
                obj.namespace(),
                obj.name(),
                obj.uid(),
                obj.resource_version()
            ),
            ("shop", "web-1", "u-1", "42")
        );
        assert_eq!(obj.kind(), &pod());
        assert_eq!(
            obj.labels().collect::<Vec<_>>(),
            [("app", "web"), ("tier", "")]
        );
        assert_eq!(
            (
                obj.label("tier"),
                obj.label("app"),
                obj.label("nope"),
                obj.label("")
            ),
            (Some(""), Some("web"), None, None)
        );
        assert_eq!(obj.labels().len(), 2);
        let many: Vec<(String, String)> =
            (0..9).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let obj = Object::new(&pod(), "ns", "n", "u", "1", &many, String::new());
        for (k, v) in &many {
            assert_eq!(obj.label(k), Some(*v), "{k}");
        }
        assert_eq!(
            (obj.label("k"), obj.label("k10"), obj.label("z")),
            (None, None, None)
        );
    }

    #[test]
    fn empty_fields_and_no_labels() {
        let obj = Object::new(
            &Gvk {
                group: "rbac.authorization.k8s.io".into(),
                version: "v1".into(),
                kind: "ClusterRole".into(),
            },
            "",
            "admin",
            "",
            "",
            &[],
            String::new(),
        );
        assert_eq!(
            (
                obj.namespace(),
                obj.name(),
                obj.uid(),
                obj.resource_version()
            ),
            ("", "admin", "", "")
        );
        assert_eq!(obj.kind().group, "rbac.authorization.k8s.io");
        assert_eq!(obj.labels().count(), 0);
    }

    #[test]
    fn a_short_meta_reads_as_empty_fields_rather_than_panicking() {
        let obj = Object::from(types::Object {
            meta: "\0v1\0Pod".into(),
            body: String::new(),
        });
        assert_eq!(
            (obj.kind().kind.as_str(), obj.name(), obj.resource_version()),
            ("Pod", "", "")
        );
        assert_eq!(obj.labels().count(), 0);
    }
}
