//! Schema bytes as stored next to a slot, the canonical form the hash is taken over, and
//! the structural checks every schema passes before use.
//!
//! The layout is hand-written rather than serde-derived because the bytes come from shared
//! memory that may be corrupt or hostile: every length and count is checked against the
//! bytes left, nesting is bounded, and nothing is allocated from an unchecked size.

use std::collections::{BTreeMap, BTreeSet};

use super::MAX_DEPTH;
use super::{ContainerFormat, Encoding, Format, Named, Schema, SchemaError, VariantFormat};

/// Start of the stored form; the trailing digit is the layout version.
const MAGIC: &[u8; 4] = b"BSC1";
/// Far above any real schema; bounds the work a hostile segment can cause.
pub(super) const MAX_SCHEMA_BYTES: usize = 1 << 20;
/// Items a decoded list reserves room for before they parse (see `Reader::count`).
const PREALLOCATE_AT_MOST: usize = 16;

/// What [`from_bytes`] recovers, before the structural checks.
pub(super) struct Parts {
    pub type_name: String,
    pub encoding: Encoding,
    pub pod_size: Option<usize>,
    pub root: Format,
    pub containers: BTreeMap<String, ContainerFormat>,
}

/// FNV-1a, 64 bit: the hash of a stored schema, and a stable identifier hash for the registry.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

pub(super) fn to_bytes(schema: &Schema) -> Vec<u8> {
    let mut w = Writer::default();
    w.out.extend_from_slice(MAGIC);
    w.str(&schema.type_name);
    w.out.push(encoding_tag(schema.encoding));
    match schema.pod_size() {
        None => w.out.push(0),
        Some(size) => {
            w.out.push(1);
            w.u64(size as u64);
        }
    }
    w.format(&schema.root);
    w.u32(schema.containers.len() as u32);
    for (name, container) in &schema.containers {
        w.str(name);
        w.container(container);
    }
    w.out
}

/// Containers are numbered in order of first reference from the root, so the form (and
/// the hash) depends on the structure, field and variant names, never on container names.
pub(super) fn canonical(
    encoding: Encoding,
    root: &Format,
    containers: &BTreeMap<String, ContainerFormat>,
) -> Vec<u8> {
    let mut w = Writer {
        numbering: Some(BTreeMap::new()),
        ..Writer::default()
    };
    w.out.push(encoding_tag(encoding));
    w.format(root);
    let mut next = 0;
    while let Some(name) = w.order.get(next).cloned() {
        match containers.get(&name) {
            Some(container) => w.container(container),
            None => w.out.push(0xfe),
        }
        next += 1;
    }
    w.out
}

/// Names of the containers reachable from `root`, in order of first reference.
pub(super) fn reachable<'a>(
    root: &'a Format,
    containers: &'a BTreeMap<String, ContainerFormat>,
) -> Vec<&'a str> {
    fn collect<'a>(format: &'a Format, seen: &mut BTreeSet<&'a str>, order: &mut Vec<&'a str>) {
        if let Format::TypeName(name) = format {
            if seen.insert(name) {
                order.push(name);
            }
        }
        for_children(format, &mut |child| collect(child, seen, order));
    }
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    collect(root, &mut seen, &mut order);
    let mut next = 0;
    while let Some(name) = order.get(next).copied() {
        next += 1;
        if let Some(container) = containers.get(name) {
            container_children(container, &mut |child| {
                collect(child, &mut seen, &mut order)
            });
        }
    }
    order
}

/// Every schema passes this: every container name resolves and formats nest no deeper
/// than [`MAX_DEPTH`].
pub(super) fn check(
    root: &Format,
    containers: &BTreeMap<String, ContainerFormat>,
) -> Result<(), String> {
    check_format(root, containers, 0)?;
    for (name, container) in containers {
        let mut result = Ok(());
        container_children(container, &mut |child| {
            if result.is_ok() {
                result = check_format(child, containers, 1);
            }
        });
        result.map_err(|reason| format!("in `{name}`: {reason}"))?;
    }
    Ok(())
}

fn check_format(
    format: &Format,
    containers: &BTreeMap<String, ContainerFormat>,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("formats nest deeper than {MAX_DEPTH} levels"));
    }
    match format {
        Format::TypeName(name) if !containers.contains_key(name) => {
            return Err(format!("refers to an unknown container `{name}`"));
        }
        _ => {}
    }
    let mut result = Ok(());
    for_children(format, &mut |child| {
        if result.is_ok() {
            result = check_format(child, containers, depth + 1);
        }
    });
    result
}

pub(super) fn for_children<'a>(format: &'a Format, f: &mut dyn FnMut(&'a Format)) {
    match format {
        Format::Option(inner) | Format::Seq(inner) => f(inner),
        Format::TupleArray { content, .. } => f(content),
        Format::Map { key, value } => {
            f(key);
            f(value);
        }
        Format::Tuple(items) => items.iter().for_each(f),
        _ => {}
    }
}

pub(super) fn container_children<'a>(
    container: &'a ContainerFormat,
    f: &mut dyn FnMut(&'a Format),
) {
    match container {
        ContainerFormat::UnitStruct => {}
        ContainerFormat::NewTypeStruct(inner) => f(inner),
        ContainerFormat::TupleStruct(items) => items.iter().for_each(f),
        ContainerFormat::Struct(fields) => fields.iter().for_each(|field| f(&field.value)),
        ContainerFormat::Enum(variants) => {
            for variant in variants.values() {
                match &variant.value {
                    VariantFormat::NewType(inner) => f(inner),
                    VariantFormat::Tuple(items) => items.iter().for_each(&mut *f),
                    VariantFormat::Struct(fields) => {
                        fields.iter().for_each(|field| f(&field.value))
                    }
                    VariantFormat::Unit => {}
                }
            }
        }
    }
}

fn encoding_tag(encoding: Encoding) -> u8 {
    match encoding {
        Encoding::Bincode => 0,
        Encoding::Pod => 1,
    }
}

#[derive(Default)]
struct Writer {
    out: Vec<u8>,
    /// In canonical mode, container references are written as first-reference numbers.
    numbering: Option<BTreeMap<String, u32>>,
    order: Vec<String>,
}

impl Writer {
    fn u32(&mut self, value: u32) {
        self.out.extend_from_slice(&value.to_le_bytes());
    }

    fn u64(&mut self, value: u64) {
        self.out.extend_from_slice(&value.to_le_bytes());
    }

    fn str(&mut self, text: &str) {
        self.u32(text.len() as u32);
        self.out.extend_from_slice(text.as_bytes());
    }

    fn format(&mut self, format: &Format) {
        let tag = match format {
            Format::TypeName(_) => 0,
            Format::Unit => 1,
            Format::Bool => 2,
            Format::I8 => 3,
            Format::I16 => 4,
            Format::I32 => 5,
            Format::I64 => 6,
            Format::I128 => 7,
            Format::U8 => 8,
            Format::U16 => 9,
            Format::U32 => 10,
            Format::U64 => 11,
            Format::U128 => 12,
            Format::F32 => 13,
            Format::F64 => 14,
            Format::Char => 15,
            Format::Str => 16,
            Format::Bytes => 17,
            Format::Option(_) => 18,
            Format::Seq(_) => 19,
            Format::Map { .. } => 20,
            Format::Tuple(_) => 21,
            Format::TupleArray { .. } => 22,
        };
        self.out.push(tag);
        match format {
            Format::TypeName(name) => self.reference(name),
            Format::Option(inner) | Format::Seq(inner) => self.format(inner),
            Format::Map { key, value } => {
                self.format(key);
                self.format(value);
            }
            Format::Tuple(items) => self.formats(items),
            Format::TupleArray { content, size } => {
                self.format(content);
                self.u64(*size as u64);
            }
            _ => {}
        }
    }

    fn reference(&mut self, name: &str) {
        let Some(numbering) = &mut self.numbering else {
            return self.str(name);
        };
        let number = match numbering.get(name) {
            Some(&number) => number,
            None => {
                let number = self.order.len() as u32;
                numbering.insert(name.to_string(), number);
                self.order.push(name.to_string());
                number
            }
        };
        self.u32(number);
    }

    fn formats(&mut self, items: &[Format]) {
        self.u32(items.len() as u32);
        items.iter().for_each(|item| self.format(item));
    }

    fn fields(&mut self, fields: &[Named<Format>]) {
        self.u32(fields.len() as u32);
        for field in fields {
            self.str(&field.name);
            self.format(&field.value);
        }
    }

    fn container(&mut self, container: &ContainerFormat) {
        match container {
            ContainerFormat::UnitStruct => self.out.push(0),
            ContainerFormat::NewTypeStruct(inner) => {
                self.out.push(1);
                self.format(inner);
            }
            ContainerFormat::TupleStruct(items) => {
                self.out.push(2);
                self.formats(items);
            }
            ContainerFormat::Struct(fields) => {
                self.out.push(3);
                self.fields(fields);
            }
            ContainerFormat::Enum(variants) => {
                self.out.push(4);
                self.u32(variants.len() as u32);
                for (index, variant) in variants {
                    self.u32(*index);
                    self.str(&variant.name);
                    match &variant.value {
                        VariantFormat::Unit => self.out.push(0),
                        VariantFormat::NewType(inner) => {
                            self.out.push(1);
                            self.format(inner);
                        }
                        VariantFormat::Tuple(items) => {
                            self.out.push(2);
                            self.formats(items);
                        }
                        VariantFormat::Struct(fields) => {
                            self.out.push(3);
                            self.fields(fields);
                        }
                    }
                }
            }
        }
    }
}

pub(super) fn from_bytes(bytes: &[u8]) -> Result<Parts, SchemaError> {
    if bytes.len() > MAX_SCHEMA_BYTES {
        return Err(SchemaError::Corrupt {
            offset: 0,
            reason: format!(
                "expected at most {MAX_SCHEMA_BYTES} bytes, found {}",
                bytes.len()
            ),
        });
    }
    let mut r = Reader { bytes, pos: 0 };
    if r.take(MAGIC.len())? != MAGIC {
        return Err(r.corrupt(format!("expected the magic {MAGIC:?}")));
    }
    let type_name = r.str()?;
    let encoding = match r.u8()? {
        0 => Encoding::Bincode,
        1 => Encoding::Pod,
        tag => return Err(r.corrupt(format!("expected encoding tag 0 or 1, found {tag}"))),
    };
    let pod_size = match r.u8()? {
        0 => None,
        1 => Some(r.usize()?),
        tag => return Err(r.corrupt(format!("expected pod size tag 0 or 1, found {tag}"))),
    };
    let root = r.format(0)?;
    let count = r.count()?;
    let mut containers = BTreeMap::new();
    for _ in 0..count {
        let name = r.str()?;
        let container = r.container()?;
        if containers.insert(name.clone(), container).is_some() {
            return Err(r.corrupt(format!("container `{name}` is defined twice")));
        }
    }
    if r.pos != bytes.len() {
        return Err(r.corrupt(format!(
            "expected the schema to end, found {} more bytes",
            bytes.len() - r.pos
        )));
    }
    Ok(Parts {
        type_name,
        encoding,
        pod_size,
        root,
        containers,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn corrupt(&self, reason: String) -> SchemaError {
        SchemaError::Corrupt {
            offset: self.pos,
            reason,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], SchemaError> {
        let left = self.bytes.len() - self.pos;
        if n > left {
            return Err(self.corrupt(format!("expected {n} more bytes, found {left}")));
        }
        let slice = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8, SchemaError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, SchemaError> {
        let mut buf = [0; 4];
        buf.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(buf))
    }

    fn usize(&mut self) -> Result<usize, SchemaError> {
        let mut buf = [0; 8];
        buf.copy_from_slice(self.take(8)?);
        let value = u64::from_le_bytes(buf);
        usize::try_from(value).map_err(|_| self.corrupt(format!("size {value} does not fit")))
    }

    /// Each counted item takes at least one byte, so a count above the bytes left is a lie.
    /// A count is checked only against the bytes left (up to a megabyte), and a schema nests
    /// up to 64 levels: reserved in full, each level of a hostile schema would reserve 32 bytes
    /// per byte left, gigabytes in all before the depth check fails. Lists grow as their items
    /// actually parse instead.
    fn count(&mut self) -> Result<usize, SchemaError> {
        let count = self.u32()? as usize;
        let left = self.bytes.len() - self.pos;
        if count > left {
            return Err(self.corrupt(format!(
                "expected a count of at most {left} items, found {count}"
            )));
        }
        Ok(count)
    }

    fn str(&mut self) -> Result<String, SchemaError> {
        let len = self.u32()? as usize;
        let start = self.pos;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| SchemaError::Corrupt {
                offset: start,
                reason: "expected a UTF-8 name, found invalid UTF-8".to_string(),
            })
    }

    fn format(&mut self, depth: usize) -> Result<Format, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(self.corrupt(format!("formats nest deeper than {MAX_DEPTH} levels")));
        }
        let inner = |r: &mut Self| r.format(depth + 1).map(Box::new);
        Ok(match self.u8()? {
            0 => Format::TypeName(self.str()?),
            1 => Format::Unit,
            2 => Format::Bool,
            3 => Format::I8,
            4 => Format::I16,
            5 => Format::I32,
            6 => Format::I64,
            7 => Format::I128,
            8 => Format::U8,
            9 => Format::U16,
            10 => Format::U32,
            11 => Format::U64,
            12 => Format::U128,
            13 => Format::F32,
            14 => Format::F64,
            15 => Format::Char,
            16 => Format::Str,
            17 => Format::Bytes,
            18 => Format::Option(inner(self)?),
            19 => Format::Seq(inner(self)?),
            20 => Format::Map {
                key: inner(self)?,
                value: inner(self)?,
            },
            21 => Format::Tuple(self.formats(depth + 1)?),
            22 => Format::TupleArray {
                content: inner(self)?,
                size: self.usize()?,
            },
            tag => return Err(self.corrupt(format!("expected a format tag 0..=22, found {tag}"))),
        })
    }

    fn formats(&mut self, depth: usize) -> Result<Vec<Format>, SchemaError> {
        let count = self.count()?;
        let mut items = Vec::with_capacity(count.min(PREALLOCATE_AT_MOST));
        for _ in 0..count {
            items.push(self.format(depth)?);
        }
        Ok(items)
    }

    fn fields(&mut self) -> Result<Vec<Named<Format>>, SchemaError> {
        let count = self.count()?;
        let mut fields = Vec::with_capacity(count.min(PREALLOCATE_AT_MOST));
        for _ in 0..count {
            let name = self.str()?;
            let value = self.format(1)?;
            fields.push(Named { name, value });
        }
        Ok(fields)
    }

    fn container(&mut self) -> Result<ContainerFormat, SchemaError> {
        Ok(match self.u8()? {
            0 => ContainerFormat::UnitStruct,
            1 => ContainerFormat::NewTypeStruct(Box::new(self.format(1)?)),
            2 => ContainerFormat::TupleStruct(self.formats(1)?),
            3 => ContainerFormat::Struct(self.fields()?),
            4 => {
                let count = self.count()?;
                let mut variants = BTreeMap::new();
                for _ in 0..count {
                    let index = self.u32()?;
                    let name = self.str()?;
                    let value = match self.u8()? {
                        0 => VariantFormat::Unit,
                        1 => VariantFormat::NewType(Box::new(self.format(1)?)),
                        2 => VariantFormat::Tuple(self.formats(1)?),
                        3 => VariantFormat::Struct(self.fields()?),
                        tag => {
                            return Err(
                                self.corrupt(format!("expected a variant tag 0..=3, found {tag}"))
                            )
                        }
                    };
                    if variants.insert(index, Named { name, value }).is_some() {
                        return Err(self.corrupt(format!("variant index {index} repeats")));
                    }
                }
                ContainerFormat::Enum(variants)
            }
            tag => return Err(self.corrupt(format!("expected a container tag 0..=4, found {tag}"))),
        })
    }
}
