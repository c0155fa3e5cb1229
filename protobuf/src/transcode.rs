//! One pass from protobuf bytes to JSON text, following the [`Schema`].
//!
//! A message's fields are read into a list of (slot, value) entries, put in the order Go writes
//! them (they arrive in field-number order, which is usually the same), and written one by one;
//! a nested message is transcoded from its bytes in place. The entries of every level share one
//! stack, so a message costs no allocation of its own.

use base64::Engine;

use crate::schema::{self, FieldSpec, Kind, Message, MessageId, NO_SLOT, Schema, Shape, Special};
use crate::{Error, ManagedFields};

const MAGIC: &[u8] = b"k8s\0";

/// Turns a `k8s\0` + `runtime.Unknown` body into the JSON text of the object it holds, with
/// `kind` and `apiVersion` from the envelope, as the API server would have written it (but for
/// the managed fields, with [`ManagedFields::Drop`]).
pub fn to_json(body: &[u8], managed_fields: ManagedFields) -> Result<Vec<u8>, Error> {
    let schema = &schema::SCHEMA;
    let envelope = body.strip_prefix(MAGIC).ok_or(Error::NoMagic)?;
    let unknown = Unknown::read(envelope, schema.messages[schema.unknown as usize].name())?;
    if !unknown.content_encoding.is_empty() {
        return Err(Error::ContentEncoding(
            String::from_utf8_lossy(unknown.content_encoding).into_owned(),
        ));
    }
    let (api_version, kind) = (text(unknown.api_version), text(unknown.kind));
    let id = schema
        .message_for(&api_version, &kind)
        .ok_or_else(|| Error::UnknownType {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let mut writer = Writer {
        schema,
        // The JSON of a Pod with its managed fields is about 1.4 times its protobuf.
        out: Vec::with_capacity(unknown.raw.len() * 3 / 2 + 64),
        entries: Vec::new(),
        skip: match managed_fields {
            ManagedFields::Keep => None,
            ManagedFields::Drop => Some(schema.managed_fields),
        },
    };
    writer.out.extend_from_slice(b"{\"kind\":");
    writer.string(kind.as_bytes());
    writer.out.extend_from_slice(b",\"apiVersion\":");
    writer.string(api_version.as_bytes());
    let mut first = false;
    writer.fields(id, unknown.raw, &mut first)?;
    writer.out.push(b'}');
    Ok(writer.out)
}

/// The `continue` token of a LIST page in protobuf, read without turning the page into JSON (so
/// that the next page can be asked for first); `None` on the last page, or for a body that is
/// not a list. Every Kubernetes list type holds its `ListMeta` in field 1, and `ListMeta` its
/// `continue` in field 3.
pub fn continue_token(body: &[u8]) -> Option<String> {
    let unknown = Unknown::read(body.strip_prefix(MAGIC)?, "runtime.Unknown").ok()?;
    if !unknown.kind.ends_with(b"List") || !unknown.content_encoding.is_empty() {
        return None;
    }
    let list_meta = first_bytes(unknown.raw, 1, "a list")?;
    let token = first_bytes(list_meta, 3, "meta.v1.ListMeta")?;
    let token = std::str::from_utf8(token).ok()?;
    (!token.is_empty()).then(|| token.to_owned())
}

/// The bytes of field `number` where it first occurs in `message`.
fn first_bytes<'a>(message: &'a [u8], number: u32, name: &str) -> Option<&'a [u8]> {
    let mut fields = Fields::new(message, name);
    while let Some(field) = fields.next().ok()? {
        if let (n, Value::Bytes(bytes)) = field
            && n == number
        {
            return Some(bytes);
        }
    }
    None
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The fields of the `runtime.Unknown` envelope.
#[derive(Default)]
struct Unknown<'a> {
    api_version: &'a [u8],
    kind: &'a [u8],
    raw: &'a [u8],
    content_encoding: &'a [u8],
}

impl<'a> Unknown<'a> {
    fn read(bytes: &'a [u8], name: &str) -> Result<Self, Error> {
        let mut unknown = Unknown::default();
        let mut fields = Fields::new(bytes, name);
        while let Some((number, value)) = fields.next()? {
            match (number, value) {
                (1, Value::Bytes(type_meta)) => {
                    let mut inner = Fields::new(type_meta, "runtime.TypeMeta");
                    while let Some((number, value)) = inner.next()? {
                        match (number, value) {
                            (1, Value::Bytes(v)) => unknown.api_version = v,
                            (2, Value::Bytes(v)) => unknown.kind = v,
                            _ => {}
                        }
                    }
                }
                (2, Value::Bytes(raw)) => unknown.raw = raw,
                (3, Value::Bytes(encoding)) => unknown.content_encoding = encoding,
                _ => {}
            }
        }
        Ok(unknown)
    }
}

/// One field's value as the wire carries it.
#[derive(Clone, Copy)]
enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

/// The fields of one message, in wire order.
struct Fields<'a, 'n> {
    bytes: &'a [u8],
    message: &'n str,
}

impl<'a, 'n> Fields<'a, 'n> {
    fn new(bytes: &'a [u8], message: &'n str) -> Self {
        Self { bytes, message }
    }

    #[cold]
    fn malformed(&self, reason: &'static str) -> Error {
        Error::Malformed {
            message: self.message.to_owned(),
            reason,
        }
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, Error> {
        let mut value = 0u64;
        for (i, byte) in self.bytes.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.bytes = &self.bytes[i + 1..];
                return Ok(value);
            }
        }
        Err(self.malformed("a varint runs past the end or over 10 bytes"))
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if n > self.bytes.len() {
            return Err(self.malformed("a field runs past the end of its message"));
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    #[inline]
    fn fixed64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    #[inline]
    fn fixed32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    #[inline]
    fn next(&mut self) -> Result<Option<(u32, Value<'a>)>, Error> {
        if self.bytes.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number =
            u32::try_from(key >> 3).map_err(|_| self.malformed("a field number over 32 bits"))?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(self.fixed64()?),
            2 => {
                let len = usize::try_from(self.varint()?).unwrap_or(usize::MAX);
                Value::Bytes(self.take(len)?)
            }
            5 => Value::Fixed32(self.fixed32()?),
            _ => return Err(self.malformed("a group or an unknown wire type")),
        };
        Ok(Some((number, value)))
    }
}

/// A field value waiting to be written: its slot in the message's field list.
#[derive(Clone, Copy)]
struct Entry<'a> {
    slot: u16,
    value: Value<'a>,
}

struct Writer<'a> {
    schema: &'static Schema,
    out: Vec<u8>,
    /// The entries of the messages being written, innermost last.
    entries: Vec<Entry<'a>>,
    /// A field left out: (message, slot).
    skip: Option<(MessageId, u16)>,
}

impl<'a> Writer<'a> {
    fn message_of(&self, id: MessageId) -> &'static Message {
        &self.schema.messages[id as usize]
    }

    /// Writes a message's JSON form.
    fn message(&mut self, id: MessageId, bytes: &'a [u8]) -> Result<(), Error> {
        let message = self.message_of(id);
        if let Some(special) = message.special {
            return self.special(special, message, bytes);
        }
        self.out.push(b'{');
        let mut first = true;
        self.fields(id, bytes, &mut first)?;
        self.out.push(b'}');
        Ok(())
    }

    /// Writes a message's fields into the object being written (`first`: nothing written in it
    /// yet).
    fn fields(&mut self, id: MessageId, bytes: &'a [u8], first: &mut bool) -> Result<(), Error> {
        let message = self.message_of(id);
        let base = self.entries.len();
        let mut sorted = true;
        let mut reader = Fields::new(bytes, message.name());
        while let Some((number, value)) = reader.next()? {
            let slot = message.slot(number);
            if slot == NO_SLOT || self.skip == Some((id, slot)) {
                continue;
            }
            sorted &=
                self.entries.len() == base || self.entries[self.entries.len() - 1].slot <= slot;
            self.entries.push(Entry { slot, value });
        }
        let end = self.entries.len();
        if !sorted {
            self.entries[base..end].sort_by_key(|entry| entry.slot);
        }
        let mut at = base;
        for (slot, spec) in message.fields().iter().enumerate() {
            let start = at;
            while at < end && usize::from(self.entries[at].slot) == slot {
                at += 1;
            }
            self.field(message, spec, start, at, first)?;
        }
        self.entries.truncate(base);
        Ok(())
    }

    /// Writes one field from its entries `start..end` on the stack (none when unset).
    fn field(
        &mut self,
        message: &'static Message,
        spec: &'static FieldSpec,
        start: usize,
        end: usize,
        first: &mut bool,
    ) -> Result<(), Error> {
        let rules = spec.rules;
        if rules.inline {
            let Kind::Message(inner) = spec.kind else {
                return Ok(());
            };
            let bytes = match end.checked_sub(1).filter(|last| *last >= start) {
                Some(last) => self.bytes_of(last, message)?,
                None => &[],
            };
            return self.fields(inner, bytes, first);
        }
        if start == end && (rules.omitempty || rules.omitzero) {
            return Ok(());
        }
        let mark = self.out.len();
        if !*first {
            self.out.push(b',');
        }
        self.out.extend_from_slice(spec.key());
        let value_at = self.out.len();
        match spec.shape {
            _ if start == end && rules.nullable => self.out.extend_from_slice(b"null"),
            Shape::Single if start == end => self.zero(spec.kind)?,
            Shape::Single => {
                let value = self.entries[end - 1].value;
                self.value(spec.kind, value, message)?;
            }
            Shape::List => {
                self.out.push(b'[');
                let mut written = 0;
                for at in start..end {
                    let value = self.entries[at].value;
                    written = self.element(spec.kind, value, message, written)?;
                }
                self.out.push(b']');
            }
            Shape::Map(key, value) => {
                self.out.push(b'{');
                for at in start..end {
                    if at > start {
                        self.out.push(b',');
                    }
                    let entry = self.bytes_of(at, message)?;
                    self.map_entry(key, value, entry, message)?;
                }
                self.out.push(b'}');
            }
        }
        if rules.omits_empty() && is_empty(&self.out[value_at..]) {
            self.out.truncate(mark);
            return Ok(());
        }
        *first = false;
        Ok(())
    }

    fn bytes_of(&self, at: usize, message: &Message) -> Result<&'a [u8], Error> {
        match self.entries[at].value {
            Value::Bytes(bytes) => Ok(bytes),
            _ => Err(wrong_wire_type(message)),
        }
    }

    /// Writes one or more list elements (a packed scalar list carries several in one value);
    /// returns how many have been written so far.
    fn element(
        &mut self,
        kind: Kind,
        value: Value<'a>,
        message: &Message,
        mut written: usize,
    ) -> Result<usize, Error> {
        let packed = matches!(value, Value::Bytes(_))
            && !matches!(kind, Kind::String | Kind::Bytes | Kind::Message(_));
        if !packed {
            if written > 0 {
                self.out.push(b',');
            }
            self.value(kind, value, message)?;
            return Ok(written + 1);
        }
        let Value::Bytes(bytes) = value else {
            unreachable!()
        };
        let mut reader = Fields::new(bytes, message.name());
        while !reader.bytes.is_empty() {
            let value = match kind {
                Kind::Fixed64 | Kind::Sfixed64 | Kind::Double => Value::Fixed64(reader.fixed64()?),
                Kind::Fixed32 | Kind::Sfixed32 | Kind::Float => Value::Fixed32(reader.fixed32()?),
                _ => Value::Varint(reader.varint()?),
            };
            if written > 0 {
                self.out.push(b',');
            }
            self.value(kind, value, message)?;
            written += 1;
        }
        Ok(written)
    }

    /// Writes `"key":value` from a map entry's bytes (key field 1, value field 2).
    fn map_entry(
        &mut self,
        key_kind: Kind,
        value_kind: Kind,
        entry: &'a [u8],
        message: &Message,
    ) -> Result<(), Error> {
        let (mut key, mut value) = (None, None);
        let mut reader = Fields::new(entry, message.name());
        while let Some((number, field)) = reader.next()? {
            match number {
                1 => key = Some(field),
                2 => value = Some(field),
                _ => {}
            }
        }
        match (key_kind, key) {
            (Kind::String, Some(Value::Bytes(text))) => self.string(text),
            (Kind::String, None) => self.out.extend_from_slice(b"\"\""),
            (kind, key) => {
                // Go writes a map's integer keys as strings.
                self.out.push(b'"');
                match key {
                    Some(key) => self.value(kind, key, message)?,
                    None => self.zero(kind)?,
                }
                self.out.push(b'"');
            }
        }
        self.out.push(b':');
        match value {
            Some(value) => self.value(value_kind, value, message),
            None => self.zero(value_kind),
        }
    }

    /// Writes the JSON Go writes for an unset field of this kind.
    fn zero(&mut self, kind: Kind) -> Result<(), Error> {
        match kind {
            Kind::Bool => self.out.extend_from_slice(b"false"),
            Kind::String => self.out.extend_from_slice(b"\"\""),
            // A nil []byte.
            Kind::Bytes => self.out.extend_from_slice(b"null"),
            Kind::Message(id) => self.message(id, &[])?,
            _ => self.out.push(b'0'),
        }
        Ok(())
    }

    fn value(&mut self, kind: Kind, value: Value<'a>, message: &Message) -> Result<(), Error> {
        match (kind, value) {
            (Kind::Bool, Value::Varint(n)) => {
                self.out
                    .extend_from_slice(if n != 0 { b"true" } else { b"false" })
            }
            (Kind::Int32, Value::Varint(n)) => self.integer(i64::from(n as i32)),
            (Kind::Int64, Value::Varint(n)) => self.integer(n as i64),
            (Kind::Uint32, Value::Varint(n)) => self.integer(i64::from(n as u32)),
            (Kind::Uint64, Value::Varint(n)) => self.integer(n),
            (Kind::Sint32, Value::Varint(n)) => self.integer(i64::from(zigzag(n) as i32)),
            (Kind::Sint64, Value::Varint(n)) => self.integer(zigzag(n)),
            (Kind::Fixed32, Value::Fixed32(n)) => self.integer(i64::from(n)),
            (Kind::Sfixed32, Value::Fixed32(n)) => self.integer(i64::from(n as i32)),
            (Kind::Fixed64, Value::Fixed64(n)) => self.integer(n),
            (Kind::Sfixed64, Value::Fixed64(n)) => self.integer(n as i64),
            (Kind::Float, Value::Fixed32(n)) => self.float(f64::from(f32::from_bits(n))),
            (Kind::Double, Value::Fixed64(n)) => self.float(f64::from_bits(n)),
            (Kind::String, Value::Bytes(text)) => self.string(text),
            (Kind::Bytes, Value::Bytes(bytes)) => {
                self.out.push(b'"');
                let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
                self.out.extend_from_slice(encoded.as_bytes());
                self.out.push(b'"');
            }
            (Kind::Message(id), Value::Bytes(bytes)) => self.message(id, bytes)?,
            _ => return Err(wrong_wire_type(message)),
        }
        Ok(())
    }

    fn integer(&mut self, n: impl itoa::Integer) {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    }

    fn float(&mut self, x: f64) {
        if x.is_finite() {
            serde_json::to_writer(&mut self.out, &x).expect("writing to a Vec");
        } else {
            self.out.extend_from_slice(b"null");
        }
    }

    /// Writes a JSON string; invalid UTF-8 becomes U+FFFD, as Go's encoder writes it.
    fn string(&mut self, bytes: &[u8]) {
        let lossy;
        let text = match std::str::from_utf8(bytes) {
            Ok(_) => bytes,
            Err(_) => {
                lossy = String::from_utf8_lossy(bytes);
                lossy.as_bytes()
            }
        };
        self.out.reserve(text.len() + 2);
        self.out.push(b'"');
        let mut start = 0;
        for (at, &byte) in text.iter().enumerate() {
            if !ESCAPED[usize::from(byte)] {
                continue;
            }
            self.out.extend_from_slice(&text[start..at]);
            match byte {
                b'"' => self.out.extend_from_slice(b"\\\""),
                b'\\' => self.out.extend_from_slice(b"\\\\"),
                b'\n' => self.out.extend_from_slice(b"\\n"),
                b'\r' => self.out.extend_from_slice(b"\\r"),
                b'\t' => self.out.extend_from_slice(b"\\t"),
                _ => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    self.out.extend_from_slice(b"\\u00");
                    self.out.push(HEX[usize::from(byte >> 4)]);
                    self.out.push(HEX[usize::from(byte & 0xf)]);
                }
            }
            start = at + 1;
        }
        self.out.extend_from_slice(&text[start..]);
        self.out.push(b'"');
    }

    fn special(
        &mut self,
        special: Special,
        message: &Message,
        bytes: &'a [u8],
    ) -> Result<(), Error> {
        let mut fields: [Option<Value<'a>>; 4] = [None; 4];
        let mut reader = Fields::new(bytes, message.name());
        while let Some((number, value)) = reader.next()? {
            if let Some(field) = fields.get_mut(number as usize) {
                *field = Some(value);
            }
        }
        let int = |number: usize| match fields[number] {
            Some(Value::Varint(n)) => n as i64,
            _ => 0,
        };
        let bytes_at = |number: usize| match fields[number] {
            Some(Value::Bytes(bytes)) => Some(bytes),
            _ => None,
        };
        match special {
            Special::Time | Special::MicroTime => {
                let (seconds, nanos) = (int(1), int(2));
                if seconds == 0 && nanos == 0 {
                    self.out.extend_from_slice(b"null");
                } else {
                    let micros = (special == Special::MicroTime).then_some(nanos / 1000);
                    timestamp(&mut self.out, seconds, micros);
                }
            }
            Special::Text => match bytes_at(1) {
                Some(text) => self.string(text),
                // The zero Quantity; a zero Duration is never left unset on the wire.
                None => self.out.extend_from_slice(b"\"0\""),
            },
            Special::IntOrString => match (int(1), bytes_at(3)) {
                (1, text) => self.string(text.unwrap_or_default()),
                _ => self.integer(i64::from(int(2) as i32)),
            },
            Special::RawJson => match bytes_at(1).map(<[u8]>::trim_ascii) {
                Some(raw) if !raw.is_empty() => self.out.extend_from_slice(raw),
                _ => self.out.extend_from_slice(b"null"),
            },
        }
        Ok(())
    }
}

/// The bytes a JSON string cannot hold as they are: control characters, `"` and `\\`.
static ESCAPED: [bool; 256] = {
    let mut escaped = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        escaped[byte] = true;
        byte += 1;
    }
    escaped[b'"' as usize] = true;
    escaped[b'\\' as usize] = true;
    escaped
};

fn wrong_wire_type(message: &Message) -> Error {
    Error::Malformed {
        message: message.name().to_owned(),
        reason: "a field's wire type does not match its declared type",
    }
}

fn zigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

/// Whether a written JSON value is one Go's `omitempty` leaves out.
fn is_empty(json: &[u8]) -> bool {
    matches!(json, b"false" | b"0" | b"\"\"" | b"[]" | b"{}" | b"null")
}

/// Writes `"2024-05-01T12:00:00Z"`, or `"2024-05-01T12:00:00.000000Z"` with microseconds (Go's
/// RFC 3339 layouts for `metav1.Time` and `metav1.MicroTime`, in UTC).
fn timestamp(out: &mut Vec<u8>, seconds: i64, micros: Option<i64>) {
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    out.push(b'"');
    if (0..10_000).contains(&year) {
        digits(out, year as u32, 4);
    } else {
        out.extend_from_slice(itoa::Buffer::new().format(year).as_bytes());
    }
    for (separator, value) in [
        (b'-', month),
        (b'-', day),
        (b'T', (of_day / 3600) as u32),
        (b':', (of_day / 60 % 60) as u32),
        (b':', (of_day % 60) as u32),
    ] {
        out.push(separator);
        digits(out, value, 2);
    }
    if let Some(micros) = micros {
        out.push(b'.');
        digits(out, micros.clamp(0, 999_999) as u32, 6);
    }
    out.extend_from_slice(b"Z\"");
}

/// Writes `value` in `width` decimal digits, zero-padded.
fn digits(out: &mut Vec<u8>, value: u32, width: u32) {
    for place in (0..width).rev() {
        out.push(b'0' + (value / 10u32.pow(place) % 10) as u8);
    }
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use prost::Message as _;
    use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, Value as Field};
    use serde_json::{Value as Json, json};

    use super::*;
    use crate::schema::tests::pool;

    struct Messages(DescriptorPool);

    impl Messages {
        fn message(&self, name: &str) -> DynamicMessage {
            DynamicMessage::new(self.0.get_message_by_name(name).unwrap())
        }

        /// `object` as the API server sends it: the magic, then a `runtime.Unknown`.
        fn body(&self, api_version: &str, kind: &str, object: &DynamicMessage) -> Vec<u8> {
            self.envelope(api_version, kind, object.encode_to_vec())
        }

        /// The magic, then a `runtime.Unknown` holding `raw`.
        fn envelope(&self, api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
            let mut type_meta = self.message("k8s.io.apimachinery.pkg.runtime.TypeMeta");
            type_meta.set_field_by_name("apiVersion", Field::String(api_version.into()));
            type_meta.set_field_by_name("kind", Field::String(kind.into()));
            let mut unknown = self.message("k8s.io.apimachinery.pkg.runtime.Unknown");
            unknown.set_field_by_name("typeMeta", Field::Message(type_meta));
            unknown.set_field_by_name("raw", Field::Bytes(raw.into()));
            [MAGIC, &unknown.encode_to_vec()].concat()
        }

        fn json(&self, api_version: &str, kind: &str, object: &DynamicMessage) -> Json {
            let text = to_json(&self.body(api_version, kind, object), ManagedFields::Keep).unwrap();
            serde_json::from_slice(&text).unwrap()
        }
    }

    fn messages() -> Messages {
        Messages(pool())
    }

    #[test]
    fn a_configmap_becomes_its_json() {
        let m = messages();
        let mut meta = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        meta.set_field_by_name("name", Field::String("settings".into()));
        meta.set_field_by_name("namespace", Field::String(String::new()));
        meta.set_field_by_name(
            "creationTimestamp",
            Field::Message(m.message("k8s.io.apimachinery.pkg.apis.meta.v1.Time")),
        );
        let mut cm = m.message("k8s.io.api.core.v1.ConfigMap");
        cm.set_field_by_name("metadata", Field::Message(meta));
        cm.set_field_by_name(
            "data",
            Field::Map(
                [
                    (
                        MapKey::String("mode".into()),
                        Field::String("fast\n\"x\"\u{1}\\".into()),
                    ),
                    (MapKey::String("empty".into()), Field::String(String::new())),
                ]
                .into(),
            ),
        );
        cm.set_field_by_name(
            "binaryData",
            Field::Map(
                [(
                    MapKey::String("b".into()),
                    Field::Bytes(vec![0, 255].into()),
                )]
                .into(),
            ),
        );
        assert_eq!(
            m.json("v1", "ConfigMap", &cm),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings"},
                "data": {"mode": "fast\n\"x\"\u{1}\\", "empty": ""}, "binaryData": {"b": "AP8="}})
        );
    }

    #[test]
    fn fields_are_written_as_the_go_types_tags_say() {
        let m = messages();
        // `Volume` embeds its `VolumeSource`, which embeds nothing but holds a `configMap`
        // whose `LocalObjectReference` is embedded too: both inline in JSON.
        let mut reference = m.message("k8s.io.api.core.v1.LocalObjectReference");
        reference.set_field_by_name("name", Field::String("web".into()));
        let mut config_map = m.message("k8s.io.api.core.v1.ConfigMapVolumeSource");
        config_map.set_field_by_name("localObjectReference", Field::Message(reference));
        let mut source = m.message("k8s.io.api.core.v1.VolumeSource");
        source.set_field_by_name("configMap", Field::Message(config_map));
        let mut volume = m.message("k8s.io.api.core.v1.Volume");
        volume.set_field_by_name("name", Field::String("config".into()));
        volume.set_field_by_name("volumeSource", Field::Message(source));
        assert_eq!(
            m.json("v1", "Volume", &volume),
            json!({"kind": "Volume", "apiVersion": "v1", "name": "config", "configMap": {"name": "web"}})
        );
        // `ready` and `imageID` have no omitempty: false and "" are written; `containerID` has
        // it; `state` is a struct value, written even when empty; `restartCount` is unset, so
        // its zero value is written.
        let mut status = m.message("k8s.io.api.core.v1.ContainerStatus");
        status.set_field_by_name("name", Field::String("web".into()));
        status.set_field_by_name("ready", Field::Bool(false));
        status.set_field_by_name("imageID", Field::String(String::new()));
        status.set_field_by_name("containerID", Field::String(String::new()));
        status.set_field_by_name(
            "state",
            Field::Message(m.message("k8s.io.api.core.v1.ContainerState")),
        );
        assert_eq!(
            m.json("v1", "ContainerStatus", &status),
            json!({"kind": "ContainerStatus", "apiVersion": "v1", "name": "web", "state": {},
                "ready": false, "restartCount": 0, "image": "", "imageID": ""})
        );
    }

    #[test]
    fn fields_come_out_in_the_go_structs_order() {
        // A Pod's `metadata` (field 1) comes before its `spec` (2) in Go's JSON; sent the other
        // way round on the wire, they still come out in Go's order.
        let m = messages();
        let mut meta = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        meta.set_field_by_name("name", Field::String("p".into()));
        let mut spec = m.message("k8s.io.api.core.v1.PodSpec");
        spec.set_field_by_name("nodeName", Field::String("n1".into()));
        let mut pod = m.message("k8s.io.api.core.v1.Pod");
        pod.set_field_by_name("spec", Field::Message(spec));
        pod.set_field_by_name("metadata", Field::Message(meta));
        let ordered = pod.encode_to_vec();
        let (metadata, spec) = ordered.split_at(2 + usize::from(ordered[1]));
        let text = |raw: Vec<u8>| {
            let body = m.envelope("v1", "Pod", raw);
            String::from_utf8(to_json(&body, ManagedFields::Keep).unwrap()).unwrap()
        };
        let expected = text(ordered.clone());
        assert!(
            expected
                .starts_with(r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"},"spec":{"#),
            "{expected}"
        );
        assert_eq!(text([spec, metadata].concat()), expected);
    }

    #[test]
    fn apimachinery_types_take_their_json_forms() {
        let m = messages();
        let mut meta = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        let mut time = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.Time");
        time.set_field_by_name("seconds", Field::I64(1_700_000_000));
        meta.set_field_by_name("creationTimestamp", Field::Message(time));
        let mut fields = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1");
        fields.set_field_by_number(1, Field::Bytes(br#"{"f:metadata":{}}"#.to_vec().into()));
        let mut entry = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry");
        entry.set_field_by_name("fieldsV1", Field::Message(fields));
        let mut micro = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.Time");
        micro.set_field_by_name("seconds", Field::I64(-1));
        entry.set_field_by_name("time", Field::Message(micro));
        meta.set_field_by_name("managedFields", Field::List(vec![Field::Message(entry)]));
        let mut port = m.message("k8s.io.apimachinery.pkg.util.intstr.IntOrString");
        port.set_field_by_name("type", Field::I64(1));
        port.set_field_by_name("strVal", Field::String("http".into()));
        let mut action = m.message("k8s.io.api.core.v1.HTTPGetAction");
        action.set_field_by_name("port", Field::Message(port));
        let mut quantity = m.message("k8s.io.apimachinery.pkg.api.resource.Quantity");
        quantity.set_field_by_name("string", Field::String("100m".into()));
        let mut resources = m.message("k8s.io.api.core.v1.ResourceRequirements");
        resources.set_field_by_name(
            "limits",
            Field::Map([(MapKey::String("cpu".into()), Field::Message(quantity))].into()),
        );
        let mut event = m.message("k8s.io.api.events.v1.Event");
        let mut at = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime");
        at.set_field_by_name("seconds", Field::I64(951_782_400)); // 2000-02-29
        at.set_field_by_name("nanos", Field::I32(123_456_789));
        event.set_field_by_name("eventTime", Field::Message(at));
        event.set_field_by_name("metadata", Field::Message(meta));
        let json = m.json("events.k8s.io/v1", "Event", &event);
        assert_eq!(json["eventTime"], "2000-02-29T00:00:00.123456Z");
        assert_eq!(
            json["metadata"]["creationTimestamp"],
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            json["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:metadata": {}})
        );
        assert_eq!(
            json["metadata"]["managedFields"][0]["time"],
            "1969-12-31T23:59:59Z"
        );
        assert_eq!(json["deprecatedLastTimestamp"], Json::Null, "an unset time");
        assert_eq!(m.json("v1", "HTTPGetAction", &action)["port"], "http");
        assert_eq!(
            m.json("v1", "ResourceRequirements", &resources)["limits"],
            json!({"cpu": "100m"})
        );
        let body = m.body("events.k8s.io/v1", "Event", &event);
        let dropped: Json =
            serde_json::from_slice(&to_json(&body, ManagedFields::Drop).unwrap()).unwrap();
        assert_eq!(
            dropped["metadata"],
            json!({"creationTimestamp": "2023-11-14T22:13:20Z"}),
            "managed fields dropped"
        );
    }

    #[test]
    fn bad_bodies_are_refused_with_the_reason() {
        assert_eq!(
            to_json(b"{\"kind\":\"Pod\"}", ManagedFields::Keep),
            Err(Error::NoMagic)
        );
        let m = messages();
        let pod = m.message("k8s.io.api.core.v1.Pod");
        let body = m.body("example.com/v1", "Widget", &pod);
        assert_eq!(
            to_json(&body, ManagedFields::Keep),
            Err(Error::UnknownType {
                api_version: "example.com/v1".into(),
                kind: "Widget".into()
            })
        );
        let mut meta = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        meta.set_field_by_name("name", Field::String("p".into()));
        let mut pod = m.message("k8s.io.api.core.v1.Pod");
        pod.set_field_by_name("metadata", Field::Message(meta));
        let mut body = m.body("v1", "Pod", &pod);
        body.truncate(body.len() - 1);
        assert_eq!(
            to_json(&body, ManagedFields::Keep).unwrap_err().to_string(),
            "decoding the protobuf k8s.io.apimachinery.pkg.runtime.Unknown: a field runs past the end of its message"
        );
    }

    #[test]
    fn a_list_pages_continue_token_is_read_from_its_list_meta() {
        let m = messages();
        let page = |token: &str, kind: &str| {
            let mut list_meta = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.ListMeta");
            list_meta.set_field_by_name("resourceVersion", Field::String("7".into()));
            list_meta.set_field_by_name("continue", Field::String(token.into()));
            let mut pod = m.message("k8s.io.api.core.v1.Pod");
            let mut meta = m.message("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta");
            meta.set_field_by_name("name", Field::String("p".into()));
            pod.set_field_by_name("metadata", Field::Message(meta));
            let mut list = m.message("k8s.io.api.core.v1.PodList");
            list.set_field_by_name("items", Field::List(vec![Field::Message(pod)]));
            list.set_field_by_name("metadata", Field::Message(list_meta));
            m.body("v1", kind, &list)
        };
        assert_eq!(
            continue_token(&page("eyJ2IjoibWV0YSJ9", "PodList")).as_deref(),
            Some("eyJ2IjoibWV0YSJ9")
        );
        assert_eq!(continue_token(&page("", "PodList")), None, "the last page");
        assert_eq!(continue_token(&page("x", "Pod")), None, "not a list");
        let mut cut = page("x", "PodList");
        cut.truncate(cut.len() - 1);
        assert_eq!(continue_token(&cut), None);
        assert_eq!(continue_token(b"{\"metadata\":{\"continue\":\"x\"}}"), None);
    }
}
