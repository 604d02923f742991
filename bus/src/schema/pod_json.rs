//! Pod value bytes to JSON and back, reading and writing each field at its C offset in
//! native byte order; padding is written as zeros.

use serde_json::{Map, Value};

use super::encode::{check_fields, expected};
use super::json::{found, prim_bytes, prim_json, to_native, Seg, Walk};
use super::pod::{align_up, Layout, Prim};
use super::{ContainerFormat, Format, Schema, SchemaError};

/// The fields of a struct-like format with their offsets, or `None` for arrays/primitives.
enum Shape<'a> {
    Prim(Prim),
    Array {
        item: &'a Format,
        count: usize,
        stride: usize,
    },
    Fields {
        names: Option<Vec<&'a str>>,
        fields: Vec<(&'a Format, usize)>,
    },
    Transparent(&'a Format),
    Unit,
}

fn shape<'a>(
    walk: &Walk<'a>,
    layout: &Layout,
    format: &'a Format,
) -> Result<Shape<'a>, SchemaError> {
    let bad = || walk.err("the schema's pod layout does not cover this field".to_string());
    if let Some(prim) = Prim::of(format) {
        return Ok(Shape::Prim(prim));
    }
    let place = |formats: Vec<&'a Format>| -> Result<Vec<(&'a Format, usize)>, SchemaError> {
        let mut offset = 0usize;
        let mut placed = Vec::with_capacity(formats.len());
        for format in formats {
            let (size, align) = layout.of(format).ok_or_else(bad)?;
            let start = align_up(offset, align).ok_or_else(bad)?;
            placed.push((format, start));
            offset = start.checked_add(size).ok_or_else(bad)?;
        }
        Ok(placed)
    };
    let array = |item: &'a Format, count: usize| {
        let (stride, _) = layout.of(item).ok_or_else(bad)?;
        Ok(Shape::Array {
            item,
            count,
            stride,
        })
    };
    match format {
        Format::TupleArray { content, size } => array(content, *size),
        Format::Tuple(items) => match items.first() {
            Some(first) => array(first, items.len()),
            None => Ok(Shape::Array {
                item: format,
                count: 0,
                stride: 0,
            }),
        },
        Format::TypeName(name) => match walk.container(name)? {
            ContainerFormat::UnitStruct => Ok(Shape::Unit),
            ContainerFormat::NewTypeStruct(inner) => Ok(Shape::Transparent(inner)),
            ContainerFormat::TupleStruct(items) => Ok(Shape::Fields {
                names: None,
                fields: place(items.iter().collect())?,
            }),
            ContainerFormat::Struct(fields) => Ok(Shape::Fields {
                names: Some(fields.iter().map(|f| f.name.as_str()).collect()),
                fields: place(fields.iter().map(|f| &f.value).collect())?,
            }),
            ContainerFormat::Enum(_) => Err(bad()),
        },
        _ => Err(bad()),
    }
}

fn seg<'a>(names: &Option<Vec<&'a str>>, index: usize) -> Seg<'a> {
    match names.as_ref().and_then(|names| names.get(index)) {
        Some(name) => Seg::Field(name),
        None => Seg::Index(index),
    }
}

pub(super) fn decode_pod(
    schema: &Schema,
    layout: &Layout,
    bytes: &[u8],
) -> Result<Value, SchemaError> {
    let mut walk = Walk::new(schema, bytes.len(), false);
    if bytes.len() != layout.size {
        return Err(walk.err(format!(
            "expected {} bytes of pod value, found {}",
            layout.size,
            bytes.len()
        )));
    }
    decode(&mut walk, layout, &schema.root, bytes, 0, 0)
}

fn decode<'a>(
    walk: &mut Walk<'a>,
    layout: &Layout,
    format: &'a Format,
    bytes: &[u8],
    offset: usize,
    depth: usize,
) -> Result<Value, SchemaError> {
    walk.enter(depth)?;
    let at = |walk: &Walk<'a>, offset: usize, step: usize| {
        offset
            .checked_add(step)
            .ok_or_else(|| walk.err("field offset overflows".to_string()))
    };
    Ok(match shape(walk, layout, format)? {
        Shape::Prim(prim) => {
            let mut buf = [0u8; 16];
            let field = offset
                .checked_add(prim.size())
                .and_then(|end| bytes.get(offset..end))
                .ok_or_else(|| walk.err(format!("offset {offset} lies outside the value")))?;
            buf[..prim.size()].copy_from_slice(field);
            to_native(&mut buf[..prim.size()]);
            prim_json(prim, &buf[..prim.size()])
        }
        Shape::Array {
            item,
            count,
            stride,
        } => {
            let mut items = Vec::with_capacity(count.min(bytes.len() + 1));
            for index in 0..count {
                let start = at(walk, offset, stride.saturating_mul(index))?;
                walk.path.push(Seg::Index(index));
                items.push(decode(walk, layout, item, bytes, start, depth + 1)?);
                walk.path.pop();
            }
            Value::Array(items)
        }
        Shape::Fields { names, fields } => {
            let mut array = Vec::new();
            let mut object = Map::new();
            for (index, (field, field_offset)) in fields.into_iter().enumerate() {
                let start = at(walk, offset, field_offset)?;
                walk.path.push(seg(&names, index));
                let value = decode(walk, layout, field, bytes, start, depth + 1)?;
                walk.path.pop();
                match names.as_ref().and_then(|names| names.get(index)) {
                    Some(name) => {
                        object.insert(name.to_string(), value);
                    }
                    None => array.push(value),
                }
            }
            if names.is_some() {
                Value::Object(object)
            } else {
                Value::Array(array)
            }
        }
        Shape::Transparent(inner) => decode(walk, layout, inner, bytes, offset, depth + 1)?,
        Shape::Unit => Value::Null,
    })
}

pub(super) fn encode_pod(
    schema: &Schema,
    layout: &Layout,
    json: &Value,
) -> Result<Vec<u8>, SchemaError> {
    let mut walk = Walk::new(schema, usize::MAX, true);
    let mut out = vec![0u8; layout.size];
    encode(&mut walk, layout, &schema.root, json, &mut out, 0, 0)?;
    Ok(out)
}

fn encode<'a>(
    walk: &mut Walk<'a>,
    layout: &Layout,
    format: &'a Format,
    json: &Value,
    out: &mut [u8],
    offset: usize,
    depth: usize,
) -> Result<(), SchemaError> {
    walk.enter(depth)?;
    let mismatch = |walk: &Walk<'a>| {
        walk.err(format!(
            "expected {}, found {}",
            expected(format, walk.schema()),
            found(json)
        ))
    };
    let overflow = |walk: &Walk<'a>| walk.err("field offset overflows".to_string());
    match (shape(walk, layout, format)?, json) {
        (Shape::Prim(prim), _) => {
            let mut bytes = prim_bytes(prim, json).map_err(|reason| walk.err(reason))?;
            to_native(&mut bytes[..prim.size()]);
            let field = offset
                .checked_add(prim.size())
                .and_then(|end| out.get_mut(offset..end))
                .ok_or_else(|| walk.err(format!("offset {offset} lies outside the value")))?;
            field.copy_from_slice(&bytes[..prim.size()]);
        }
        (
            Shape::Array {
                item,
                count,
                stride,
            },
            Value::Array(items),
        ) if items.len() == count => {
            for (index, value) in items.iter().enumerate() {
                let start = stride
                    .checked_mul(index)
                    .and_then(|step| offset.checked_add(step))
                    .ok_or_else(|| overflow(walk))?;
                walk.path.push(Seg::Index(index));
                encode(walk, layout, item, value, out, start, depth + 1)?;
                walk.path.pop();
            }
        }
        (
            Shape::Fields {
                names: None,
                fields,
            },
            Value::Array(items),
        ) if items.len() == fields.len() => {
            for (index, ((field, field_offset), value)) in fields.into_iter().zip(items).enumerate()
            {
                let start = offset
                    .checked_add(field_offset)
                    .ok_or_else(|| overflow(walk))?;
                walk.path.push(Seg::Index(index));
                encode(walk, layout, field, value, out, start, depth + 1)?;
                walk.path.pop();
            }
        }
        (
            Shape::Fields {
                names: Some(names),
                fields,
            },
            Value::Object(object),
        ) => {
            if let Format::TypeName(name) = format {
                if let ContainerFormat::Struct(declared) = walk.container(name)? {
                    check_fields(walk, declared, object)?;
                }
            }
            for (name, (field, field_offset)) in names.into_iter().zip(fields) {
                let value = object
                    .get(name)
                    .ok_or_else(|| walk.err(format!("missing field `{name}`")))?;
                let start = offset
                    .checked_add(field_offset)
                    .ok_or_else(|| overflow(walk))?;
                walk.path.push(Seg::Field(name));
                encode(walk, layout, field, value, out, start, depth + 1)?;
                walk.path.pop();
            }
        }
        (Shape::Transparent(inner), _) => {
            encode(walk, layout, inner, json, out, offset, depth + 1)?
        }
        (Shape::Unit, Value::Null) => {}
        _ => return Err(mismatch(walk)),
    }
    Ok(())
}
