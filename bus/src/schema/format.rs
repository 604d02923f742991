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
