//! [`SharedObject`]: the record `object` as it crosses into a plugin, in a handler call or a
//! lister answer, lowered into the guest's memory by hand with nothing copied on the host; and
//! [`PackedKind`], the start of every object's `meta` (docs/object-crossing.md).

use std::collections::BTreeSet;
use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex};

use wasmtime::ValRaw;
use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext, typecheck_record,
    wasmtime_environ::component::StringEncoding,
};
use wasmtime::component::{ComponentType, Lower};

use crate::cache::{CachedObject, Gvk};
use crate::plugin::memory::write_pointer_pairs;

/// The record `object` as it crosses into a plugin, in a handler call or a lister answer: nothing
/// of it is copied on the host, and it holds one reference to the cached object. `meta` is written
/// from the object's fields and its body copied from the cache, each straight into the memory the
/// guest allocates for it (issue 17; docs/object-crossing.md). The host links `lister` and calls
/// the 0.3.x event handlers itself to pass it: the generated bindings take owned records.
pub(crate) struct SharedObject {
    kind: PackedKind,
    object: Arc<CachedObject>,
}

impl SharedObject {
    /// `object`, of the kind `kind` packs. Taken by value: a lister answer moves the references
    /// its store handed out (a clone and a drop more would cost two atomic operations per object).
    pub(crate) fn new(kind: PackedKind, object: Arc<CachedObject>) -> Self {
        Self { kind, object }
    }

    /// The 0.2 contract's record (its generated bindings take owned records), the body copied.
    pub(crate) fn into_v02(self) -> crate::plugin::bindings_v02::wasmformer::plugin::types::Object {
        crate::plugin::bindings_v02::wasmformer::plugin::types::Object {
            meta: self.meta(),
            body: self.object.body().to_owned(),
        }
    }

    /// `meta`'s fields after the kind, as the cache packs them already: the namespace and name,
    /// then the uid, resourceVersion and labels.
    fn fields(&self) -> [&str; 2] {
        let obj = &self.object;
        [obj.key().packed(), obj.meta_tail()]
    }

    /// How long `meta` is.
    fn meta_len(&self) -> usize {
        self.kind.0.len() + self.fields().iter().map(|f| 1 + f.len()).sum::<usize>()
    }

    /// Writes `meta` (kind, identity and labels NUL-separated; the cache refuses objects whose
    /// fields hold a NUL) into `dst`, which is exactly [`SharedObject::meta_len`] bytes long.
    fn write_meta(&self, dst: &mut [u8]) {
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            dst[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(self.kind.0.as_bytes());
        for field in self.fields() {
            put(b"\0");
            put(field.as_bytes());
        }
    }

    /// `meta` as a host string (for the 0.2 contract, a guest that takes UTF-16, and tests).
    fn meta(&self) -> String {
        let mut bytes = vec![0; self.meta_len()];
        self.write_meta(&mut bytes);
        String::from_utf8(bytes).expect("the cache's strings joined by NULs")
    }

    /// Lowers `meta` and the body into the guest, and with `record_at` the record's two pointer
    /// pairs at that offset: the addresses and lengths. `meta` is written straight into the memory
    /// the guest allocates for it (UTF-8, what Rust, Python and JavaScript guests take; a guest
    /// that asked for UTF-16 gets wasmtime's own lowering of the string built on the host), and
    /// everything is written through one look-up of the guest's memory (each costs one; a listed
    /// object made four). Building `meta` as a host `String` first cost a `malloc`, a `free` and a
    /// copy per object.
    fn lower_fields<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        record_at: Option<usize>,
    ) -> wasmtime::Result<[(usize, usize); 2]> {
        if !matches!(cx.options().string_encoding, StringEncoding::Utf8) {
            let fields = [
                lower_str(cx, &self.meta())?,
                lower_str(cx, self.object.body())?,
            ];
            if let Some(at) = record_at {
                write_pointer_pairs(cx.get::<RECORD_BYTES>(at), &fields)?;
            }
            return Ok(fields);
        }
        let body = self.object.body().as_bytes();
        let meta_len = self.meta_len();
        let fields = [
            (cx.realloc(0, 0, 1, meta_len)?, meta_len),
            (cx.realloc(0, 0, 1, body.len())?, body.len()),
        ];
        let memory = cx.as_slice_mut();
        self.write_meta(&mut memory[fields[0].0..][..meta_len]);
        memory[fields[1].0..][..body.len()].copy_from_slice(body);
        if let Some(at) = record_at {
            write_pointer_pairs(&mut memory[at..][..RECORD_BYTES], &fields)?;
        }
        Ok(fields)
    }
}

/// Lowers `text` as wasmtime lowers a `string`: its address and length in the guest.
fn lower_str<T>(cx: &mut LowerContext<'_, T>, text: &str) -> wasmtime::Result<(usize, usize)> {
    let mut flat = MaybeUninit::<[ValRaw; 2]>::uninit();
    text.linear_lower_to_flat(cx, InterfaceType::String, &mut flat)?;
    // SAFETY: `linear_lower_to_flat` returned `Ok`: it wrote both values.
    let [ptr, len] = unsafe { flat.assume_init() };
    Ok((ptr.get_i64() as usize, len.get_i64() as usize))
}

/// The canonical ABI of a `string`.
const STRING_ABI: CanonicalAbiInfo = <str as ComponentType>::ABI;
/// The size of the record `object` in a guest's memory: two pointer pairs, one after the other.
const RECORD_BYTES: usize = 16;

// SAFETY: `SharedObject` is the record `object { meta: string, body: string }` (checked by name
// and type in `typecheck`), laid out and lowered as wasmtime's derive lays out and lowers such a
// record: two pointer pairs, in field order, each pointing at UTF-8 bytes the guest allocated.
unsafe impl ComponentType for SharedObject {
    type Lower = [ValRaw; 4];
    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::record_static(&[STRING_ABI, STRING_ABI]);

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        typecheck_record(
            ty,
            types,
            &[
                ("meta", <str as ComponentType>::typecheck),
                ("body", <str as ComponentType>::typecheck),
            ],
        )
    }
}

// SAFETY: as for `ComponentType`.
unsafe impl Lower for SharedObject {
    fn linear_lower_to_flat<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        dst: &mut MaybeUninit<[ValRaw; 4]>,
    ) -> wasmtime::Result<()> {
        let [(meta, meta_len), (body, body_len)] = self.lower_fields(cx, None)?;
        // Pointers and lengths are written as 64-bit values, as wasmtime writes a string's.
        dst.write([meta, meta_len, body, body_len].map(|v| ValRaw::i64(v as i64)));
        Ok(())
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        debug_assert!(offset.is_multiple_of(Self::ALIGN32 as usize));
        // The two pointer pairs are adjacent (checked by the test of the record's layout).
        self.lower_fields(cx, Some(offset))?;
        Ok(())
    }
}

/// A kind's group, version and kind NUL-separated: the start of every `meta` of that kind, packed
/// once per kind and kept for the life of the process (there are as many as kinds the host ever
/// served plugins, a few dozen bytes each), so passing one costs nothing per object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackedKind(&'static str);

impl PackedKind {
    pub(crate) fn new(gvk: &Gvk) -> Self {
        static KINDS: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
        let packed = format!("{}\0{}\0{}", gvk.group, gvk.version, gvk.kind);
        let mut kinds = KINDS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(kind) = kinds.get(packed.as_str()) {
            return Self(kind);
        }
        let kind: &'static str = Box::leak(packed.into_boxed_str());
        kinds.insert(kind);
        Self(kind)
    }

    /// `last` if it packs `gvk` (a plugin's events are mostly of one kind), else `gvk` packed
    /// and kept in `last`.
    pub(crate) fn reuse(last: &mut Option<Self>, gvk: &Gvk) -> Self {
        match *last {
            Some(kind) if kind.packs(gvk) => kind,
            _ => *last.insert(Self::new(gvk)),
        }
    }

    /// Whether this is `gvk` packed. Compared a byte at a time: this runs once per event, on
    /// a few bytes, and three calls of `memcmp` cost the empty call 8% of its time.
    fn packs(&self, gvk: &Gvk) -> bool {
        let fields = [&gvk.group, &gvk.version, &gvk.kind].map(|f| f.as_bytes());
        let mut packed = self.0.as_bytes().iter();
        for (i, field) in fields.into_iter().enumerate() {
            if i > 0 && packed.next() != Some(&0) {
                return false;
            }
            if !field.iter().all(|byte| packed.next() == Some(byte)) {
                return false;
            }
        }
        packed.next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(labels: serde_json::Value) -> Arc<CachedObject> {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "ns", "name": "web", "uid": "u-1", "resourceVersion": "42",
                         "labels": labels},
        });
        Arc::new(CachedObject::from_value(pod, true, &[]).unwrap())
    }

    fn meta(gvk: &Gvk, obj: &Arc<CachedObject>) -> String {
        SharedObject::new(PackedKind::new(gvk), obj.clone()).meta()
    }

    /// The layout `types.wit` documents: kind, identity, then each label's key and value in key
    /// order, NUL-separated, with no separator at either end.
    #[test]
    fn meta_packs_kind_identity_and_labels_in_order() {
        let apps = Gvk {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
        };
        let labeled = object(serde_json::json!({"tier": "web", "app": "shop"}));
        assert_eq!(
            meta(&apps, &labeled),
            "apps\0v1\0Deployment\0ns\0web\0u-1\x0042\0app\0shop\0tier\0web"
        );
        let core = Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
        };
        assert_eq!(
            meta(&core, &object(serde_json::json!({}))),
            "\0v1\0Pod\0ns\0web\0u-1\x0042"
        );
    }

    /// `linear_lower_to_memory` writes the record as 16 bytes: meta's pointer pair, then body's.
    #[test]
    fn the_record_is_two_adjacent_pointer_pairs() {
        let mut offset = 0;
        assert_eq!(STRING_ABI.next_field32_size(&mut offset), 0);
        assert_eq!(STRING_ABI.next_field32_size(&mut offset), 8);
        assert_eq!(<SharedObject as ComponentType>::SIZE32, RECORD_BYTES);
        assert_eq!(<SharedObject as ComponentType>::ALIGN32, 4);
    }

    #[test]
    fn a_packed_kind_is_reused_only_for_its_own_kind() {
        let gvk = |group: &str, version: &str, kind: &str| Gvk {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        };
        let mut last = None;
        let pod = PackedKind::reuse(&mut last, &gvk("", "v1", "Pod"));
        assert!(std::ptr::eq(
            pod.0,
            PackedKind::reuse(&mut last, &gvk("", "v1", "Pod")).0
        ));
        assert!(
            std::ptr::eq(pod.0, PackedKind::new(&gvk("", "v1", "Pod")).0),
            "packed once"
        );
        // Same bytes shifted between fields, or one more byte: another kind.
        for other in [
            gvk("v1", "", "Pod"),
            gvk("", "v1P", "od"),
            gvk("", "v1", "Pods"),
            gvk("a", "v1", "Pod"),
        ] {
            let packed = PackedKind::reuse(&mut last, &other);
            assert_eq!(packed, PackedKind::new(&other), "{other:?}");
            assert_ne!(packed, pod);
        }
    }
}
