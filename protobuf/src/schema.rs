//! The table the transcoder follows: every message of the embedded descriptors, its fields in the
//! order Go writes them, each with its JSON key, its wire kind and the Go encoder's rules for it.
//! Built once, on first use.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::ops::Range;
use std::sync::LazyLock;

use prost::Message as _;
use prost_reflect::{DescriptorPool, FieldDescriptor, Kind as ProtoKind, MessageDescriptor};
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorSet};

use crate::Error;

static DESCRIPTORS: &[u8] = include_bytes!("../proto/kubernetes.fds.gz");
static JSON_FIELDS: &[u8] = include_bytes!("../proto/json-fields.json.gz");

static SCHEMA: LazyLock<Result<Schema, String>> = LazyLock::new(Schema::load);

/// The schema, or why it could not be built.
pub(crate) fn get() -> Result<&'static Schema, Error> {
    SCHEMA.as_ref().map_err(|e| Error::Schema(e.clone()))
}

/// Index of a message in [`Schema::messages`].
pub(crate) type MessageId = u32;

/// The transcoder's view of the descriptors. It lives as long as the process: its names, keys,
/// fields and slots are each one allocation, made once and never freed (`&'static` slices), so
/// that the table is small and leaves no freed gaps behind in the heap's pages.
pub(crate) struct Schema {
    pub(crate) messages: Vec<Message>,
    /// `{group's first label or "core"}/{version}/{kind}` → message.
    by_type: HashMap<&'static str, MessageId>,
    /// `runtime.Unknown`, the envelope of every body.
    pub(crate) unknown: MessageId,
    /// `ObjectMeta` and the slot of its `managedFields`.
    pub(crate) managed_fields: (MessageId, u16),
}

/// One message type.
pub(crate) struct Message {
    /// The full protobuf name, for errors.
    pub(crate) name: &'static str,
    /// A type with a JSON form of its own, or `None` for a JSON object of [`Message::fields`].
    pub(crate) special: Option<Special>,
    /// The fields in the order Go writes them.
    pub(crate) fields: &'static [FieldSpec],
    /// Field number → index in `fields`, [`NO_SLOT`] for a field JSON does not write.
    pub(crate) slots: &'static [u16],
    /// Whether this message and every one it holds are written as the API server writes them:
    /// not so when one is not an API type (a wrapper of a Go slice, like `ExtraValue`) or writes
    /// its own JSON in a way not handled here (apiextensions' `JSONSchemaPropsOrBool`).
    pub(crate) exact: bool,
}

pub(crate) const NO_SLOT: u16 = u16::MAX;

impl Message {
    pub(crate) fn slot(&self, number: u32) -> u16 {
        self.slots.get(number as usize).copied().unwrap_or(NO_SLOT)
    }
}

/// The apimachinery types whose JSON is not an object of their fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Special {
    /// `meta/v1.Time`: RFC 3339 to the second; the zero time is `null`.
    Time,
    /// `meta/v1.MicroTime`: RFC 3339 to the microsecond.
    MicroTime,
    /// `resource.Quantity`, `meta/v1.Duration`: field 1's string.
    Text,
    /// `intstr.IntOrString`: field 3's string when field 1 is 1, else field 2's number.
    IntOrString,
    /// `runtime.RawExtension`, `meta/v1.FieldsV1`, apiextensions' `JSON`: field 1's bytes are JSON.
    RawJson,
}

/// One field as Go writes it.
pub(crate) struct FieldSpec {
    /// `"name":`, ready to copy.
    pub(crate) key: &'static [u8],
    pub(crate) rules: Rules,
    pub(crate) shape: Shape,
    pub(crate) kind: Kind,
}

/// The Go encoder's rules for a field (from its struct tag and type).
#[derive(Clone, Copy, Default)]
pub(crate) struct Rules {
    /// An embedded struct: its fields are written into the enclosing object.
    pub(crate) inline: bool,
    pub(crate) omitempty: bool,
    pub(crate) omitzero: bool,
    /// A pointer, slice or map: `null` when unset (a nil pointer is never empty for omitempty).
    pub(crate) pointer: bool,
    pub(crate) nullable: bool,
    /// A struct value, which omitempty never leaves out.
    pub(crate) struct_value: bool,
}

impl Rules {
    /// Whether an empty value (`false`, `0`, `""`, `[]`, `{}`, `null`) is left out.
    pub(crate) fn omits_empty(self) -> bool {
        (self.omitempty && !self.struct_value && !self.pointer) || (self.omitzero && !self.pointer)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Single,
    List,
    /// A map; its entries' key and value kinds.
    Map(Kind, Kind),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Float,
    Double,
    String,
    Bytes,
    Message(MessageId),
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

impl Schema {
    fn load() -> Result<Self, String> {
        let descriptors = gunzip(DESCRIPTORS, "the protobuf descriptors")?;
        let mut files = FileDescriptorSet::decode(descriptors.as_slice())
            .map_err(|e| format!("loading the protobuf descriptors: {e}"))?;
        let map_entries = strip_options(&mut files);
        let pool = DescriptorPool::from_file_descriptor_set(files)
            .map_err(|e| format!("loading the protobuf descriptors: {e}"))?;
        let table: JsonTable =
            serde_json::from_slice(&gunzip(JSON_FIELDS, "the JSON field table")?)
                .map_err(|e| format!("loading the JSON field table: {e}"))?;
        Ok(Self::build(&pool, &table, &map_entries))
    }

    fn build(pool: &DescriptorPool, json: &JsonTable, map_entries: &HashSet<String>) -> Self {
        let table = &json.messages;
        let descriptors: Vec<MessageDescriptor> = pool.all_messages().collect();
        let ids: HashMap<String, MessageId> = descriptors
            .iter()
            .enumerate()
            .map(|(id, m)| (m.full_name().to_owned(), id as MessageId))
            .collect();
        let kind = |field: &FieldDescriptor| kind_of(&field.kind(), &ids);
        // Every message's fields, then every text, gathered first and leaked once each.
        let mut text = Text::default();
        let mut fields: Vec<(Range<usize>, Rules, Shape, Kind)> = Vec::new();
        let mut slots: Vec<u16> = Vec::new();
        let mut drafts = Vec::with_capacity(descriptors.len());
        for message in &descriptors {
            let name = message.full_name();
            let first_field = fields.len();
            let mut numbers = Vec::new();
            let mut add = |field: FieldDescriptor, json_name: &str, rules: Rules| {
                let entry = field.kind().as_message().cloned();
                let entry = entry.filter(|entry| map_entries.contains(entry.full_name()));
                let shape = if let Some(entry) = entry.filter(|_| field.is_list()) {
                    let (Some(key), Some(value)) = (entry.get_field(1), entry.get_field(2)) else {
                        unreachable!("a map entry has a key (1) and a value (2)");
                    };
                    Shape::Map(kind(&key), kind(&value))
                } else if field.is_list() {
                    Shape::List
                } else {
                    Shape::Single
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
                        let rules = Rules {
                            inline: has('i'),
                            omitempty: has('o'),
                            omitzero: has('z'),
                            pointer: has('p'),
                            nullable: has('p') || has('s') || has('m'),
                            struct_value: has('v'),
                        };
                        add(field, json_name, rules);
                    }
                }
                // Not a Go API type (the envelope, map entries): every field that is set, by
                // its proto name.
                None => {
                    for field in message.fields() {
                        let json_name = field.name().to_owned();
                        let rules = Rules {
                            omitempty: true,
                            ..Rules::default()
                        };
                        add(field, &json_name, rules);
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
            drafts.push((
                text.add(name),
                special,
                first_field..fields.len(),
                first_slot..slots.len(),
                exact,
            ));
        }
        let mut types = Vec::new();
        for (id, message) in descriptors.iter().enumerate() {
            if !table.contains_key(message.full_name()) {
                continue;
            }
            let package: Vec<&str> = message.package_name().rsplitn(3, '.').collect();
            if let [version, group, ..] = package[..] {
                let key = format!("{group}/{version}/{}", message.name());
                types.push((text.add(&key), id as MessageId));
            }
        }
        let text: &'static str = Box::leak(text.0.into_boxed_str());
        let fields: &'static [FieldSpec] = Box::leak(
            fields
                .into_iter()
                .map(|(key, rules, shape, kind)| FieldSpec {
                    key: text[key].as_bytes(),
                    rules,
                    shape,
                    kind,
                })
                .collect(),
        );
        let slots: &'static [u16] = Box::leak(slots.into_boxed_slice());
        let mut messages: Vec<Message> = drafts
            .into_iter()
            .map(|(name, special, field_range, slot_range, exact)| Message {
                name: &text[name],
                special,
                fields: &fields[field_range],
                slots: &slots[slot_range],
                exact,
            })
            .collect();
        mark_inexact(&mut messages);
        let mut by_type = HashMap::with_capacity(types.len());
        for (key, id) in types {
            by_type.entry(&text[key]).or_insert(id);
        }
        let object_meta = ids["k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
        let managed_fields = messages[object_meta as usize].slot(17);
        Self {
            messages,
            by_type,
            unknown: ids["k8s.io.apimachinery.pkg.runtime.Unknown"],
            managed_fields: (object_meta, managed_fields),
        }
    }

    /// The message for `apiVersion`/`kind`: package `….{group's first label}.{version}` (`core`
    /// for the core group), or `meta/v1`'s (`Status`, `DeleteOptions`, `PartialObjectMetadata`).
    pub(crate) fn message_for(&self, api_version: &str, kind: &str) -> Option<MessageId> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let short = match group {
            "" => "core",
            // The Kubernetes groups: `apps`, `batch`, …, and `*.k8s.io`; never a custom group.
            group if !group.contains('.') || group.ends_with(".k8s.io") => {
                group.split('.').next().unwrap_or(group)
            }
            _ => return None,
        };
        self.by_type
            .get(format!("{short}/{version}/{kind}").as_str())
            .or_else(|| self.by_type.get(format!("meta/v1/{kind}").as_str()))
            .copied()
    }
}

/// Marks every message that holds an inexact one as inexact too (to a fixed point: the types
/// nest in cycles, `JSONSchemaProps` in itself).
fn mark_inexact(messages: &mut [Message]) {
    let holds = |message: &Message, exact: &[bool]| {
        message.special.is_some()
            || message.fields.iter().all(|field| {
                let kinds = match field.shape {
                    Shape::Map(key, value) => [key, value],
                    _ => [field.kind, field.kind],
                };
                kinds.iter().all(|kind| match kind {
                    Kind::Message(id) => exact[*id as usize],
                    _ => true,
                })
            })
    };
    let mut exact: Vec<bool> = messages.iter().map(|m| m.exact).collect();
    loop {
        let mut changed = false;
        for (id, message) in messages.iter().enumerate() {
            if exact[id] && !holds(message, &exact) {
                exact[id] = false;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for (message, exact) in messages.iter_mut().zip(exact) {
        message.exact = exact;
    }
}

/// Leaves the descriptors without their options, noting which messages are map entries (the one
/// option read here). `prost-reflect` resolves options against a pool of Google's well-known
/// types that it builds on first use and keeps for good: about 20,000 small allocations, 0.3 MiB
/// of the process's memory after a trim (1.8 against 1.5 MiB) for nothing the transcoder reads.
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

fn special(name: &str) -> Option<Special> {
    Some(match name {
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time" => Special::Time,
        "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => Special::MicroTime,
        "k8s.io.apimachinery.pkg.api.resource.Quantity"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => Special::Text,
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => Special::IntOrString,
        // The raw JSON is field 1 of each (`raw`, but `Raw` in FieldsV1).
        "k8s.io.apimachinery.pkg.runtime.RawExtension"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1"
        | "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON"
        | "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1beta1.JSON" => Special::RawJson,
        _ => return None,
    })
}

fn kind_of(kind: &ProtoKind, ids: &HashMap<String, MessageId>) -> Kind {
    match kind {
        ProtoKind::Double => Kind::Double,
        ProtoKind::Float => Kind::Float,
        ProtoKind::Int32 | ProtoKind::Enum(_) => Kind::Int32,
        ProtoKind::Int64 => Kind::Int64,
        ProtoKind::Uint32 => Kind::Uint32,
        ProtoKind::Uint64 => Kind::Uint64,
        ProtoKind::Sint32 => Kind::Sint32,
        ProtoKind::Sint64 => Kind::Sint64,
        ProtoKind::Fixed32 => Kind::Fixed32,
        ProtoKind::Fixed64 => Kind::Fixed64,
        ProtoKind::Sfixed32 => Kind::Sfixed32,
        ProtoKind::Sfixed64 => Kind::Sfixed64,
        ProtoKind::Bool => Kind::Bool,
        ProtoKind::String => Kind::String,
        ProtoKind::Bytes => Kind::Bytes,
        ProtoKind::Message(message) => Kind::Message(ids[message.full_name()]),
    }
}

fn gunzip(bytes: &[u8], what: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| format!("unpacking {what}: {e}"))?;
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The descriptors, for tests that encode messages.
    pub(crate) fn pool() -> DescriptorPool {
        DescriptorPool::decode(gunzip(DESCRIPTORS, "descriptors").unwrap().as_slice()).unwrap()
    }

    #[test]
    fn groups_map_to_their_proto_packages() {
        let schema = get().unwrap();
        let name = |v: &str, k: &str| {
            schema
                .message_for(v, k)
                .map(|id| schema.messages[id as usize].name)
        };
        assert_eq!(
            name("apps/v1", "Deployment"),
            Some("k8s.io.api.apps.v1.Deployment")
        );
        assert_eq!(name("v1", "PodList"), Some("k8s.io.api.core.v1.PodList"));
        assert_eq!(
            name("rbac.authorization.k8s.io/v1", "Role"),
            Some("k8s.io.api.rbac.v1.Role")
        );
        assert_eq!(
            name("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
            Some("k8s.io.api.authorization.v1.SelfSubjectAccessReview")
        );
        assert_eq!(
            name("apiextensions.k8s.io/v1", "CustomResourceDefinitionList"),
            Some(
                "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinitionList"
            )
        );
        assert_eq!(
            name("v1", "Status"),
            Some("k8s.io.apimachinery.pkg.apis.meta.v1.Status")
        );
        assert_eq!(
            name("v1", "DeleteOptions"),
            Some("k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions")
        );
        assert_eq!(name("example.com/v1", "Widget"), None);
        assert_eq!(
            name("apps.example.com/v1", "Deployment"),
            None,
            "a custom group"
        );
    }

    #[test]
    fn kinds_holding_a_type_with_json_of_its_own_are_not_exact() {
        assert!(crate::knows("v1", "PodList"));
        assert!(crate::knows("apps/v1", "DeploymentList"));
        // JSONSchemaPropsOrBool writes a bool or a schema; UserInfo's ExtraValue is a Go slice.
        assert!(!crate::knows(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinitionList"
        ));
        assert!(!crate::knows(
            "certificates.k8s.io/v1",
            "CertificateSigningRequestList"
        ));
        assert!(!crate::knows("example.com/v1", "WidgetList"));
    }
}
