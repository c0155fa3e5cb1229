//! Builds the transcoder's schema table at compile time: every message of the embedded
//! descriptors (`proto/kubernetes.fds.gz`), its fields in the order Go writes them, each with its
//! JSON key, its wire kind and the Go encoder's rules for it (`proto/json-fields.json.gz`).
//!
//! The table is written as Rust statics holding offsets, not pointers (`$OUT_DIR/schema.rs`,
//! included by `src/schema.rs`), so that it is read-only data in the executable: no relocation
//! writes to its pages when the process starts, and only the pages of the types a process
//! transcodes are ever read into memory. Built at run time it took 30 ms and left 1.3 MiB of the
//! heap behind (0.45 MiB of it the table itself), and it needed `prost-reflect` in the binary.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::Read;
use std::ops::Range;
use std::path::PathBuf;

use prost::Message as _;
use prost_reflect::{DescriptorPool, FieldDescriptor, Kind as ProtoKind, MessageDescriptor};
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorSet};

const DESCRIPTORS: &str = "proto/kubernetes.fds.gz";
const JSON_FIELDS: &str = "proto/json-fields.json.gz";

fn main() {
    println!("cargo::rerun-if-changed={DESCRIPTORS}");
    println!("cargo::rerun-if-changed={JSON_FIELDS}");
    let descriptors = gunzip(DESCRIPTORS);
    let mut files = FileDescriptorSet::decode(descriptors.as_slice())
        .unwrap_or_else(|e| panic!("decoding {DESCRIPTORS}: {e}"));
    let map_entries = strip_options(&mut files);
    let pool = DescriptorPool::from_file_descriptor_set(files)
        .unwrap_or_else(|e| panic!("resolving {DESCRIPTORS}: {e}"));
    let table: JsonTable = serde_json::from_slice(&gunzip(JSON_FIELDS))
        .unwrap_or_else(|e| panic!("reading {JSON_FIELDS}: {e}"));
    let code = Table::build(&pool, &table, &map_entries).code();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("schema.rs"), code).expect("writing the schema table");
}

/// `json-fields.json.gz`: how Go writes each API type, and which types write their own JSON.
#[derive(serde::Deserialize)]
struct JsonTable {
    messages: HashMap<String, Vec<JsonField>>,
    #[serde(rename = "customJSON")]
    custom_json: HashSet<String>,
}

/// One row of the JSON field table: field number, JSON name (empty for an embedded struct),
/// flags (`i` inline, `o` omitempty, `z` omitzero, `p` pointer, `s` slice, `m` map, `v` struct
/// value).
#[derive(serde::Deserialize)]
struct JsonField(u32, String, String);

/// The table as it is written out: Rust expressions of `src/schema.rs`'s types.
struct Table {
    /// Every name and key, one after the other.
    text: Text,
    /// `FieldSpec::new(key, rules, shape, kind)` arguments, every message's in turn.
    fields: Vec<(Range<usize>, u8, String, String)>,
    slots: Vec<u16>,
    messages: Vec<Draft>,
    /// `{group's first label or "core"}/{version}/{kind}` → message, sorted by key.
    by_type: Vec<(Range<usize>, usize)>,
    unknown: usize,
    managed_fields: (usize, u16),
}

struct Draft {
    name: Range<usize>,
    special: Option<&'static str>,
    fields: Range<usize>,
    slots: Range<usize>,
    exact: bool,
    /// The messages its fields hold (for [`mark_inexact`]).
    holds: Vec<usize>,
}

const NO_SLOT: u16 = u16::MAX;

impl Table {
    fn build(pool: &DescriptorPool, json: &JsonTable, map_entries: &HashSet<String>) -> Self {
        let table = &json.messages;
        let descriptors: Vec<MessageDescriptor> = pool.all_messages().collect();
        let ids: HashMap<String, usize> = descriptors
            .iter()
            .enumerate()
            .map(|(id, m)| (m.full_name().to_owned(), id))
            .collect();
        let kind = |field: &FieldDescriptor| kind_of(&field.kind(), &ids);
        let mut text = Text::default();
        let mut fields = Vec::new();
        let mut slots: Vec<u16> = Vec::new();
        let mut messages = Vec::with_capacity(descriptors.len());
        for message in &descriptors {
            let name = message.full_name();
            let first_field = fields.len();
            let mut numbers = Vec::new();
            let mut holds = Vec::new();
            let mut add = |field: FieldDescriptor, json_name: &str, rules: u8| {
                let entry = field.kind().as_message().cloned();
                let entry = entry.filter(|entry| map_entries.contains(entry.full_name()));
                let shape = if let Some(entry) = entry.filter(|_| field.is_list()) {
                    let (Some(key), Some(value)) = (entry.get_field(1), entry.get_field(2)) else {
                        unreachable!("a map entry has a key (1) and a value (2)");
                    };
                    holds.extend(message_id(&key, &ids));
                    holds.extend(message_id(&value, &ids));
                    format!("Shape::Map({}, {})", kind(&key), kind(&value))
                } else {
                    holds.extend(message_id(&field, &ids));
                    match field.is_list() {
                        true => "Shape::List".to_owned(),
                        false => "Shape::Single".to_owned(),
                    }
                };
                let key = text.add(&format!("{}:", serde_json::Value::from(json_name)));
                fields.push((key, rules, shape, kind(&field)));
                numbers.push(field.number());
            };
            match table.get(name) {
                // An API type: its fields in the Go struct's order, by their JSON names.
                Some(rows) => {
                    for JsonField(number, json_name, flags) in rows {
                        let Some(field) = message.get_field(*number) else {
                            continue;
                        };
                        if json_name == "-" {
                            continue;
                        }
                        let has = |flag| flags.contains(flag);
                        // The bits of `Rules::from_bits`.
                        let rules = [
                            has('i'),
                            has('o'),
                            has('z'),
                            has('p'),
                            has('p') || has('s') || has('m'),
                            has('v'),
                        ]
                        .iter()
                        .enumerate()
                        .fold(0u8, |bits, (bit, set)| bits | (u8::from(*set) << bit));
                        add(field, json_name, rules);
                    }
                }
                // Not a Go API type (the envelope, map entries): every field that is set, by
                // its proto name, omitted when empty.
                None => {
                    for field in message.fields() {
                        let json_name = field.name().to_owned();
                        add(field, &json_name, 0b10);
                    }
                }
            }
            let first_slot = slots.len();
            slots.resize(
                first_slot + numbers.iter().max().map_or(0, |n| *n as usize + 1),
                NO_SLOT,
            );
            for (slot, number) in numbers.iter().enumerate() {
                slots[first_slot + *number as usize] = slot as u16;
            }
            // Written exactly as Go writes it, as far as this message goes (what it holds is
            // checked by `mark_inexact`): an API type without JSON of its own, or one of those
            // handled here.
            let special = special(name);
            let exact =
                special.is_some() || (table.contains_key(name) && !json.custom_json.contains(name));
            messages.push(Draft {
                name: text.add(name),
                special,
                fields: first_field..fields.len(),
                slots: first_slot..slots.len(),
                exact,
                holds,
            });
        }
        mark_inexact(&mut messages);
        let mut by_type: Vec<(Range<usize>, usize)> = Vec::new();
        let mut seen = HashSet::new();
        for (id, message) in descriptors.iter().enumerate() {
            if !table.contains_key(message.full_name()) {
                continue;
            }
            let package: Vec<&str> = message.package_name().rsplitn(3, '.').collect();
            if let [version, group, ..] = package[..] {
                let key = format!("{group}/{version}/{}", message.name());
                if seen.insert(key.clone()) {
                    by_type.push((text.add(&key), id));
                }
            }
        }
        by_type.sort_by(|a, b| text.0[a.0.clone()].cmp(&text.0[b.0.clone()]));
        let object_meta = ids["k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
        let meta_slots = &slots[messages[object_meta].slots.clone()];
        let managed_fields = meta_slots.get(17).copied().unwrap_or(NO_SLOT);
        Self {
            unknown: ids["k8s.io.apimachinery.pkg.runtime.Unknown"],
            managed_fields: (object_meta, managed_fields),
            text,
            fields,
            slots,
            messages,
            by_type,
        }
    }

    /// The table as Rust source.
    fn code(&self) -> String {
        let span = |r: &Range<usize>| format!("Span::new({}, {})", r.start, r.end - r.start);
        let mut out =
            String::from("// Generated by build.rs from the descriptors; do not edit.\n\n");
        writeln!(out, "static TEXT: &str = {:?};\n", self.text.0).unwrap();
        writeln!(out, "static FIELDS: [FieldSpec; {}] = [", self.fields.len()).unwrap();
        for (key, rules, shape, kind) in &self.fields {
            writeln!(
                out,
                "    FieldSpec::new({}, {rules}, {shape}, {kind}),",
                span(key)
            )
            .unwrap();
        }
        writeln!(
            out,
            "];\n\nstatic SLOTS: [u16; {}] = {:?};\n",
            self.slots.len(),
            self.slots
        )
        .unwrap();
        writeln!(
            out,
            "static MESSAGES: [Message; {}] = [",
            self.messages.len()
        )
        .unwrap();
        for m in &self.messages {
            let special = m
                .special
                .map_or("None".to_owned(), |s| format!("Some(Special::{s})"));
            writeln!(
                out,
                "    Message::new({}, {special}, {}, {}, {}),",
                span(&m.name),
                span(&m.fields),
                span(&m.slots),
                m.exact
            )
            .unwrap();
        }
        writeln!(
            out,
            "];\n\nstatic BY_TYPE: [(Span, MessageId); {}] = [",
            self.by_type.len()
        )
        .unwrap();
        for (key, id) in &self.by_type {
            writeln!(out, "    ({}, {id}),", span(key)).unwrap();
        }
        writeln!(
            out,
            "];\n\npub(crate) static SCHEMA: Schema = Schema {{\n    messages: &MESSAGES,\n    \
             by_type: &BY_TYPE,\n    unknown: {},\n    managed_fields: ({}, {}),\n}};",
            self.unknown, self.managed_fields.0, self.managed_fields.1
        )
        .unwrap();
        out
    }
}

/// Marks every message that holds an inexact one as inexact too (to a fixed point: the types
/// nest in cycles, `JSONSchemaProps` in itself).
fn mark_inexact(messages: &mut [Draft]) {
    loop {
        let exact: Vec<bool> = messages.iter().map(|m| m.exact).collect();
        let mut changed = false;
        for message in messages.iter_mut() {
            if message.exact
                && message.special.is_none()
                && message.holds.iter().any(|id| !exact[*id])
            {
                message.exact = false;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// Leaves the descriptors without their options, noting which messages are map entries (the one
/// option read here): `prost-reflect` resolves options against a pool of Google's well-known
/// types, for nothing the transcoder reads.
fn strip_options(files: &mut FileDescriptorSet) -> HashSet<String> {
    fn strip(scope: &str, message: &mut DescriptorProto, map_entries: &mut HashSet<String>) {
        let name = match scope {
            "" => message.name().to_owned(),
            scope => format!("{scope}.{}", message.name()),
        };
        if message
            .options
            .take()
            .is_some_and(|options| options.map_entry())
        {
            map_entries.insert(name.clone());
        }
        for field in &mut message.field {
            field.options = None;
        }
        for oneof in &mut message.oneof_decl {
            oneof.options = None;
        }
        message.enum_type.iter_mut().for_each(enumeration);
        for nested in &mut message.nested_type {
            strip(&name, nested, map_entries);
        }
    }
    fn enumeration(enumeration: &mut EnumDescriptorProto) {
        enumeration.options = None;
        for value in &mut enumeration.value {
            value.options = None;
        }
    }
    let mut map_entries = HashSet::new();
    for file in &mut files.file {
        file.options = None;
        let package = file.package().to_owned();
        file.enum_type.iter_mut().for_each(enumeration);
        for message in &mut file.message_type {
            strip(&package, message, &mut map_entries);
        }
    }
    map_entries
}

/// The names and keys of the schema, gathered into one string.
#[derive(Default)]
struct Text(String);

impl Text {
    /// Appends `s`; returns where it is.
    fn add(&mut self, s: &str) -> Range<usize> {
        let start = self.0.len();
        self.0.push_str(s);
        start..self.0.len()
    }
}

/// The apimachinery types whose JSON is not an object of their fields: a `Special` variant.
fn special(name: &str) -> Option<&'static str> {
    Some(match name {
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time" => "Time",
        "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => "MicroTime",
        "k8s.io.apimachinery.pkg.api.resource.Quantity"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => "Text",
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => "IntOrString",
        // The raw JSON is field 1 of each (`raw`, but `Raw` in FieldsV1).
        "k8s.io.apimachinery.pkg.runtime.RawExtension"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1"
        | "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON"
        | "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1beta1.JSON" => "RawJson",
        _ => return None,
    })
}

/// The message a field holds, if it holds one.
fn message_id(field: &FieldDescriptor, ids: &HashMap<String, usize>) -> Option<usize> {
    field
        .kind()
        .as_message()
        .map(|message| ids[message.full_name()])
}

/// A field's `Kind` variant.
fn kind_of(kind: &ProtoKind, ids: &HashMap<String, usize>) -> String {
    match kind {
        ProtoKind::Double => "Kind::Double".into(),
        ProtoKind::Float => "Kind::Float".into(),
        ProtoKind::Int32 | ProtoKind::Enum(_) => "Kind::Int32".into(),
        ProtoKind::Int64 => "Kind::Int64".into(),
        ProtoKind::Uint32 => "Kind::Uint32".into(),
        ProtoKind::Uint64 => "Kind::Uint64".into(),
        ProtoKind::Sint32 => "Kind::Sint32".into(),
        ProtoKind::Sint64 => "Kind::Sint64".into(),
        ProtoKind::Fixed32 => "Kind::Fixed32".into(),
        ProtoKind::Fixed64 => "Kind::Fixed64".into(),
        ProtoKind::Sfixed32 => "Kind::Sfixed32".into(),
        ProtoKind::Sfixed64 => "Kind::Sfixed64".into(),
        ProtoKind::Bool => "Kind::Bool".into(),
        ProtoKind::String => "Kind::String".into(),
        ProtoKind::Bytes => "Kind::Bytes".into(),
        ProtoKind::Message(message) => format!("Kind::Message({})", ids[message.full_name()]),
    }
}

fn gunzip(path: &str) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .read_to_end(&mut out)
        .unwrap_or_else(|e| panic!("unpacking {path}: {e}"));
    out
}
