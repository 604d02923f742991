//! JSON to bincode value bytes, driven by the schema: the reverse of `json.rs`, for tools
//! that write a slot without the Rust type (`bus-inspect put`).
//!
//! A JSON value that does not fit gives an error naming the path and what was expected.

use serde_json::{Map, Value};

use super::json::{found, key_value, prim_bytes, string_key, Seg, Walk};
use super::pod::Prim;
use super::{format_name, ContainerFormat, Format, Named, Schema, SchemaError, VariantFormat};

pub(super) fn encode_bincode(schema: &Schema, json: &Value) -> Result<Vec<u8>, SchemaError> {
    let mut enc = Encoder {
        walk: Walk::new(schema, usize::MAX, true),
        out: Vec::new(),
    };
    enc.value(&schema.root, json, 0)?;
    Ok(enc.out)
}

/// What a JSON value for `format` should look like, for error messages.
pub(super) fn expected(format: &Format, schema: &Schema) -> String {
    let name = format_name(format);
    match format {
        Format::Char => "char (a one-character string)".to_string(),
        Format::Str => "str (a string)".to_string(),
        Format::Seq(_) | Format::Bytes => format!("{name} (an array)"),
        // An object only where keys print as strings (`string_key`): float keys, say, do not.
        Format::Map { key, .. } if super::json::string_key(key, &schema.containers, 0) => {
            format!("{name} (an object or an array of [key, value] pairs)")
        }
        Format::Map { .. } => format!("{name} (an array of [key, value] pairs)"),
        Format::Tuple(items) => format!("{name} (an array of {})", items.len()),
        Format::TupleArray { size, .. } => format!("{name} (an array of {size})"),
        Format::TypeName(_) => match schema.containers.get(&name) {
            Some(ContainerFormat::Struct(_)) => format!("struct {name} (an object)"),
            Some(ContainerFormat::TupleStruct(items)) => {
                format!("{name} (an array of {})", items.len())
            }
            Some(ContainerFormat::UnitStruct) => format!("{name} (null)"),
            Some(ContainerFormat::Enum(_)) => {
                format!("enum {name} (a variant name or an object with one variant)")
            }
            _ => name,
        },
        _ => name,
    }
}

struct Encoder<'a> {
    walk: Walk<'a>,
    out: Vec<u8>,
}

impl<'a> Encoder<'a> {
    fn mismatch(&self, format: &Format, json: &Value) -> SchemaError {
        self.walk.err(format!(
            "expected {}, found {}",
            expected(format, self.walk.schema()),
            found(json)
        ))
    }

    fn len(&mut self, len: usize) {
        self.out.extend_from_slice(&(len as u64).to_le_bytes());
    }

    fn items(
        &mut self,
        items: impl ExactSizeIterator<Item = &'a Format>,
        json: &Value,
        whole: &Format,
        depth: usize,
    ) -> Result<(), SchemaError> {
        match json {
            Value::Array(values) if values.len() == items.len() => {
                for (index, (item, value)) in items.zip(values).enumerate() {
                    self.walk.path.push(Seg::Index(index));
                    self.value(item, value, depth + 1)?;
                    self.walk.path.pop();
                }
                Ok(())
            }
            _ => Err(self.mismatch(whole, json)),
        }
    }

    fn fields(
        &mut self,
        fields: &'a [Named<Format>],
        json: &Value,
        whole: &Format,
        depth: usize,
    ) -> Result<(), SchemaError> {
        let Value::Object(object) = json else {
            return Err(self.mismatch(whole, json));
        };
        check_fields(&self.walk, fields, object)?;
        for field in fields {
            self.walk.path.push(Seg::Field(&field.name));
            match (object.get(&field.name), &field.value) {
                (Some(value), format) => self.value(format, value, depth + 1)?,
                // serde_json reads a missing Option field as None; accept the same.
                (None, Format::Option(_)) => self.out.push(0),
                (None, _) => {
                    self.walk.path.pop();
                    return Err(self.walk.err(format!("missing field `{}`", field.name)));
                }
            }
            self.walk.path.pop();
        }
        Ok(())
    }

    fn value(&mut self, format: &'a Format, json: &Value, depth: usize) -> Result<(), SchemaError> {
        self.walk.enter(depth)?;
        if let Some(prim) = Prim::of(format) {
            let bytes = prim_bytes(prim, json).map_err(|reason| self.walk.err(reason))?;
            self.out.extend_from_slice(&bytes[..prim.size()]);
            return Ok(());
        }
        match (format, json) {
            (Format::Unit, Value::Null) => {}
            (Format::Bool, Value::Bool(b)) => self.out.push(u8::from(*b)),
            (Format::Char, Value::String(text)) if text.chars().count() == 1 => {
                self.out.extend_from_slice(text.as_bytes());
            }
            (Format::Str, Value::String(text)) => {
                self.len(text.len());
                self.out.extend_from_slice(text.as_bytes());
            }
            (Format::Bytes, Value::Array(items)) => {
                self.len(items.len());
                for (index, item) in items.iter().enumerate() {
                    self.walk.path.push(Seg::Index(index));
                    let byte = prim_bytes(Prim::U8, item).map_err(|r| self.walk.err(r))?;
                    self.out.push(byte[0]);
                    self.walk.path.pop();
                }
            }
            (Format::Option(_), Value::Null) => self.out.push(0),
            (Format::Option(inner), _) => {
                self.out.push(1);
                self.value(inner, json, depth + 1)?;
            }
            (Format::Seq(inner), Value::Array(items)) => {
                self.len(items.len());
                let inner = std::iter::repeat_n(&**inner, items.len());
                self.items(inner, json, format, depth)?;
            }
            (Format::Map { key, value }, Value::Object(object))
                if string_key(key, self.walk.registry(), 0) =>
            {
                self.len(object.len());
                let mut keys = std::collections::HashSet::new();
                for (name, item) in object {
                    self.walk.path.push(Seg::Key(name.clone()));
                    let key_json = key_value(key, name, self.walk.registry(), 0);
                    self.map_key(key, &key_json, depth, &mut keys)?;
                    self.value(value, item, depth + 1)?;
                    self.walk.path.pop();
                }
            }
            (Format::Map { key, value }, Value::Array(pairs)) => {
                self.len(pairs.len());
                let mut keys = std::collections::HashSet::new();
                for (index, pair) in pairs.iter().enumerate() {
                    self.walk.path.push(Seg::Index(index));
                    match pair.as_array().map(Vec::as_slice) {
                        Some([k, v]) => {
                            self.map_key(key, k, depth, &mut keys)?;
                            self.value(value, v, depth + 1)?;
                        }
                        _ => {
                            return Err(self.walk.err(format!(
                                "expected a [key, value] pair, found {}",
                                found(pair)
                            )))
                        }
                    }
                    self.walk.path.pop();
                }
            }
            (Format::Tuple(items), _) => self.items(items.iter(), json, format, depth)?,
            (Format::TupleArray { content, size }, _) => {
                self.items(std::iter::repeat_n(&**content, *size), json, format, depth)?
            }
            (Format::TypeName(name), _) => self.container(name, format, json, depth)?,
            _ => return Err(self.mismatch(format, json)),
        }
        Ok(())
    }

    /// Encodes one map key, refusing a key equal to an earlier one once parsed (`"1"` and
    /// `"01"` for an integer key): the decoded map would keep one of them, and the value of
    /// the other would be lost without a word.
    fn map_key(
        &mut self,
        key: &'a Format,
        json: &Value,
        depth: usize,
        seen: &mut std::collections::HashSet<Vec<u8>>,
    ) -> Result<(), SchemaError> {
        let start = self.out.len();
        self.value(key, json, depth + 1)?;
        if !seen.insert(self.out[start..].to_vec()) {
            return Err(self.walk.err(format!(
                "the key {} repeats an earlier key of this map (the same value once read)",
                json
            )));
        }
        Ok(())
    }

    fn container(
        &mut self,
        name: &str,
        format: &'a Format,
        json: &Value,
        depth: usize,
    ) -> Result<(), SchemaError> {
        match (self.walk.container(name)?, json) {
            (ContainerFormat::UnitStruct, Value::Null) => Ok(()),
            (ContainerFormat::NewTypeStruct(inner), _) => self.value(inner, json, depth + 1),
            (ContainerFormat::TupleStruct(items), _) => {
                self.items(items.iter(), json, format, depth)
            }
            (ContainerFormat::Struct(fields), _) => self.fields(fields, json, format, depth),
            (ContainerFormat::Enum(variants), Value::String(variant_name)) => {
                let Some((index, variant)) = variants.iter().find(|(_, v)| &v.name == variant_name)
                else {
                    return Err(unknown_variant(&self.walk, name, variants, variant_name));
                };
                if !matches!(variant.value, VariantFormat::Unit) {
                    return Err(self.walk.err(format!(
                        "variant `{variant_name}` of enum {name} needs a value: \
                         {{\"{variant_name}\": ...}}"
                    )));
                }
                self.out.extend_from_slice(&index.to_le_bytes());
                Ok(())
            }
            (ContainerFormat::Enum(variants), Value::Object(object)) if object.len() == 1 => {
                let Some((variant_name, inner)) = object.iter().next() else {
                    return Err(self.mismatch(format, json));
                };
                let Some((index, variant)) = variants.iter().find(|(_, v)| &v.name == variant_name)
                else {
                    return Err(unknown_variant(&self.walk, name, variants, variant_name));
                };
                self.out.extend_from_slice(&index.to_le_bytes());
                self.walk.path.push(Seg::Field(&variant.name));
                match (&variant.value, inner) {
                    (VariantFormat::Unit, Value::Null) => {}
                    (VariantFormat::NewType(inner_format), _) => {
                        self.value(inner_format, inner, depth + 1)?
                    }
                    (VariantFormat::Tuple(items), Value::Array(values))
                        if values.len() == items.len() =>
                    {
                        self.items(items.iter(), inner, format, depth)?
                    }
                    (VariantFormat::Struct(fields), Value::Object(_)) => {
                        self.fields(fields, inner, format, depth)?
                    }
                    (shape, _) => {
                        let wanted = match shape {
                            VariantFormat::Unit => "null".to_string(),
                            VariantFormat::Tuple(items) => format!("an array of {}", items.len()),
                            _ => "an object".to_string(),
                        };
                        return Err(self.walk.err(format!(
                            "expected {wanted} for variant `{variant_name}`, found {}",
                            found(inner)
                        )));
                    }
                }
                self.walk.path.pop();
                Ok(())
            }
            _ => Err(self.mismatch(format, json)),
        }
    }
}

fn unknown_variant(
    walk: &Walk<'_>,
    enum_name: &str,
    variants: &std::collections::BTreeMap<u32, Named<VariantFormat>>,
    found_name: &str,
) -> SchemaError {
    let names: Vec<&str> = variants.values().map(|v| v.name.as_str()).collect();
    walk.err(format!(
        "expected a variant of enum {enum_name} ({}), found `{found_name}`",
        names.join(", ")
    ))
}

/// Unknown keys are refused: for a hand-written value a stray key is usually a typo.
pub(super) fn check_fields(
    walk: &Walk<'_>,
    fields: &[Named<Format>],
    object: &Map<String, Value>,
) -> Result<(), SchemaError> {
    for key in object.keys() {
        if !fields.iter().any(|field| &field.name == key) {
            let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
            return Err(walk.err(format!(
                "unknown field `{key}`, expected one of: {}",
                names.join(", ")
            )));
        }
    }
    Ok(())
}
