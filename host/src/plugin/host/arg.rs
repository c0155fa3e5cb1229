//! [`ArgStr`]: a string argument of a host call, read out of the plugin's memory while the call's
//! arguments are lifted.
//!
//! wasmtime's `WasmStr` keeps a string in the plugin's memory and looks that memory and the
//! call's options up again on each read: three look-ups per string, 15 for a `lister.get`'s five
//! strings. Lifting reads the memory once and has both at hand, so the string is checked and
//! copied then, onto the stack when it is short (every kind, namespace and most names are).

use arrayvec::ArrayString;
use wasmtime::ValRaw;
use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext,
    wasmtime_environ::component::StringEncoding,
};
use wasmtime::component::{ComponentType, Lift};

/// How many bytes of a string argument are kept inline; longer ones go to the heap. A namespace
/// (63 at most), a kind, a version and most object names fit.
const INLINE: usize = 64;

/// A string argument of a host call, checked and copied out of the plugin's memory as it is
/// lifted.
#[derive(Debug)]
pub(crate) enum ArgStr {
    Inline(ArrayString<INLINE>),
    Heap(Box<str>),
}

impl std::ops::Deref for ArgStr {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            ArgStr::Inline(s) => s,
            ArgStr::Heap(s) => s,
        }
    }
}

impl From<&str> for ArgStr {
    fn from(s: &str) -> Self {
        match ArrayString::from(s) {
            Ok(inline) => ArgStr::Inline(inline),
            Err(_) => ArgStr::Heap(s.into()),
        }
    }
}

/// The high bit of a `latin1+utf16` string's length: set, the string is UTF-16.
const UTF16_TAG: usize = 1 << 31;

/// The string at `ptr` of `len` (in the encoding's units, as the canonical ABI passes it) in
/// `memory`, and how many bytes of memory it spans. The same checks as wasmtime's `WasmStr`:
/// alignment, bounds, then the encoding.
fn read(
    memory: &[u8],
    encoding: StringEncoding,
    ptr: usize,
    len: usize,
) -> wasmtime::Result<(ArgStr, usize)> {
    // UTF-8 (every guest SDK's encoding) is taken as it is; `latin1+utf16` tags a UTF-16
    // string's length.
    let (utf16, units) = match encoding {
        StringEncoding::Utf8 => (false, len),
        StringEncoding::CompactUtf16 if len & UTF16_TAG == 0 => (false, len),
        StringEncoding::CompactUtf16 => (true, len ^ UTF16_TAG),
        StringEncoding::Utf16 => (true, len),
    };
    if encoding != StringEncoding::Utf8 && !ptr.is_multiple_of(2) {
        wasmtime::bail!("string pointer not aligned to 2");
    }
    let bytes = match utf16 {
        true => units.checked_mul(2),
        false => Some(units),
    };
    let Some(raw) = bytes.and_then(|bytes| memory.get(ptr..)?.get(..bytes)) else {
        wasmtime::bail!("string pointer/length out of bounds of memory");
    };
    let text = match (encoding, utf16) {
        (StringEncoding::Utf8, _) => ArgStr::from(std::str::from_utf8(raw)?),
        (_, true) => ArgStr::from(
            char::decode_utf16(
                raw.chunks_exact(2)
                    .map(|unit| u16::from_le_bytes([unit[0], unit[1]])),
            )
            .collect::<Result<String, _>>()?
            .as_str(),
        ),
        (_, false) => ArgStr::from(
            raw.iter()
                .map(|&byte| char::from(byte))
                .collect::<String>()
                .as_str(),
        ),
    };
    Ok((text, raw.len()))
}

impl ArgStr {
    fn lift(cx: &mut LiftContext<'_>, ptr: u32, len: u32) -> wasmtime::Result<Self> {
        let encoding = cx.options().string_encoding;
        let (text, bytes) = read(cx.memory(), encoding, ptr as usize, len as usize)?;
        cx.consume_fuel(bytes)?;
        Ok(text)
    }
}

// SAFETY: the ABI is a string's (a pointer and a length), and `typecheck` accepts only strings.
unsafe impl ComponentType for ArgStr {
    type Lower = [ValRaw; 2];

    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, _types: &InstanceType<'_>) -> wasmtime::Result<()> {
        match ty {
            InterfaceType::String => Ok(()),
            _ => wasmtime::bail!("expected `string`"),
        }
    }
}

// SAFETY: lifts what `ComponentType` describes: a pointer and a length, read as wasmtime reads a
// string's (little-endian `u32`s, in flat values or in memory).
unsafe impl Lift for ArgStr {
    fn linear_lift_from_flat(
        cx: &mut LiftContext<'_>,
        _ty: InterfaceType,
        src: &Self::Lower,
    ) -> wasmtime::Result<Self> {
        Self::lift(cx, src[0].get_u32(), src[1].get_u32())
    }

    fn linear_lift_from_memory(
        cx: &mut LiftContext<'_>,
        _ty: InterfaceType,
        bytes: &[u8],
    ) -> wasmtime::Result<Self> {
        let word = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        Self::lift(cx, word(0), word(4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_str(memory: &[u8], encoding: StringEncoding, ptr: usize, len: usize) -> String {
        read(memory, encoding, ptr, len).unwrap().0.to_string()
    }

    #[test]
    fn utf8_is_read_in_bounds_and_checked() {
        let memory = b"..default\0web-1..";
        assert_eq!(read_str(memory, StringEncoding::Utf8, 2, 7), "default");
        assert_eq!(read(memory, StringEncoding::Utf8, 10, 5).unwrap().1, 5);
        let error = read(memory, StringEncoding::Utf8, 10, 9).unwrap_err();
        assert!(error.to_string().contains("out of bounds"), "{error}");
        assert!(
            read(b"\xff\xfe", StringEncoding::Utf8, 0, 2).is_err(),
            "not UTF-8"
        );
    }

    #[test]
    fn a_long_string_is_kept_whole() {
        let name = "n".repeat(INLINE + 1);
        let read = read(name.as_bytes(), StringEncoding::Utf8, 0, name.len())
            .unwrap()
            .0;
        assert!(matches!(read, ArgStr::Heap(_)));
        assert_eq!(&*read, name);
        let short = ArgStr::from("n".repeat(INLINE).as_str());
        assert!(matches!(short, ArgStr::Inline(_)), "{short:?}");
    }

    #[test]
    fn utf16_and_latin1_are_decoded() {
        let utf16: Vec<u8> = "ns-ü".encode_utf16().flat_map(u16::to_le_bytes).collect();
        assert_eq!(read_str(&utf16, StringEncoding::Utf16, 0, 4), "ns-ü");
        assert!(
            read(&[0, 0, 0x61, 0], StringEncoding::Utf16, 1, 1).is_err(),
            "UTF-16 must be aligned to 2"
        );
        assert!(
            read(&[0x00, 0xd8], StringEncoding::Utf16, 0, 1).is_err(),
            "a lone surrogate"
        );
        assert!(
            read(&utf16, StringEncoding::Utf16, 0, 4 | UTF16_TAG).is_err(),
            "a plain UTF-16 length has no tag: this one spans 4 GiB"
        );
        assert_eq!(
            read_str(b"caf\xe9", StringEncoding::CompactUtf16, 0, 4),
            "café",
            "latin1 when the tag is clear"
        );
        assert_eq!(
            read_str(&utf16, StringEncoding::CompactUtf16, 0, 4 | UTF16_TAG),
            "ns-ü",
            "UTF-16 when it is set"
        );
    }
}
