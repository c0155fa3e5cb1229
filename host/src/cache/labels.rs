//! [`Labels`]: an object's labels, packed into the allocation its cache entry keeps its `meta`
//! fields in.

use std::collections::BTreeMap;
use std::fmt;

/// `metadata.labels` of a cached object, sorted by key, packed as `key\0value\0key\0value` (no
/// separator at either end) inside the one allocation that holds the object's uid and
/// resourceVersion too ([`CachedObject`](super::CachedObject)). A map of eight labels took one
/// B-tree node and sixteen strings (about 1.2 KiB); this takes their bytes. Labels never hold a NUL
/// (the API server refuses them; the cache rejects objects whose labels do).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Labels<'a> {
    packed: &'a str,
    len: usize,
}

/// Appends `labels` to `out` as [`Labels`] reads them, each label as `\0key\0value`; how many
/// there are, or `None` if a key or value holds a NUL.
pub(crate) fn pack(labels: &BTreeMap<String, String>, out: &mut String) -> Option<usize> {
    out.reserve(labels.iter().map(|(k, v)| k.len() + v.len() + 2).sum());
    for (key, value) in labels {
        if key.contains('\0') || value.contains('\0') {
            return None;
        }
        out.push('\0');
        out.push_str(key);
        out.push('\0');
        out.push_str(value);
    }
    Some(labels.len())
}

impl<'a> Labels<'a> {
    /// The `len` labels packed in `packed` (what [`pack`] appended, without its first NUL).
    pub(crate) fn new(packed: &'a str, len: usize) -> Self {
        Self { packed, len }
    }

    /// The labels in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let mut fields = self.packed.split('\0');
        std::iter::from_fn(move || Some((fields.next()?, fields.next()?)))
    }

    /// The value of `key`. Each key is compared in place, and the walk stops at the first key
    /// past `key` (they are in order), skipping a label by finding its separators eight bytes at a
    /// time: a selector tests this for every object a list walks, and splitting the labels into
    /// fields as [`Labels::iter`] does cost nearly four times the instructions.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        let (packed, key) = (self.packed.as_bytes(), key.as_bytes());
        if has_nul(key) {
            return None; // no label key holds a NUL (and the walk relies on it)
        }
        let mut at = 0;
        while at < packed.len() {
            // `packed[at..]` is `label key \0 value \0 …`; a label key holds no NUL, so the first
            // byte where it differs from `key` orders the two.
            let entry = &packed[at..];
            let same = common_prefix(entry, key);
            if same == key.len() {
                return match entry.get(same) {
                    // The label key is `key`: its value runs to the next separator.
                    Some(0) => {
                        let value = at + same + 1;
                        Some(&self.packed[value..nul_from(packed, value)])
                    }
                    // A longer label key with `key` as its prefix: past `key`.
                    _ => None,
                };
            }
            if entry[same] > key[same] {
                return None;
            }
            // Before `key` (its NUL, or a smaller byte, at `same`): skip its key and value.
            at = nul_from(packed, nul_from(packed, at + same) + 1) + 1;
        }
        None
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &'a str> + 'a {
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
}

/// How many bytes `a` and `b` share at their start, found eight bytes a step.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let len = a.len().min(b.len());
    if len == 0 || a[0] != b[0] {
        return 0; // most label keys differ from the one sought at once
    }
    let mut at = 0;
    while at + 8 <= len {
        let word = |s: &[u8]| u64::from_le_bytes(s[at..at + 8].try_into().expect("eight bytes"));
        let differ = word(a) ^ word(b);
        if differ != 0 {
            return at + differ.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    at + a[at..len]
        .iter()
        .zip(&b[at..len])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Whether `bytes` holds a NUL, eight bytes a step, the last few padded: a list asks this of the
/// key sought for every object it walks, where `contains` (a `memchr`) took 70 instructions.
fn has_nul(bytes: &[u8]) -> bool {
    let (words, tail) = bytes.as_chunks::<8>();
    let mut last = [0xff; 8];
    last[..tail.len()].copy_from_slice(tail);
    words
        .iter()
        .chain([&last])
        .any(|word| zero_bytes(u64::from_le_bytes(*word)) != 0)
}

/// The high bit of each byte of `word` set where the lowest zero byte is (and possibly above it).
fn zero_bytes(word: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    word.wrapping_sub(ONES) & !word & HIGHS
}

/// Where the first NUL at or after `from` is in `bytes`, or `bytes.len()`: eight bytes a step
/// (a `memchr` costs more to set up than the few bytes of a label take to scan).
fn nul_from(bytes: &[u8], from: usize) -> usize {
    let mut at = from;
    while let Some(word) = bytes.get(at..at + 8) {
        // The lowest byte whose high bit this sets is the first zero byte.
        let zeros = zero_bytes(u64::from_le_bytes(word.try_into().expect("eight bytes")));
        if zeros != 0 {
            return at + zeros.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    bytes[at.min(bytes.len())..]
        .iter()
        .position(|&b| b == 0)
        .map_or(bytes.len(), |i| at + i)
}

impl fmt::Debug for Labels<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl std::ops::Index<&str> for Labels<'_> {
    type Output = str;

    fn index(&self, key: &str) -> &str {
        self.get(key).unwrap_or_else(|| panic!("no label {key:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Just;

    /// `map` packed, and how many labels.
    fn packed(map: &BTreeMap<String, String>) -> Option<(String, usize)> {
        let mut out = String::new();
        let len = pack(map, &mut out)?;
        Some((out.split_off(out.len().min(1)), len))
    }

    #[test]
    fn packs_in_key_order_and_reads_back() {
        let map: BTreeMap<String, String> =
            [("b", "2"), ("a", ""), ("app.kubernetes.io/name", "web")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        let (packed_map, len) = packed(&map).unwrap();
        let labels = Labels::new(&packed_map, len);
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            [("a", ""), ("app.kubernetes.io/name", "web"), ("b", "2")]
        );
        assert_eq!(
            (labels.get("b"), labels.get("a"), labels.get("c")),
            (Some("2"), Some(""), None)
        );
        assert_eq!(labels.len(), 3);
        assert_eq!(packed_map, "a\0\0app.kubernetes.io/name\0web\0b\x002");
        assert!(Labels::default().iter().next().is_none());
        let empty_value: BTreeMap<String, String> = [("k".to_owned(), String::new())].into();
        let (packed_map, len) = packed(&empty_value).unwrap();
        assert_eq!(
            Labels::new(&packed_map, len).iter().collect::<Vec<_>>(),
            [("k", "")]
        );
        let nul: BTreeMap<String, String> = [("k".to_owned(), "v\0".to_owned())].into();
        assert!(packed(&nul).is_none());
    }

    proptest::proptest! {
        /// `has_nul` answers as `contains(&0)`, at any length and position of the NULs.
        #[test]
        fn has_nul_answers_as_contains(bytes in proptest::collection::vec(proptest::prop_oneof![Just(0u8), Just(1u8), Just(0x80u8), proptest::num::u8::ANY], 0..40)) {
            proptest::prop_assert_eq!(has_nul(&bytes), bytes.contains(&0));
        }

        /// `get` answers what a map lookup does, for keys present, absent, prefixes of present
        /// keys and keys between them (the walk stops early on order).
        #[test]
        fn get_answers_as_a_map_does(
            map in proptest::collection::btree_map("[a-c./]{0,4}", "[a-c]{0,3}", 0..6),
            probes in proptest::collection::vec("[a-c./\\x00]{0,5}", 0..8),
        ) {
            let (packed_map, len) = packed(&map).unwrap();
            let labels = Labels::new(&packed_map, len);
            proptest::prop_assert_eq!(labels.iter().collect::<Vec<_>>(), map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>());
            for key in map.keys().chain(&probes) {
                proptest::prop_assert_eq!(labels.get(key), map.get(key).map(String::as_str), "key {:?}", key);
            }
        }
    }
}
