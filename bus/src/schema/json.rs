//! Schema-driven conversion between stored value bytes and JSON, without the Rust type.
//!
//! The JSON shape is serde_json's: structs are objects, enums externally tagged, Option is
//! null or the value, maps with string-like keys are objects (other keys: `[k, v]` pairs),
//! 128-bit integers outside the 64-bit range are strings, non-finite floats are null. The
//! bytes may be corrupt or hostile: nesting is bounded, every read is checked, lengths
//! are never trusted for allocation, and a node budget stops zero-sized repetition.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::pod::Prim;
use super::{format_name, ContainerFormat, Format, Named, Schema, SchemaError, VariantFormat};

/// Values nest at most this deep (recursive types such as lists can legitimately nest
/// deeper than formats do).
pub(super) const MAX_VALUE_DEPTH: usize = 128;

pub(super) type Registry = BTreeMap<String, ContainerFormat>;

/// One step of the path named in errors: `.field`, `[index]` or `["map key"]`.
pub(super) enum Seg<'a> {
    Field(&'a str),
    Index(usize),
    Key(String),
}

fn render(path: &[Seg<'_>]) -> String {
    if path.is_empty() {
        return "(root)".to_string();
    }
    let mut text = String::new();
    for seg in path {
        match seg {
            Seg::Field(name) => {
                text.push('.');
                text.push_str(name);
            }
            Seg::Index(index) => text.push_str(&format!("[{index}]")),
            Seg::Key(key) => text.push_str(&format!("[{key:?}]")),
        }
    }
    text
}

pub(super) fn found(json: &Value) -> String {
    match json {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("bool {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(_) => "string".to_string(),
        Value::Array(items) => format!("array of {}", items.len()),
        Value::Object(_) => "object".to_string(),
    }
}

/// Keys serde_json writes as object keys; anything else becomes `[k, v]` pairs.
pub(super) fn string_key(format: &Format, registry: &Registry, depth: usize) -> bool {
    match format {
        Format::Str | Format::Char | Format::Bool => true,
        f if Prim::of(f).is_some() => !matches!(f, Format::F32 | Format::F64),
        Format::TypeName(name) if depth < MAX_VALUE_DEPTH => match registry.get(name) {
            Some(ContainerFormat::NewTypeStruct(inner)) => string_key(inner, registry, depth + 1),
            Some(ContainerFormat::Enum(variants)) => variants
                .values()
                .all(|v| matches!(v.value, VariantFormat::Unit)),
            _ => false,
        },
        _ => false,
    }
}

/// The JSON value a string object key stands for, so keys encode like any value.
pub(super) fn key_value(format: &Format, key: &str, registry: &Registry, depth: usize) -> Value {
    let text = Value::String(key.to_string());
    match format {
        Format::Bool => key.parse::<bool>().map_or(text, Value::Bool),
        f if Prim::of(f).is_some() => key
            .parse::<u64>()
            .map(Value::from)
            .or_else(|_| key.parse::<i64>().map(Value::from))
            .unwrap_or(text),
        Format::TypeName(name) if depth < MAX_VALUE_DEPTH => match registry.get(name) {
            Some(ContainerFormat::NewTypeStruct(inner)) => {
                key_value(inner, key, registry, depth + 1)
            }
            _ => text,
        },
        _ => text,
    }
}

/// `bytes` is little-endian.
pub(super) fn prim_json(prim: Prim, bytes: &[u8]) -> Value {
    let mut buf = [0u8; 16];
    buf[..bytes.len().min(16)].copy_from_slice(&bytes[..bytes.len().min(16)]);
    let unsigned = u128::from_le_bytes(buf);
    let bits = prim.size() * 8;
    let signed = ((unsigned << (128 - bits)) as i128) >> (128 - bits);
    match prim {
        Prim::F32 => f32_value(f32::from_bits(unsigned as u32)),
        Prim::F64 => Value::from(f64::from_bits(unsigned as u64)),
        Prim::U8 | Prim::U16 | Prim::U32 | Prim::U64 | Prim::U128 => {
            match u64::try_from(unsigned) {
                Ok(small) => Value::from(small),
                Err(_) => Value::String(unsigned.to_string()),
            }
        }
        _ => match (u64::try_from(signed), i64::try_from(signed)) {
            (Ok(small), _) => Value::from(small),
            (_, Ok(small)) => Value::from(small),
            _ => Value::String(signed.to_string()),
        },
    }
}

/// An `f32` as serde_json writes one: its shortest decimal form (`0.1`, not the `f64` it widens
/// to, `0.10000000149011612`); not finite, `null`.
fn f32_value(x: f32) -> Value {
    // Display gives the shortest decimal that reads back as the same f32; as an f64 that
    // decimal prints the same.
    x.to_string()
        .parse::<f64>()
        .map_or(Value::Null, Value::from)
}

/// `message` for a whole number beyond 64 bits, with how a 128-bit integer takes one.
fn big_number(message: &str, prim: Prim) -> String {
    if matches!(prim, Prim::U128 | Prim::I128) {
        format!("{message}: give an integer beyond 64 bits as a string")
    } else {
        message.to_owned()
    }
}

/// Little-endian bytes of `json` as `prim`, or why it does not fit.
pub(super) fn prim_bytes(prim: Prim, json: &Value) -> Result<[u8; 16], String> {
    let name = format!("{prim:?}").to_lowercase();
    let wrong = || format!("expected {name}, found {}", found(json));
    let out_of_range = || format!("expected {name}, found {} (out of range)", found(json));
    // A whole number beyond 64 bits, which serde_json reads as a float: out of range for every
    // integer type (a 128-bit one takes such a number as a string), not a float where a whole
    // number was wanted.
    let beyond_64_bits = matches!(json, Value::Number(n)
        if n.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() >= 9.2e18)
            && !n.is_u64() && !n.is_i64());
    let bits = prim.size() * 8;
    let value: u128 = match (prim, json) {
        (Prim::F32, Value::Null) => u128::from(f32::NAN.to_bits()),
        (Prim::F64, Value::Null) => u128::from(f64::NAN.to_bits()),
        (Prim::F32, Value::Number(n)) => {
            let wide = n.as_f64().ok_or_else(wrong)?;
            let narrow = wide as f32;
            if narrow.is_infinite() && wide.is_finite() {
                return Err(out_of_range());
            }
            u128::from(narrow.to_bits())
        }
        (Prim::F64, Value::Number(n)) => u128::from(n.as_f64().ok_or_else(wrong)?.to_bits()),
        (Prim::U8 | Prim::U16 | Prim::U32 | Prim::U64 | Prim::U128, _) if beyond_64_bits => {
            return Err(big_number(&out_of_range(), prim));
        }
        (Prim::U8 | Prim::U16 | Prim::U32 | Prim::U64 | Prim::U128, _) => {
            let v = match json {
                Value::Number(n) if n.is_u64() => n.as_u64().map(u128::from),
                Value::Number(n) if n.is_i64() => return Err(out_of_range()),
                Value::String(s) if prim == Prim::U128 => s.parse::<u128>().ok(),
                _ => None,
            }
            .ok_or_else(wrong)?;
            if bits < 128 && v >> bits != 0 {
                return Err(out_of_range());
            }
            v
        }
        (_, _) if beyond_64_bits => return Err(big_number(&out_of_range(), prim)),
        (_, _) => {
            let v = match json {
                Value::Number(n) if n.is_i64() => n.as_i64().map(i128::from),
                Value::Number(n) if n.is_u64() => n.as_u64().map(i128::from),
                Value::String(s) if prim == Prim::I128 => s.parse::<i128>().ok(),
                _ => None,
            }
            .ok_or_else(wrong)?;
            if bits < 128 {
                let (min, max) = (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1);
                if v < min || v > max {
                    return Err(out_of_range());
                }
            }
            v as u128
        }
    };
    Ok(value.to_le_bytes())
}

pub(super) fn to_native(bytes: &mut [u8]) {
    if cfg!(target_endian = "big") {
        bytes.reverse();
    }
}

fn budget(len: usize) -> usize {
    len.saturating_mul(16).saturating_add(1 << 20)
}

/// Shared by the four walkers: the path, depth and node budget, and error building.
pub(super) struct Walk<'a> {
    schema: &'a Schema,
    pub(super) path: Vec<Seg<'a>>,
    budget: usize,
    encoding: bool,
}

impl<'a> Walk<'a> {
    pub(super) fn new(schema: &'a Schema, len: usize, encoding: bool) -> Self {
        Walk {
            schema,
            path: Vec::new(),
            budget: budget(len),
            encoding,
        }
    }

    pub(super) fn err(&self, reason: String) -> SchemaError {
        let (type_name, path) = (self.schema.type_name.clone(), render(&self.path));
        if self.encoding {
            SchemaError::Encode {
                type_name,
                path,
                reason,
            }
        } else {
            SchemaError::Decode {
                type_name,
                path,
                reason,
            }
        }
    }

    pub(super) fn enter(&mut self, depth: usize) -> Result<(), SchemaError> {
        if depth > MAX_VALUE_DEPTH {
            return Err(self.err(format!("values nest deeper than {MAX_VALUE_DEPTH} levels")));
        }
        if self.budget == 0 {
            return Err(self.err("the value has too many parts for its size".to_string()));
        }
        self.budget -= 1;
        Ok(())
    }

    pub(super) fn container(&self, name: &str) -> Result<&'a ContainerFormat, SchemaError> {
        self.schema
            .containers
            .get(name)
            .ok_or_else(|| self.err(format!("the schema lacks the type `{name}`")))
    }

    pub(super) fn schema(&self) -> &'a Schema {
        self.schema
    }

    pub(super) fn registry(&self) -> &'a Registry {
        &self.schema.containers
    }
}

pub(super) fn decode_bincode(schema: &Schema, bytes: &[u8]) -> Result<Value, SchemaError> {
    let mut dec = Decoder {
        walk: Walk::new(schema, bytes.len(), false),
        bytes,
        pos: 0,
    };
    let value = dec.value(&schema.root, 0)?;
    if dec.pos != bytes.len() {
        dec.walk.path.clear();
        return Err(dec.walk.err(format!(
            "expected the value to end at byte {}, found {} trailing bytes",
            dec.pos,
            bytes.len() - dec.pos
        )));
    }
    Ok(value)
}

struct Decoder<'a> {
    walk: Walk<'a>,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], SchemaError> {
        let left = self.bytes.len() - self.pos;
        if n > left {
            return Err(self.walk.err(format!(
                "expected {n} bytes for {what}, found only {left} left"
            )));
        }
        let slice = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    fn uint(&mut self, n: usize, what: &str) -> Result<u64, SchemaError> {
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(self.take(n, what)?);
        Ok(u64::from_le_bytes(buf))
    }

    fn len(&mut self, what: &str) -> Result<usize, SchemaError> {
        let len = self.uint(8, what)?;
        usize::try_from(len).map_err(|_| self.walk.err(format!("length {len} is too large")))
    }

    fn items(&mut self, items: &'a [Format], depth: usize) -> Result<Value, SchemaError> {
        let mut out = Vec::with_capacity(items.len().min(self.bytes.len() - self.pos + 1));
        for (index, item) in items.iter().enumerate() {
            self.walk.path.push(Seg::Index(index));
            out.push(self.value(item, depth + 1)?);
            self.walk.path.pop();
        }
        Ok(Value::Array(out))
    }

    fn repeat(
        &mut self,
        item: &'a Format,
        count: usize,
        depth: usize,
    ) -> Result<Value, SchemaError> {
        let mut out = Vec::with_capacity(count.min(self.bytes.len() - self.pos + 1));
        for index in 0..count {
            self.walk.path.push(Seg::Index(index));
            out.push(self.value(item, depth + 1)?);
            self.walk.path.pop();
        }
        Ok(Value::Array(out))
    }

    fn fields(&mut self, fields: &'a [Named<Format>], depth: usize) -> Result<Value, SchemaError> {
        let mut out = Map::new();
        for field in fields {
            self.walk.path.push(Seg::Field(&field.name));
            out.insert(field.name.clone(), self.value(&field.value, depth + 1)?);
            self.walk.path.pop();
        }
        Ok(Value::Object(out))
    }

    fn value(&mut self, format: &'a Format, depth: usize) -> Result<Value, SchemaError> {
        self.walk.enter(depth)?;
        if let Some(prim) = Prim::of(format) {
            return Ok(prim_json(
                prim,
                self.take(prim.size(), &format_name(format))?,
            ));
        }
        Ok(match format {
            Format::Unit => Value::Null,
            Format::Bool => match self.uint(1, "a bool")? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                other => {
                    return Err(self
                        .walk
                        .err(format!("expected bool 0 or 1, found {other}")))
                }
            },
            Format::Char => {
                let first = self.take(1, "a char")?[0];
                let width = match first {
                    0x00..=0x7f => 1,
                    0xc0..=0xdf => 2,
                    0xe0..=0xef => 3,
                    0xf0..=0xf7 => 4,
                    _ => 0,
                };
                let start = self.pos - 1;
                self.take(width.max(1) - 1, "a char")?;
                let text = std::str::from_utf8(&self.bytes[start..self.pos]).ok();
                match text.and_then(|t| t.chars().next()).filter(|_| width > 0) {
                    Some(c) => Value::String(c.to_string()),
                    None => return Err(self.walk.err("expected a UTF-8 char".to_string())),
                }
            }
            Format::Str => {
                let len = self.len("a string length")?;
                let bytes = self.take(len, "a string")?;
                match std::str::from_utf8(bytes) {
                    Ok(text) => Value::String(text.to_string()),
                    Err(_) => {
                        return Err(self.walk.err("expected UTF-8, found invalid bytes".into()))
                    }
                }
            }
            Format::Bytes => {
                let len = self.len("a byte buffer length")?;
                Value::Array(
                    self.take(len, "bytes")?
                        .iter()
                        .map(|&b| Value::from(b))
                        .collect(),
                )
            }
            Format::Option(inner) => match self.uint(1, "an option tag")? {
                0 => Value::Null,
                1 => self.value(inner, depth + 1)?,
                tag => {
                    return Err(self
                        .walk
                        .err(format!("expected option tag 0 or 1, found {tag}")))
                }
            },
            Format::Seq(inner) => {
                let len = self.len("a sequence length")?;
                self.repeat(inner, len, depth)?
            }
            Format::Map { key, value } => {
                let len = self.len("a map length")?;
                let as_object = string_key(key, self.walk.registry(), 0);
                let mut object = Map::new();
                let mut pairs = Vec::new();
                for index in 0..len {
                    self.walk.path.push(Seg::Index(index));
                    let k = self.value(key, depth + 1)?;
                    let v = self.value(value, depth + 1)?;
                    self.walk.path.pop();
                    if !as_object {
                        pairs.push(Value::Array(vec![k, v]));
                        continue;
                    }
                    let k = match k {
                        Value::String(text) => text,
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        other => return Err(self.walk.err(format!("unexpected key {other}"))),
                    };
                    object.insert(k, v);
                }
                if as_object {
                    Value::Object(object)
                } else {
                    Value::Array(pairs)
                }
            }
            Format::Tuple(items) => self.items(items, depth)?,
            Format::TupleArray { content, size } => self.repeat(content, *size, depth)?,
            Format::TypeName(name) => match self.walk.container(name)? {
                ContainerFormat::UnitStruct => Value::Null,
                ContainerFormat::NewTypeStruct(inner) => self.value(inner, depth + 1)?,
                ContainerFormat::TupleStruct(items) => self.items(items, depth)?,
                ContainerFormat::Struct(fields) => self.fields(fields, depth)?,
                ContainerFormat::Enum(variants) => {
                    let index = self.uint(4, "a variant index")? as u32;
                    let Some(variant) = variants.get(&index) else {
                        let known: Vec<String> = variants.keys().map(u32::to_string).collect();
                        return Err(self.walk.err(format!(
                            "expected a variant index of enum `{name}` ({}), found {index}",
                            known.join(", ")
                        )));
                    };
                    self.walk.path.push(Seg::Field(&variant.name));
                    let inner = match &variant.value {
                        VariantFormat::Unit => None,
                        VariantFormat::NewType(inner) => Some(self.value(inner, depth + 1)?),
                        VariantFormat::Tuple(items) => Some(self.items(items, depth)?),
                        VariantFormat::Struct(fields) => Some(self.fields(fields, depth)?),
                    };
                    self.walk.path.pop();
                    match inner {
                        None => Value::String(variant.name.clone()),
                        Some(inner) => {
                            Value::Object(Map::from_iter([(variant.name.clone(), inner)]))
                        }
                    }
                }
            },
            _ => {
                return Err(self
                    .walk
                    .err(format!("unsupported format {}", format_name(format))))
            }
        })
    }
}
