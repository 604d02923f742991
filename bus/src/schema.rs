//! Type names, schemas and schema-driven decoding for values on the bus.
//!
//! Every value type exports a [`Schema`]: its serde format (serde-reflection's data model),
//! how its bytes are laid out ([`Encoding`]), and a structural [`SchemaHash`]. A slot
//! stores the schema bytes and hash, so a subscription of another type is refused by
//! comparing hashes, and tools decode any slot to JSON without the Rust type.
//!
//! Submodules: `format` (the format types), `trace` and `sample` (tracing a Rust type),
//! `wire` (schema bytes and the canonical hash form), `pod` (C layout and its proof),
//! `json` and `encode` (bincode value bytes to and from JSON), `pod_json` (pod value bytes
//! to and from JSON).

mod encode;
mod format;
mod json;
mod pod;
mod pod_json;
mod sample;
mod trace;
mod wire;

#[cfg(test)]
mod pod_tests;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeMap;
use std::fmt;

pub use format::{ContainerFormat, Format, Named, VariantFormat};
pub use wire::fnv1a64;

/// How a value's bytes are laid out in a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Encoding {
    /// serde with [`crate::codec::config`].
    Bincode,
    /// The raw bytes of a `#[repr(C)]` [`bytemuck::Pod`] type, in native byte order.
    Pod,
}

/// Structural hash of a schema; equal hashes mean the bytes decode the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SchemaHash(pub u64);

impl fmt::Display for SchemaHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// The format of one value type, enough to decode its bytes without the Rust type.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    type_name: String,
    encoding: Encoding,
    root: Format,
    containers: BTreeMap<String, ContainerFormat>,
    pod: Option<pod::Layout>,
    hash: SchemaHash,
}

/// Why a schema could not be built, read, or used on a value.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("cannot trace the serde format of {type_name}: {reason}")]
    Trace { type_name: String, reason: String },
    #[error("type {type_name} cannot be a pod value: {reason}")]
    NotPod { type_name: String, reason: String },
    #[error("type {type_name} is not #[repr(C)] ({detail})")]
    NotReprC { type_name: String, detail: String },
    #[error("corrupt schema bytes at offset {offset}: {reason}")]
    Corrupt { offset: usize, reason: String },
    #[error("cannot decode the value (type {type_name}) at {path}: {reason}")]
    Decode {
        type_name: String,
        path: String,
        reason: String,
    },
    #[error("{path}: {reason} (encoding type {type_name} from JSON)")]
    Encode {
        type_name: String,
        path: String,
        reason: String,
    },
}

/// Deepest nesting of formats or values accepted; bounds recursion on hostile input.
const MAX_DEPTH: usize = 64;

impl Schema {
    /// Traces `T`'s serde format; values are encoded with [`crate::codec`].
    pub fn of_serde<T: serde::Serialize + serde::de::DeserializeOwned>(
    ) -> Result<Schema, SchemaError> {
        let (root, containers) = trace::<T>()?;
        Schema::build(
            std::any::type_name::<T>(),
            Encoding::Bincode,
            root,
            containers,
        )
    }

    /// Traces `T` and proves that its memory layout is the C layout of its fields in
    /// declaration order, so tools can read fields at computed offsets.
    pub fn of_pod<T: bytemuck::Pod + serde::de::DeserializeOwned>() -> Result<Schema, SchemaError> {
        let type_name = std::any::type_name::<T>();
        let (root, containers) = trace::<T>()?;
        let layout =
            pod::Layout::compute(&root, &containers).map_err(|reason| SchemaError::NotPod {
                type_name: type_name.to_string(),
                reason,
            })?;
        let (size, align) = (std::mem::size_of::<T>(), std::mem::align_of::<T>());
        // A type aligned beyond its fields (`#[repr(C, align(16))]`) has the C layout still,
        // when its size adds no padding: the offsets are proven below.
        let over_aligned = align > layout.align && align % layout.align == 0;
        if layout.size != size || (align != layout.align && !over_aligned) {
            return Err(SchemaError::NotReprC {
                type_name: type_name.to_string(),
                detail: format!(
                    "the C layout of its fields has size {} and alignment {}, the type has \
                     size {size} and alignment {align}",
                    layout.size, layout.align
                ),
            });
        }
        pod::prove::<T>(&layout.plan(&root, &containers))?;
        Schema::build(type_name, Encoding::Pod, root, containers)
    }

    /// Checks the formats, computes the pod layout and the hash.
    fn build(
        type_name: &str,
        encoding: Encoding,
        root: Format,
        containers: BTreeMap<String, ContainerFormat>,
    ) -> Result<Schema, SchemaError> {
        let trace_error = |reason: String| SchemaError::Trace {
            type_name: type_name.to_string(),
            reason,
        };
        wire::check(&root, &containers).map_err(trace_error)?;
        let pod = match encoding {
            Encoding::Bincode => None,
            Encoding::Pod => Some(pod::Layout::compute(&root, &containers).map_err(|reason| {
                SchemaError::NotPod {
                    type_name: type_name.to_string(),
                    reason,
                }
            })?),
        };
        let hash = SchemaHash(wire::fnv1a64(&wire::canonical(
            encoding,
            &root,
            &containers,
        )));
        Ok(Schema {
            type_name: type_name.to_string(),
            encoding,
            root,
            containers,
            pod,
            hash,
        })
    }

    /// The Rust type name (`std::any::type_name`) of the type that exported this schema.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// FNV-1a 64 over the structure only: Rust paths and container names are left out so
    /// identically shaped types from separately written programs interoperate.
    pub fn hash(&self) -> SchemaHash {
        self.hash
    }

    /// Size in bytes of a pod value; `None` for bincode values.
    pub fn pod_size(&self) -> Option<usize> {
        self.pod.as_ref().map(|layout| layout.size)
    }

    /// The traced format of the value itself.
    pub fn root(&self) -> &Format {
        &self.root
    }

    /// Named structs and enums reachable from [`Schema::root`], by container name.
    pub fn containers(&self) -> &BTreeMap<String, ContainerFormat> {
        &self.containers
    }

    /// Whether a value of this schema can hold a length prefix: decoding then bounds what a
    /// prefix may ask to allocate ([`crate::codec::decode_from`]).
    ///
    /// The schema is traced through the type's `Deserialize` with every enum variant visited,
    /// so it records every string, byte buffer, sequence or map that `Deserialize` can ask
    /// bincode for; a type whose `Deserialize` asks for other things than while traced breaks
    /// the bus's schema contract anyway (its hash would not describe its bytes).
    pub fn length_prefixes(&self) -> crate::codec::LengthPrefixes {
        fn holds(format: &Format) -> bool {
            let mut found = matches!(
                format,
                Format::Str | Format::Bytes | Format::Seq(_) | Format::Map { .. }
            );
            wire::for_children(format, &mut |child| found = found || holds(child));
            found
        }
        // Named containers are checked once each, not followed from where they are used.
        let mut found = holds(&self.root);
        for container in self.containers.values() {
            wire::container_children(container, &mut |child| found = found || holds(child));
        }
        if found {
            crate::codec::LengthPrefixes::Possible
        } else {
            crate::codec::LengthPrefixes::Absent
        }
    }

    /// The form stored next to a slot, type name included.
    pub fn to_bytes(&self) -> Vec<u8> {
        wire::to_bytes(self)
    }

    /// Reads bytes made by [`Schema::to_bytes`]; corrupt or hostile bytes give an error.
    pub fn from_bytes(bytes: &[u8]) -> Result<Schema, SchemaError> {
        let parts = wire::from_bytes(bytes)?;
        let corrupt = |reason: String| SchemaError::Corrupt {
            offset: bytes.len(),
            reason,
        };
        // No Rust type, field or variant has one; a schema from another computer with one
        // would put terminal escapes into `bus-inspect`'s output.
        if let Some(name) = name_with_control_character(&parts.type_name, &parts.containers) {
            return Err(corrupt(format!(
                "a name holds a control character: {name:?}"
            )));
        }
        let schema = Schema::build(
            &parts.type_name,
            parts.encoding,
            parts.root,
            parts.containers,
        )
        .map_err(|error| corrupt(error.to_string()))?;
        if schema.pod_size() != parts.pod_size {
            return Err(corrupt(format!(
                "recorded pod size {:?} differs from the computed {:?}",
                parts.pod_size,
                schema.pod_size()
            )));
        }
        Ok(schema)
    }

    /// Human-readable form, e.g. `struct Pose { x: f64, y: f64, tag: str }`, one line per
    /// reachable container after the root when the root is not itself a container.
    pub fn describe(&self) -> String {
        let mut lines = Vec::new();
        if !matches!(self.root, Format::TypeName(_)) {
            lines.push(format_name(&self.root));
        }
        for name in wire::reachable(&self.root, &self.containers) {
            if let Some(container) = self.containers.get(name) {
                lines.push(describe_container(name, container));
            }
        }
        if let Some(layout) = &self.pod {
            lines.push(format!(
                "pod: {} bytes, alignment {}",
                layout.size, layout.align
            ));
        }
        lines.join("\n")
    }

    /// Decodes one stored value into JSON shaped like `serde_json::to_value` of it.
    pub fn decode_json(&self, bytes: &[u8]) -> Result<serde_json::Value, SchemaError> {
        match &self.pod {
            None => json::decode_bincode(self, bytes),
            Some(layout) => pod_json::decode_pod(self, layout, bytes),
        }
    }

    /// Encodes a JSON value into the bytes a publisher of this type would store.
    pub fn encode_json(&self, value: &serde_json::Value) -> Result<Vec<u8>, SchemaError> {
        match &self.pod {
            None => encode::encode_bincode(self, value),
            Some(layout) => pod_json::encode_pod(self, layout, value),
        }
    }
}

fn trace<T: serde::de::DeserializeOwned>(
) -> Result<(Format, BTreeMap<String, ContainerFormat>), SchemaError> {
    trace::trace::<T>().map_err(|error| SchemaError::Trace {
        type_name: std::any::type_name::<T>().to_string(),
        reason: error.0,
    })
}

/// The short name used in descriptions and error messages.
fn format_name(format: &Format) -> String {
    match format {
        Format::TypeName(name) => name.clone(),
        Format::Unit => "()".to_string(),
        Format::Bool => "bool".to_string(),
        Format::I8 => "i8".to_string(),
        Format::I16 => "i16".to_string(),
        Format::I32 => "i32".to_string(),
        Format::I64 => "i64".to_string(),
        Format::I128 => "i128".to_string(),
        Format::U8 => "u8".to_string(),
        Format::U16 => "u16".to_string(),
        Format::U32 => "u32".to_string(),
        Format::U64 => "u64".to_string(),
        Format::U128 => "u128".to_string(),
        Format::F32 => "f32".to_string(),
        Format::F64 => "f64".to_string(),
        Format::Char => "char".to_string(),
        Format::Str => "str".to_string(),
        Format::Bytes => "bytes".to_string(),
        Format::Option(inner) => format!("Option<{}>", format_name(inner)),
        Format::Seq(inner) => format!("Vec<{}>", format_name(inner)),
        Format::Map { key, value } => {
            format!("Map<{}, {}>", format_name(key), format_name(value))
        }
        Format::Tuple(items) if items.len() == 1 => format!("({},)", list(items)),
        Format::Tuple(items) => format!("({})", list(items)),
        Format::TupleArray { content, size } => format!("[{}; {size}]", format_name(content)),
    }
}

fn list(items: &[Format]) -> String {
    let names: Vec<String> = items.iter().map(format_name).collect();
    names.join(", ")
}

fn fields(items: &[Named<Format>]) -> String {
    let names: Vec<String> = items
        .iter()
        .map(|field| format!("{}: {}", field.name, format_name(&field.value)))
        .collect();
    if names.is_empty() {
        "{}".to_string()
    } else {
        format!("{{ {} }}", names.join(", "))
    }
}

fn describe_container(name: &str, container: &ContainerFormat) -> String {
    match container {
        ContainerFormat::UnitStruct => format!("struct {name};"),
        ContainerFormat::NewTypeStruct(inner) => format!("struct {name}({});", format_name(inner)),
        ContainerFormat::TupleStruct(items) => format!("struct {name}({});", list(items)),
        ContainerFormat::Struct(items) => format!("struct {name} {}", fields(items)),
        ContainerFormat::Enum(variants) => {
            let variants: Vec<String> = variants
                .values()
                .map(|variant| match &variant.value {
                    VariantFormat::Unit => variant.name.clone(),
                    VariantFormat::NewType(inner) => {
                        format!("{}({})", variant.name, format_name(inner))
                    }
                    VariantFormat::Tuple(items) => format!("{}({})", variant.name, list(items)),
                    VariantFormat::Struct(items) => format!("{} {}", variant.name, fields(items)),
                })
                .collect();
            format!("enum {name} {{ {} }}", variants.join(", "))
        }
    }
}

/// The first of the type's name, its containers' names and their fields' and variants' names
/// that holds a control character.
fn name_with_control_character<'a>(
    type_name: &'a str,
    containers: &'a BTreeMap<String, ContainerFormat>,
) -> Option<&'a str> {
    let fields = |named: &'a [Named<Format>]| named.iter().map(|f| f.name.as_str());
    let mut names: Vec<&str> = vec![type_name];
    for (name, container) in containers {
        names.push(name);
        match container {
            ContainerFormat::Struct(named) => names.extend(fields(named)),
            ContainerFormat::Enum(variants) => {
                for variant in variants.values() {
                    names.push(&variant.name);
                    if let VariantFormat::Struct(named) = &variant.value {
                        names.extend(fields(named));
                    }
                }
            }
            _ => {}
        }
    }
    names
        .into_iter()
        .find(|name| name.chars().any(char::is_control))
}
