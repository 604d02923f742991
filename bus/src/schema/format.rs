//! The format types of a schema: serde-reflection's data model, minus its tracing-only
//! `Variable` case.
//!
//! serde-reflection's own types hold that case as `Rc<RefCell<..>>`, which makes any type
//! containing them neither `Send` nor `Sync`; a `Schema` is shared between threads, so it
//! keeps these plain mirrors instead (same names and shapes).

use std::collections::BTreeMap;

/// The serde data model of one value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// A named container (struct or enum), defined in the schema's containers.
    TypeName(String),
    Unit,
    Bool,
    I8,
    I16,
    I32,
    I64,
    I128,
    U8,
    U16,
    U32,
    U64,
    U128,
    F32,
    F64,
    Char,
    Str,
    Bytes,
    Option(Box<Format>),
    /// A sequence of any length, e.g. `Vec<T>`.
    Seq(Box<Format>),
    Map {
        key: Box<Format>,
        value: Box<Format>,
    },
    /// A tuple of differing formats (or of fewer than two).
    Tuple(Vec<Format>),
    /// `size` values of one format, e.g. `[T; N]`.
    TupleArray {
        content: Box<Format>,
        size: usize,
    },
}

/// The format of a named struct or enum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerFormat {
    UnitStruct,
    NewTypeStruct(Box<Format>),
    TupleStruct(Vec<Format>),
    Struct(Vec<Named<Format>>),
    /// Variants by serde variant index (the `u32` bincode writes).
    Enum(BTreeMap<u32, Named<VariantFormat>>),
}

/// The payload of one enum variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VariantFormat {
    Unit,
    NewType(Box<Format>),
    Tuple(Vec<Format>),
    Struct(Vec<Named<Format>>),
}

/// A field or variant name with its format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named<T> {
    pub name: String,
    pub value: T,
}

impl Format {
    /// Whether this format, or one nested in it, is encoded with a length prefix (a string,
    /// byte buffer, sequence or map). Named containers are not followed: check each of the
    /// schema's containers too.
    pub fn holds_length_prefix(&self) -> bool {
        match self {
            Format::Str | Format::Bytes | Format::Seq(_) | Format::Map { .. } => true,
            Format::Option(inner) => inner.holds_length_prefix(),
            Format::TupleArray { content, .. } => content.holds_length_prefix(),
            Format::Tuple(items) => items.iter().any(Format::holds_length_prefix),
            Format::TypeName(_)
            | Format::Unit
            | Format::Bool
            | Format::I8
            | Format::I16
            | Format::I32
            | Format::I64
            | Format::I128
            | Format::U8
            | Format::U16
            | Format::U32
            | Format::U64
            | Format::U128
            | Format::F32
            | Format::F64
            | Format::Char => false,
        }
    }
}

impl ContainerFormat {
    /// Whether a field or variant of this container holds a length prefix
    /// ([`Format::holds_length_prefix`]).
    pub fn holds_length_prefix(&self) -> bool {
        let any_field =
            |fields: &[Named<Format>]| fields.iter().any(|f| f.value.holds_length_prefix());
        match self {
            ContainerFormat::UnitStruct => false,
            ContainerFormat::NewTypeStruct(inner) => inner.holds_length_prefix(),
            ContainerFormat::TupleStruct(items) => items.iter().any(Format::holds_length_prefix),
            ContainerFormat::Struct(fields) => any_field(fields),
            ContainerFormat::Enum(variants) => variants.values().any(|v| match &v.value {
                VariantFormat::Unit => false,
                VariantFormat::NewType(inner) => inner.holds_length_prefix(),
                VariantFormat::Tuple(items) => items.iter().any(Format::holds_length_prefix),
                VariantFormat::Struct(fields) => any_field(fields),
            }),
        }
    }
}
