//! The serde `Deserializer` that builds sample values for the tracer in `trace.rs` and
//! records the format of every position it is asked to deserialize.

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use super::trace::{unsupported, Result, TraceError, Tracer, MAX_SAMPLE_DEPTH};
use super::{ContainerFormat, Format, Named, VariantFormat};

/// Deserializes a sample value while recording its format in `out`. In `cut` mode only a
/// value is built (the format is known from the enclosing occurrence).
pub(super) struct Tracing<'t> {
    t: &'t mut Tracer,
    out: &'t mut Format,
    cut: bool,
    depth: usize,
}

impl<'t> Tracing<'t> {
    pub(super) fn new(t: &'t mut Tracer, out: &'t mut Format) -> Self {
        Tracing {
            t,
            out,
            cut: false,
            depth: 0,
        }
    }

    fn check_depth(&self) -> Result<()> {
        if self.depth >= MAX_SAMPLE_DEPTH {
            return Err(TraceError(format!(
                "sample values nest deeper than {MAX_SAMPLE_DEPTH} levels; a recursive \
                 type needs a way out (an Option, a sequence, or an enum variant that does \
                 not contain the type)"
            )));
        }
        Ok(())
    }

    fn child<'c>(&'c mut self, out: &'c mut Format, cut: bool) -> Result<Tracing<'c>> {
        self.check_depth()?;
        Ok(Tracing {
            t: &mut *self.t,
            out,
            cut: self.cut || cut,
            depth: self.depth + 1,
        })
    }

    fn seq(&mut self, count: usize, cut: bool) -> Result<Seq<'_>> {
        self.check_depth()?;
        Ok(Seq {
            t: &mut *self.t,
            cut: self.cut || cut,
            depth: self.depth + 1,
            remaining: count,
            runs: Vec::new(),
        })
    }

    /// Enters a container: records a reference to it in `out` and returns its registry
    /// name, and whether to only build a value (already being explored further up, or
    /// inside such a cut value).
    fn enter(&mut self, serde_name: &str, type_name: &str) -> (String, bool) {
        let name = self.t.name(serde_name, type_name);
        *self.out = Format::TypeName(name.clone());
        let recursive = self.t.stack.contains(&name);
        (name, self.cut || recursive)
    }
}

/// Elements of a sequence, tuple, struct or map; records each element's format.
struct Seq<'t> {
    t: &'t mut Tracer,
    cut: bool,
    depth: usize,
    remaining: usize,
    /// Element formats as runs of equal ones, so a `[u8; 1 << 20]` stays small.
    runs: Vec<(Format, usize)>,
}

impl Seq<'_> {
    fn formats(self) -> Vec<Format> {
        let mut formats = Vec::new();
        for (format, count) in self.runs {
            formats.extend(std::iter::repeat_n(format, count));
        }
        formats
    }
}

impl<'de> de::SeqAccess<'de> for Seq<'_> {
    type Error = TraceError;

    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        self.remaining -= 1;
        let mut format = Format::Unit;
        let value = seed.deserialize(Tracing {
            t: &mut *self.t,
            out: &mut format,
            cut: self.cut,
            depth: self.depth,
        })?;
        match self.runs.last_mut() {
            Some((last, count)) if *last == format => *count += 1,
            _ => self.runs.push((format, 1)),
        }
        Ok(Some(value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.remaining)
    }
}

impl<'de> de::MapAccess<'de> for Seq<'_> {
    type Error = TraceError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        de::SeqAccess::next_element_seed(self, seed)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        self.remaining += 1;
        de::SeqAccess::next_element_seed(self, seed)?
            .ok_or_else(|| TraceError("map value missing".to_string()))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.remaining)
    }
}

/// serde-reflection's normal form: a tuple of two or more equal formats is an array.
fn tuple_format(seq: Seq<'_>) -> Format {
    match seq.runs.as_slice() {
        [(format, size)] if *size > 1 => Format::TupleArray {
            content: Box::new(format.clone()),
            size: *size,
        },
        _ => Format::Tuple(seq.formats()),
    }
}

fn unread(what: &str) -> TraceError {
    TraceError(format!("the type's Deserialize never read the {what}"))
}

macro_rules! primitive {
    ($($method:ident $visit:ident $format:ident $value:expr;)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            *self.out = Format::$format;
            visitor.$visit($value)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Tracing<'_> {
    type Error = TraceError;

    primitive! {
        deserialize_bool visit_bool Bool false;
        deserialize_i8 visit_i8 I8 0;
        deserialize_i16 visit_i16 I16 0;
        deserialize_i32 visit_i32 I32 0;
        deserialize_i64 visit_i64 I64 0;
        deserialize_i128 visit_i128 I128 0;
        deserialize_u8 visit_u8 U8 0;
        deserialize_u16 visit_u16 U16 0;
        deserialize_u32 visit_u32 U32 0;
        deserialize_u64 visit_u64 U64 0;
        deserialize_u128 visit_u128 U128 0;
        deserialize_f32 visit_f32 F32 0.0;
        deserialize_f64 visit_f64 F64 0.0;
        deserialize_char visit_char Char 'A';
        deserialize_str visit_str Str "";
        deserialize_string visit_string Str String::new();
        deserialize_bytes visit_bytes Bytes &[];
        deserialize_byte_buf visit_byte_buf Bytes Vec::new();
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        *self.out = Format::Unit;
        visitor.visit_unit()
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(unsupported("deserialize_any"))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(unsupported("deserialize_ignored_any"))
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(unsupported("deserialize_identifier"))
    }

    fn deserialize_option<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value> {
        if self.cut {
            return visitor.visit_none();
        }
        let mut inner = Format::Unit;
        let value = visitor.visit_some(self.child(&mut inner, false)?)?;
        *self.out = Format::Option(Box::new(inner));
        Ok(value)
    }

    fn deserialize_seq<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value> {
        let cut = self.cut;
        let mut seq = self.seq(usize::from(!cut), false)?;
        let value = visitor.visit_seq(&mut seq)?;
        let mut formats = seq.formats();
        if !cut {
            let item = formats.pop().ok_or_else(|| unread("sequence element"))?;
            *self.out = Format::Seq(Box::new(item));
        }
        Ok(value)
    }

    fn deserialize_map<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value> {
        let cut = self.cut;
        let mut map = self.seq(usize::from(!cut), false)?;
        let value = visitor.visit_map(&mut map)?;
        let mut formats = map.formats().into_iter();
        if !cut {
            let (Some(key), Some(item)) = (formats.next(), formats.next()) else {
                return Err(unread("map entry"));
            };
            *self.out = Format::Map {
                key: Box::new(key),
                value: Box::new(item),
            };
        }
        Ok(value)
    }

    fn deserialize_tuple<V: Visitor<'de>>(mut self, len: usize, visitor: V) -> Result<V::Value> {
        let mut seq = self.seq(len, false)?;
        let value = visitor.visit_seq(&mut seq)?;
        *self.out = tuple_format(seq);
        Ok(value)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        mut self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        let (name, _) = self.enter(name, std::any::type_name::<V::Value>());
        self.t.record(&name, ContainerFormat::UnitStruct)?;
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        mut self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        let (name, cut) = self.enter(name, std::any::type_name::<V::Value>());
        let mut inner = Format::Unit;
        self.t.stack.push(name.clone());
        let value = visitor.visit_newtype_struct(self.child(&mut inner, cut)?);
        self.t.stack.pop();
        let value = value?;
        if !cut {
            self.t
                .record(&name, ContainerFormat::NewTypeStruct(Box::new(inner)))?;
        }
        Ok(value)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        mut self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value> {
        let (name, cut) = self.enter(name, std::any::type_name::<V::Value>());
        self.t.stack.push(name.clone());
        let mut seq = self.seq(len, cut)?;
        let value = visitor.visit_seq(&mut seq);
        let formats = seq.formats();
        self.t.stack.pop();
        let value = value?;
        if !cut {
            self.t
                .record(&name, ContainerFormat::TupleStruct(formats))?;
        }
        Ok(value)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        mut self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        let (name, cut) = self.enter(name, std::any::type_name::<V::Value>());
        self.t.stack.push(name.clone());
        let mut seq = self.seq(fields.len(), cut)?;
        let value = visitor.visit_seq(&mut seq);
        let formats = seq.formats();
        self.t.stack.pop();
        let value = value?;
        if formats.len() != fields.len() {
            // serde_derive lists a field's aliases among the names (sorted in): which name is
            // which field cannot be told, and a schema that paired them in order would be
            // wrong.
            return Err(TraceError(format!(
                "struct `{name}` declares {} field names for its {} fields: a field with \
                 #[serde(alias)] cannot be described on the bus; drop the alias",
                fields.len(),
                formats.len()
            )));
        }
        if !cut {
            let named = fields
                .iter()
                .zip(formats)
                .map(|(name, value)| Named {
                    name: name.to_string(),
                    value,
                })
                .collect();
            self.t.record(&name, ContainerFormat::Struct(named))?;
        }
        Ok(value)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        mut self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        if variants.is_empty() {
            return Err(TraceError(format!("enum `{name}` has no variants")));
        }
        let (name, cut) = self.enter(name, std::any::type_name::<V::Value>());
        let state = self.t.enums.entry(name.clone()).or_default();
        state.names = variants;
        let Some(index) = self.t.pick(&name, cut) else {
            return Err(TraceError(format!(
                "every variant of enum `{name}` contains `{name}` again, so it has no \
                 finite value"
            )));
        };
        if let Some(state) = self.t.enums.get_mut(&name) {
            state.in_flight.insert(index);
        }
        self.t.stack.push(name.clone());
        let mut format = VariantFormat::Unit;
        let mut scratch = Format::Unit;
        let access = Enum {
            tracing: self.child(&mut scratch, cut)?,
            index,
            format: &mut format,
        };
        let value = visitor.visit_enum(access);
        self.t.stack.pop();
        if let Some(state) = self.t.enums.get_mut(&name) {
            state.in_flight.remove(&index);
        }
        let value = value?;
        if !cut {
            let Some(state) = self.t.enums.get_mut(&name) else {
                return Ok(value);
            };
            match state.variants.get(&index) {
                Some(known) if *known != format => {
                    return Err(TraceError(format!(
                        "variant {index} of `{name}` gave two different formats"
                    )))
                }
                Some(_) => {}
                None => {
                    state.variants.insert(index, format);
                }
            }
        }
        Ok(value)
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

/// Selects variant `index` and records the variant's format.
struct Enum<'t, 'f> {
    tracing: Tracing<'t>,
    index: u32,
    format: &'f mut VariantFormat,
}

impl<'de, 't, 'f> de::EnumAccess<'de> for Enum<'t, 'f> {
    type Error = TraceError;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self)> {
        let index: de::value::U32Deserializer<TraceError> = self.index.into_deserializer();
        Ok((seed.deserialize(index)?, self))
    }
}

impl<'de> de::VariantAccess<'de> for Enum<'_, '_> {
    type Error = TraceError;

    fn unit_variant(self) -> Result<()> {
        *self.format = VariantFormat::Unit;
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(mut self, seed: S) -> Result<S::Value> {
        let mut inner = Format::Unit;
        let value = seed.deserialize(self.tracing.child(&mut inner, false)?)?;
        *self.format = VariantFormat::NewType(Box::new(inner));
        Ok(value)
    }

    fn tuple_variant<V: Visitor<'de>>(mut self, len: usize, visitor: V) -> Result<V::Value> {
        let mut seq = self.tracing.seq(len, false)?;
        let value = visitor.visit_seq(&mut seq)?;
        *self.format = VariantFormat::Tuple(seq.formats());
        Ok(value)
    }

    fn struct_variant<V: Visitor<'de>>(
        mut self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        let enum_name = self.tracing.t.stack.last().cloned().unwrap_or_default();
        let index = self.index;
        let mut seq = self.tracing.seq(fields.len(), false)?;
        let value = visitor.visit_seq(&mut seq)?;
        let formats = seq.formats();
        if formats.len() != fields.len() {
            // As in `deserialize_struct`: an alias is among the names.
            return Err(TraceError(format!(
                "variant {index} of enum `{enum_name}` declares {} field names for its {} \
                 fields: a field with #[serde(alias)] cannot be described on the bus; drop the \
                 alias",
                fields.len(),
                formats.len()
            )));
        }
        let named = fields
            .iter()
            .zip(formats)
            .map(|(name, value)| Named {
                name: name.to_string(),
                value,
            })
            .collect();
        *self.format = VariantFormat::Struct(named);
        Ok(value)
    }
}
