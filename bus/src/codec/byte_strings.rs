//! Strings and byte buffers decoded without zeroing their memory first.
//!
//! bincode 2.0.1 decodes a `String` or a byte buffer (`serde_bytes`) into `vec![0u8; len]` and
//! reads over it: for a 1 MiB value the zeroes are a second write of the whole megabyte (reading
//! without them took 8% off the 1 MiB round trip of `bus-bench`). [`decode`] wraps bincode's serde deserializer, at every level of nesting (the
//! wrapper hands itself to each element, field, map entry, variant and option), reads those two
//! kinds of value itself and appends their bytes to a vector only reserved
//! ([`CountingReader::append_to`]). Everything else is left to bincode. Both read the one input
//! through [`Shared`].
//!
//! A length prefix read here is checked against the bytes left in the input before anything is
//! reserved, so a hostile prefix costs no allocation at all (bincode's limit, which still bounds
//! its own allocations, does not see these reads).

use std::cell::RefCell;

use bincode::config::Config;
use bincode::de::read::Reader;
use bincode::error::DecodeError;
use serde::de::{
    DeserializeSeed, Deserializer, EnumAccess, Error as _, MapAccess, SeqAccess, VariantAccess,
    Visitor,
};

use super::CountingReader;

/// Decodes one `T` from `reader`, whose input is `len` bytes, with `config` (fixed-int little
/// endian, as [`super::config`]); returns the value's result and the bytes consumed.
pub(super) fn decode<T, R, C>(reader: R, len: usize, config: C) -> (Result<T, DecodeError>, usize)
where
    T: serde::de::DeserializeOwned,
    R: CountingReader,
    C: Config,
{
    let input = Shared(RefCell::new(reader));
    let result = {
        let mut decoder = bincode::serde::OwnedSerdeDecoder::from_reader(&input, config);
        T::deserialize(Direct {
            inner: decoder.as_deserializer(),
            input: &input,
            len,
        })
    };
    let consumed = input.0.into_inner().consumed();
    (result, consumed)
}

/// The input that bincode (as its `Reader`) and [`Direct`] (for strings and byte buffers)
/// take turns to read: bincode never holds it across a call into the deserializer.
struct Shared<R>(RefCell<R>);

impl<R: CountingReader> Reader for &Shared<R> {
    #[inline]
    fn read(&mut self, out: &mut [u8]) -> Result<(), DecodeError> {
        self.0.borrow_mut().read(out)
    }
}

/// bincode's deserializer `inner`, with strings and byte buffers read from `input` directly.
struct Direct<'s, D, R> {
    inner: D,
    input: &'s Shared<R>,
    /// Bytes in the whole input.
    len: usize,
}

/// `inner` (a visitor, a seed, an access) wrapped so that the deserializers it is handed are
/// [`Direct`] too.
struct Wrap<'s, T, R> {
    inner: T,
    input: &'s Shared<R>,
    len: usize,
}

impl<'s, D, R> Direct<'s, D, R> {
    fn wrap<T>(&self, inner: T) -> Wrap<'s, T, R> {
        Wrap {
            inner,
            input: self.input,
            len: self.len,
        }
    }
}

impl<'s, T, R> Wrap<'s, T, R> {
    fn wrap<U>(&self, inner: U) -> Wrap<'s, U, R> {
        Wrap {
            inner,
            input: self.input,
            len: self.len,
        }
    }

    fn direct<D>(&self, inner: D) -> Direct<'s, D, R> {
        Direct {
            inner,
            input: self.input,
            len: self.len,
        }
    }
}

impl<'de, D: Deserializer<'de>, R: CountingReader> Direct<'_, D, R> {
    /// The bytes of a string or byte buffer: its u64 length prefix, then that many bytes.
    fn bytes(&self) -> Result<Vec<u8>, D::Error> {
        let mut input = self.input.0.borrow_mut();
        let mut prefix = [0u8; 8];
        input
            .read(&mut prefix)
            .map_err(|e| D::Error::custom(super::explain(&e)))?;
        let claimed = u64::from_le_bytes(prefix);
        let left = self.len.saturating_sub(input.consumed());
        if claimed > left as u64 {
            return Err(D::Error::custom(format!(
                "a length prefix claims {claimed} bytes, {left} are left"
            )));
        }
        let mut bytes = Vec::new();
        input
            .append_to(claimed as usize, &mut bytes)
            .map_err(|e| D::Error::custom(super::explain(&e)))?;
        Ok(bytes)
    }

    fn string(&self) -> Result<String, D::Error> {
        String::from_utf8(self.bytes()?)
            .map_err(|_| D::Error::custom("expected UTF-8 text, found invalid UTF-8"))
    }
}

/// Deserializer methods handed to bincode with the visitor wrapped.
macro_rules! forward_wrapped {
    ($($method:ident($($arg:ident: $ty:ty),*)),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Self::Error> {
            let visitor = self.wrap(visitor);
            self.inner.$method($($arg,)* visitor)
        }
    )*};
}

impl<'de, D: Deserializer<'de>, R: CountingReader> Deserializer<'de> for Direct<'_, D, R> {
    type Error = D::Error;

    forward_wrapped! {
        deserialize_any(), deserialize_bool(), deserialize_i8(), deserialize_i16(),
        deserialize_i32(), deserialize_i64(), deserialize_i128(), deserialize_u8(),
        deserialize_u16(), deserialize_u32(), deserialize_u64(), deserialize_u128(),
        deserialize_f32(), deserialize_f64(), deserialize_char(), deserialize_option(),
        deserialize_unit(), deserialize_unit_struct(name: &'static str),
        deserialize_newtype_struct(name: &'static str), deserialize_seq(),
        deserialize_tuple(len: usize), deserialize_tuple_struct(name: &'static str, len: usize),
        deserialize_map(), deserialize_struct(name: &'static str, fields: &'static [&'static str]),
        deserialize_enum(name: &'static str, variants: &'static [&'static str]),
        deserialize_identifier(), deserialize_ignored_any(),
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_string(self.string()?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_string(self.string()?)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_byte_buf(self.bytes()?)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_byte_buf(self.bytes()?)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// Visitor methods that take a plain value, forwarded as they are.
macro_rules! forward_values {
    ($($method:ident($ty:ty)),* $(,)?) => {$(
        fn $method<E: serde::de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>, R: CountingReader> Visitor<'de> for Wrap<'_, V, R> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.inner.expecting(f)
    }

    forward_values! {
        visit_bool(bool), visit_i8(i8), visit_i16(i16), visit_i32(i32), visit_i64(i64),
        visit_i128(i128), visit_u8(u8), visit_u16(u16), visit_u32(u32), visit_u64(u64),
        visit_u128(u128), visit_f32(f32), visit_f64(f64), visit_char(char), visit_str(&str),
        visit_borrowed_str(&'de str), visit_string(String), visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]), visit_byte_buf(Vec<u8>),
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let d = self.direct(d);
        self.inner.visit_some(d)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let d = self.direct(d);
        self.inner.visit_newtype_struct(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let seq = self.wrap(seq);
        self.inner.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let map = self.wrap(map);
        self.inner.visit_map(map)
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        let data = self.wrap(data);
        self.inner.visit_enum(data)
    }
}

impl<'de, S: DeserializeSeed<'de>, R: CountingReader> DeserializeSeed<'de> for Wrap<'_, S, R> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let d = self.direct(d);
        self.inner.deserialize(d)
    }
}

impl<'de, A: SeqAccess<'de>, R: CountingReader> SeqAccess<'de> for Wrap<'_, A, R> {
    type Error = A::Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Self::Error> {
        let seed = self.wrap(seed);
        self.inner.next_element_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: MapAccess<'de>, R: CountingReader> MapAccess<'de> for Wrap<'_, A, R> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Self::Error> {
        let seed = self.wrap(seed);
        self.inner.next_key_seed(seed)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, Self::Error> {
        let seed = self.wrap(seed);
        self.inner.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'s, 'de, A: EnumAccess<'de>, R: CountingReader> EnumAccess<'de> for Wrap<'s, A, R> {
    type Error = A::Error;
    type Variant = Wrap<'s, A::Variant, R>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), Self::Error> {
        let seed = self.wrap(seed);
        let (value, variant) = self.inner.variant_seed(seed)?;
        Ok((
            value,
            Wrap {
                inner: variant,
                input: self.input,
                len: self.len,
            },
        ))
    }
}

impl<'de, A: VariantAccess<'de>, R: CountingReader> VariantAccess<'de> for Wrap<'_, A, R> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), Self::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<S::Value, Self::Error> {
        let seed = self.wrap(seed);
        self.inner.newtype_variant_seed(seed)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let visitor = self.wrap(visitor);
        self.inner.tuple_variant(len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let visitor = self.wrap(visitor);
        self.inner.struct_variant(fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    use super::super::{decode, encode_into, CodecError, DIRECT_FROM};
    use crate::schema::tests::Blob;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Shape {
        Unit,
        Named(String),
        Pair(u8, Blob),
        Fields { label: String, data: Blob },
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Label(String);

    /// Every place a string or byte buffer can sit: a field, an element, an option, a map key
    /// and value, every kind of enum variant, a tuple, a newtype.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Everything {
        flag: bool,
        text: String,
        blob: Blob,
        texts: Vec<String>,
        maybe: Option<Blob>,
        nothing: Option<String>,
        by_name: BTreeMap<String, Blob>,
        shapes: Vec<Shape>,
        pair: (String, u32),
        label: Label,
        numbers: Vec<u16>,
        letter: char,
        tail: u8,
    }

    fn everything(big: usize) -> Everything {
        let bytes =
            |n: usize, seed: usize| Blob((0..n).map(|i| ((i * 7 + seed) % 251) as u8).collect());
        Everything {
            flag: true,
            text: "é".repeat(big / 2),
            blob: bytes(big, 1),
            texts: vec![String::new(), "x".repeat(big % 9), "arm".into()],
            maybe: Some(bytes(big / 3, 2)),
            nothing: None,
            by_name: BTreeMap::from([
                ("a".repeat(5), bytes(3, 3)),
                ("b".into(), bytes(big / 5, 4)),
            ]),
            shapes: vec![
                Shape::Unit,
                Shape::Named("n".repeat(big / 7)),
                Shape::Pair(9, bytes(big / 11, 5)),
                Shape::Fields {
                    label: "l".into(),
                    data: bytes(13, 6),
                },
            ],
            pair: ("p".repeat(3), 77),
            label: Label("label".into()),
            numbers: vec![1, 2, 3],
            letter: 'ß',
            tail: 0xAB,
        }
    }

    #[test]
    fn every_shape_decodes_as_it_was_encoded() {
        for big in [
            0,
            1,
            7,
            DIRECT_FROM / 4,
            DIRECT_FROM,
            DIRECT_FROM + 3,
            1 << 20,
        ] {
            let value = everything(big);
            let mut bytes = Vec::new();
            encode_into(&value, &mut bytes).expect("encode");
            assert_eq!(
                decode::<Everything>(&bytes).expect("decode"),
                value,
                "{big}"
            );
        }
    }

    /// `(Blob, String)` with the blob `pad` bytes long (the input then takes the direct path)
    /// and the string's length prefix and bytes as given.
    fn pair(pad: usize, prefix: u64, text: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        encode_into(&Blob(vec![1; pad]), &mut bytes).expect("encode");
        bytes.extend_from_slice(&prefix.to_le_bytes());
        bytes.extend_from_slice(text);
        bytes
    }

    fn decode_error(bytes: &[u8]) -> String {
        match decode::<(Blob, String)>(bytes) {
            Err(e @ (CodecError::Decode { .. } | CodecError::TrailingBytes { .. })) => {
                e.to_string()
            }
            other => panic!("expected a decode error, got {other:?}"),
        }
    }

    #[test]
    fn a_length_beyond_the_input_is_refused_before_anything_is_reserved() {
        let pad = DIRECT_FROM;
        assert!(decode::<(Blob, String)>(&pair(pad, 2, b"ok")).is_ok());
        for prefix in [3, 1 << 40, u64::MAX] {
            let error = decode_error(&pair(pad, prefix, b"ok"));
            assert!(error.contains("a length prefix claims"), "{error}");
        }
    }

    #[test]
    fn text_that_is_not_utf8_and_trailing_bytes_are_refused() {
        let error = decode_error(&pair(DIRECT_FROM, 2, &[0xff, 0xfe]));
        assert!(error.contains("UTF-8"), "{error}");
        let mut bytes = pair(DIRECT_FROM, 2, b"ok");
        bytes.push(0);
        let error = decode_error(&bytes);
        assert!(error.contains("1 trailing bytes"), "{error}");
    }
}
