//! The table the transcoder follows: every message of the embedded descriptors, its fields in the
//! order Go writes them, each with its JSON key, its wire kind and the Go encoder's rules for it.
//! Built by `build.rs` when the crate is compiled: read-only data of the executable, with offsets
//! where a table built at run time would hold pointers.

include!(concat!(env!("OUT_DIR"), "/schema.rs"));

/// Index of a message in [`Schema::messages`].
pub(crate) type MessageId = u32;

/// The transcoder's view of the descriptors.
pub(crate) struct Schema {
    pub(crate) messages: &'static [Message],
    /// `{group's first label or "core"}/{version}/{kind}` → message, sorted by key.
    by_type: &'static [(Span, MessageId)],
    /// `runtime.Unknown`, the envelope of every body.
    pub(crate) unknown: MessageId,
    /// `ObjectMeta` and the slot of its `managedFields`.
    pub(crate) managed_fields: (MessageId, u16),
}

/// Where a name or key is in the table's text.
#[derive(Clone, Copy)]
struct Span {
    start: u32,
    len: u16,
}

impl Span {
    const fn new(start: u32, len: u16) -> Self {
        Self { start, len }
    }

    fn text(self) -> &'static str {
        let start = self.start as usize;
        &TEXT[start..start + usize::from(self.len)]
    }
}

/// One message type.
pub(crate) struct Message {
    name: Span,
    /// A type with a JSON form of its own, or `None` for a JSON object of [`Message::fields`].
    pub(crate) special: Option<Special>,
    fields: Span,
    slots: Span,
    /// Whether this message and every one it holds are written as the API server writes them:
    /// not so when one is not an API type (a wrapper of a Go slice, like `ExtraValue`) or writes
    /// its own JSON in a way not handled here (apiextensions' `JSONSchemaPropsOrBool`).
    pub(crate) exact: bool,
}

pub(crate) const NO_SLOT: u16 = u16::MAX;

impl Message {
    const fn new(
        name: Span,
        special: Option<Special>,
        fields: Span,
        slots: Span,
        exact: bool,
    ) -> Self {
        Self {
            name,
            special,
            fields,
            slots,
            exact,
        }
    }

    /// The full protobuf name, for errors.
    pub(crate) fn name(&self) -> &'static str {
        self.name.text()
    }

    /// The fields in the order Go writes them.
    pub(crate) fn fields(&self) -> &'static [FieldSpec] {
        let start = self.fields.start as usize;
        &FIELDS[start..start + usize::from(self.fields.len)]
    }

    /// Field number → index in [`Message::fields`], [`NO_SLOT`] for a field JSON does not write.
    pub(crate) fn slot(&self, number: u32) -> u16 {
        let (start, len) = (self.slots.start as usize, usize::from(self.slots.len));
        match number as usize {
            number if number < len => SLOTS[start + number],
            _ => NO_SLOT,
        }
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
    key: Span,
    pub(crate) rules: Rules,
    pub(crate) shape: Shape,
    pub(crate) kind: Kind,
}

impl FieldSpec {
    const fn new(key: Span, rules: u8, shape: Shape, kind: Kind) -> Self {
        Self {
            key,
            rules: Rules::from_bits(rules),
            shape,
            kind,
        }
    }

    /// `"name":`, ready to copy.
    pub(crate) fn key(&self) -> &'static [u8] {
        self.key.text().as_bytes()
    }
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
    /// The rules from bits in the order of the fields (`inline` is bit 0).
    const fn from_bits(bits: u8) -> Self {
        Self {
            inline: bits & 1 != 0,
            omitempty: bits & 1 << 1 != 0,
            omitzero: bits & 1 << 2 != 0,
            pointer: bits & 1 << 3 != 0,
            nullable: bits & 1 << 4 != 0,
            struct_value: bits & 1 << 5 != 0,
        }
    }

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

// Every protobuf scalar is handled, though the Kubernetes descriptors use only some.
#[allow(dead_code)]
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

impl Schema {
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
        let find = |key: String| {
            self.by_type
                .binary_search_by(|(span, _)| span.text().cmp(&key))
                .ok()
                .map(|at| self.by_type[at].1)
        };
        find(format!("{short}/{version}/{kind}")).or_else(|| find(format!("meta/v1/{kind}")))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Read;

    use prost_reflect::DescriptorPool;

    use super::*;

    /// The descriptors, for tests that encode messages.
    pub(crate) fn pool() -> DescriptorPool {
        let mut descriptors = Vec::new();
        flate2::read::GzDecoder::new(&include_bytes!("../proto/kubernetes.fds.gz")[..])
            .read_to_end(&mut descriptors)
            .unwrap();
        DescriptorPool::decode(descriptors.as_slice()).unwrap()
    }

    #[test]
    fn groups_map_to_their_proto_packages() {
        let name = |v: &str, k: &str| {
            SCHEMA
                .message_for(v, k)
                .map(|id| SCHEMA.messages[id as usize].name())
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
