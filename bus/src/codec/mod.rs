//! The one place bincode is used: the byte encoding of serde value types on the bus.
//!
//! bincode is pinned to `=2.0.1` (3.0.0 is an empty crate that refuses to build), so every
//! call goes through here and a future swap touches one file. The schema decoder in
//! `schema.rs` reads the same bytes without the Rust type and relies on [`config`] staying
//! fixed-int little-endian.

mod byte_strings;

use bincode::config::{Configuration, Fixint, LittleEndian, NoLimit};
use bincode::de::read::Reader;
use bincode::enc::write::Writer;

/// The bincode configuration used for every value on the bus.
pub type Config = Configuration<LittleEndian, Fixint, NoLimit>;

/// Fixed-width integers keep encoded sizes predictable and let the schema decoder read
/// lengths (u64), variant indices (u32) and numbers without varint logic.
pub fn config() -> Config {
    bincode::config::standard()
        .with_fixed_int_encoding()
        .with_little_endian()
}

/// Why a value could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("cannot encode a {type_name} with bincode: {source}")]
    Encode {
        type_name: &'static str,
        #[source]
        source: bincode::error::EncodeError,
    },
    #[error(
        "expected the {len} bytes to hold an encoded {type_name}, but decoding failed: {reason}"
    )]
    Decode {
        type_name: &'static str,
        len: usize,
        reason: String,
        #[source]
        source: bincode::error::DecodeError,
    },
    #[error(
        "expected an encoded {type_name} to fill all {len} bytes, found {trailing} trailing \
         bytes after the first {consumed}"
    )]
    TrailingBytes {
        type_name: &'static str,
        len: usize,
        consumed: usize,
        trailing: usize,
    },
    #[error("expected at most {max} bytes for an encoded {type_name}, found {len}")]
    TooLarge {
        type_name: &'static str,
        len: usize,
        max: usize,
    },
}

/// Inputs from this size on read their strings and byte buffers without zeroing them first
/// (`byte_strings`): below it the zeroes cost next to nothing, and bincode's own path stays.
const DIRECT_FROM: usize = 64 << 10;

/// Largest input [`decode`] accepts; far above any slot size, and it keeps the limit
/// buckets below within `usize` on every target.
pub const MAX_DECODE_LEN: usize = u32::MAX as usize;

/// Clears `out` and encodes `value` into it, reusing `out`'s allocation.
pub fn encode_into<T: serde::Serialize + ?Sized>(
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    out.clear();
    encode_to(value, VecWriter(out))
}

/// Encodes `value` into any bincode writer (e.g. a slot buffer, `payload::PayloadWriter`).
pub fn encode_to<T: serde::Serialize + ?Sized>(
    value: &T,
    writer: impl Writer,
) -> Result<(), CodecError> {
    bincode::serde::encode_into_writer(value, writer, config()).map_err(|source| {
        CodecError::Encode {
            type_name: std::any::type_name::<T>(),
            source,
        }
    })
}

/// A bincode reader that says how many bytes it has handed out, so that a decode can be checked
/// to have used its whole input.
pub trait CountingReader: Reader {
    fn consumed(&self) -> usize;

    /// Appends the next `n` bytes to `dst` without zeroing its new room first (see
    /// `byte_strings`); fails, appending nothing, when fewer are left.
    fn append_to(&mut self, n: usize, dst: &mut Vec<u8>)
        -> Result<(), bincode::error::DecodeError>;
}

impl CountingReader for crate::payload::PayloadReader<'_> {
    #[inline]
    fn consumed(&self) -> usize {
        crate::payload::PayloadReader::consumed(self)
    }

    fn append_to(
        &mut self,
        n: usize,
        dst: &mut Vec<u8>,
    ) -> Result<(), bincode::error::DecodeError> {
        crate::payload::PayloadReader::append_to(self, n, dst)
    }
}

impl<T: CountingReader> CountingReader for &mut T {
    #[inline]
    fn consumed(&self) -> usize {
        (**self).consumed()
    }

    fn append_to(
        &mut self,
        n: usize,
        dst: &mut Vec<u8>,
    ) -> Result<(), bincode::error::DecodeError> {
        (**self).append_to(n, dst)
    }
}

/// Whether a type's encoding can hold a length prefix: a string, byte buffer, sequence or map
/// (see [`crate::schema::Schema::length_prefixes`]).
///
/// A length prefix is the only part of an encoded value from which decoding can be asked for an
/// allocation of any size, so it decides whether [`decode_from`] must bound allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthPrefixes {
    /// The type's schema has none: whatever the bytes say, a decode allocates no more than
    /// the type's shape fixes (a recursive type: in proportion to the bytes read).
    Absent,
    /// The type may hold some (or nothing is known about it).
    Possible,
}

/// Decodes one `T` that must fill `bytes` exactly.
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    decode_with(bytes, LengthPrefixes::Possible)
}

/// Decodes one `T` whose schema says `prefixes` and that must fill `bytes` exactly.
pub fn decode_with<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    prefixes: LengthPrefixes,
) -> Result<T, CodecError> {
    decode_from(SliceCursor { bytes, pos: 0 }, bytes.len(), prefixes)
}

/// Decodes one `T` that must fill the `len` bytes `reader` yields exactly; `prefixes` is what
/// `T`'s schema says ([`LengthPrefixes::Possible`] when in doubt).
///
/// The bytes may come from a corrupt or hostile segment. bincode sizes a string or byte
/// buffer from its length prefix before reading it, so an unchecked prefix could ask for
/// exabytes and abort the process. With a byte limit configured bincode checks each claim
/// first; the limit is a const generic, so pick the smallest of a few power-of-16 buckets
/// that holds the input: a hostile prefix can then cost at most 16 times the input size.
///
/// The limit's bookkeeping runs on every field, which more than doubles the decode of a small
/// struct of numbers (measured: 28 against 12 ns for the 64-byte, 11-field struct of
/// `bus-bench`); a type without length prefixes has nothing it guards, so it goes without.
pub fn decode_from<T: serde::de::DeserializeOwned>(
    mut reader: impl CountingReader,
    len: usize,
    prefixes: LengthPrefixes,
) -> Result<T, CodecError> {
    const KIB4: usize = 1 << 12;
    const KIB64: usize = 1 << 16;
    const MIB1: usize = 1 << 20;
    const MIB16: usize = 1 << 24;
    const MIB256: usize = 1 << 28;
    if len > MAX_DECODE_LEN {
        return Err(CodecError::TooLarge {
            type_name: std::any::type_name::<T>(),
            len,
            max: MAX_DECODE_LEN,
        });
    }
    // `$run` with the smallest limit bucket that holds `len`.
    macro_rules! limited {
        ($run:expr) => {
            if len <= KIB4 {
                $run(config().with_limit::<KIB4>())
            } else if len <= KIB64 {
                $run(config().with_limit::<KIB64>())
            } else if len <= MIB1 {
                $run(config().with_limit::<MIB1>())
            } else if len <= MIB16 {
                $run(config().with_limit::<MIB16>())
            } else if len <= MIB256 {
                $run(config().with_limit::<MIB256>())
            } else {
                $run(config().with_limit::<MAX_DECODE_LEN>())
            }
        };
    }
    use bincode::serde::decode_from_reader as run;
    let (result, consumed) = if prefixes == LengthPrefixes::Absent {
        (run(&mut reader, config()), reader.consumed())
    } else if len < DIRECT_FROM {
        (limited!(|c| run(&mut reader, c)), reader.consumed())
    } else {
        limited!(|c| byte_strings::decode(&mut reader, len, c))
    };
    match result {
        Ok(value) if consumed == len => Ok(value),
        Ok(_) => Err(CodecError::TrailingBytes {
            type_name: std::any::type_name::<T>(),
            len,
            consumed,
            trailing: len.saturating_sub(consumed),
        }),
        Err(source) => Err(CodecError::Decode {
            type_name: std::any::type_name::<T>(),
            len,
            reason: explain(&source),
            source,
        }),
    }
}

/// bincode's own messages are terse; say in bus terms what was expected and found.
fn explain(error: &bincode::error::DecodeError) -> String {
    use bincode::error::DecodeError as E;
    match error {
        E::UnexpectedEnd { additional } => {
            format!("the bytes end early, at least {additional} more needed")
        }
        E::LimitExceeded => "a length prefix claims more bytes than the input holds".to_string(),
        E::InvalidBooleanValue(found) => format!("expected a bool byte 0 or 1, found {found}"),
        E::UnexpectedVariant {
            found, type_name, ..
        } => format!("expected a valid variant index of {type_name}, found {found}"),
        E::Utf8 { .. } => "expected UTF-8 text, found invalid UTF-8".to_string(),
        E::InvalidCharEncoding(found) => format!("expected a UTF-8 char, found bytes {found:?}"),
        E::OutsideUsizeRange(found) => {
            format!("expected a length that fits in memory, found {found}")
        }
        other => other.to_string(),
    }
}

/// Reads a slice front to back, counting.
///
/// `read` and `VecWriter::write` are `#[inline]`: bincode calls them once per field from code
/// monomorphized in the caller's crate, where a plain function of this crate is never inlined
/// (measured: 50 -> 13 ns to encode, 92 -> 50 ns to decode a 64-byte struct of 11 fields).
struct SliceCursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader for SliceCursor<'_> {
    #[inline]
    fn read(&mut self, out: &mut [u8]) -> Result<(), bincode::error::DecodeError> {
        let left = self.bytes.len() - self.pos;
        if out.len() > left {
            return Err(bincode::error::DecodeError::UnexpectedEnd {
                additional: out.len() - left,
            });
        }
        out.copy_from_slice(&self.bytes[self.pos..self.pos + out.len()]);
        self.pos += out.len();
        Ok(())
    }
}

impl CountingReader for SliceCursor<'_> {
    #[inline]
    fn consumed(&self) -> usize {
        self.pos
    }

    fn append_to(
        &mut self,
        n: usize,
        dst: &mut Vec<u8>,
    ) -> Result<(), bincode::error::DecodeError> {
        let left = self.bytes.len() - self.pos;
        if n > left {
            return Err(bincode::error::DecodeError::UnexpectedEnd {
                additional: n - left,
            });
        }
        dst.extend_from_slice(&self.bytes[self.pos..self.pos + n]);
        self.pos += n;
        Ok(())
    }
}

/// Appends to a borrowed `Vec` so encoding reuses the caller's buffer.
struct VecWriter<'a>(&'a mut Vec<u8>);

impl Writer for VecWriter<'_> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        id: u32,
        name: String,
        tag: Option<char>,
        values: Vec<i16>,
    }

    fn sample() -> Sample {
        Sample {
            id: 7,
            name: "arm".into(),
            tag: Some('é'),
            values: vec![-1, 2],
        }
    }

    #[test]
    fn round_trip_and_layout() {
        let mut out = Vec::new();
        encode_into(&sample(), &mut out).expect("encode");
        let mut expected = vec![7, 0, 0, 0];
        expected.extend_from_slice(&3u64.to_le_bytes());
        expected.extend_from_slice(b"arm");
        expected.push(1);
        expected.extend_from_slice("é".as_bytes());
        expected.extend_from_slice(&2u64.to_le_bytes());
        expected.extend_from_slice(&(-1i16).to_le_bytes());
        expected.extend_from_slice(&2i16.to_le_bytes());
        assert_eq!(out, expected);
        assert_eq!(decode::<Sample>(&out).expect("decode"), sample());
    }

    #[test]
    fn encode_into_clears_and_reuses() {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(&[9; 100]);
        let ptr = out.as_ptr();
        encode_into(&5u16, &mut out).expect("encode");
        assert_eq!(out, vec![5, 0]);
        assert_eq!(out.as_ptr(), ptr);
        encode_into("ab", &mut out).expect("encode unsized");
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn trailing_bytes_refused() {
        let err = decode::<u16>(&[1, 0, 0]).expect_err("trailing");
        let text = err.to_string();
        assert!(
            text.contains("u16") && text.contains("1 trailing"),
            "{text}"
        );
    }

    #[test]
    fn hostile_lengths_are_errors() {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        let err = decode::<String>(&bytes).expect_err("huge string");
        assert!(err.to_string().contains("alloc::string::String"), "{err}");
        let mut bytes = (1u64 << 40).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 5000]);
        assert!(decode::<Vec<u8>>(&bytes).is_err());
        assert!(decode::<serde_bytes_like::Buf>(&bytes).is_err());
        assert!(decode::<bool>(&[2]).is_err());
        assert!(decode::<Option<u8>>(&[3, 1]).is_err());
        assert!(decode::<char>(&[0xff]).is_err());
        assert!(decode::<Sample>(&[]).is_err());
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut bytes = Vec::new();
        for round in 0..3000 {
            bytes.clear();
            for _ in 0..(round % 64) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                bytes.push(state as u8);
            }
            let _ = decode::<Sample>(&bytes);
            let _ = decode::<Vec<String>>(&bytes);
        }
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Gear {
        Park,
        Drive(u8),
        Turn { left: bool, rate: f32 },
    }

    /// Numbers, bools, chars, options, arrays, tuples and enums: nothing length-prefixed.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Shaped {
        seq: u64,
        pose: [f64; 3],
        gear: Gear,
        next: Option<(char, i16)>,
    }

    fn shaped() -> Shaped {
        Shaped {
            seq: 9,
            pose: [0.5, -1.0, 2.0],
            gear: Gear::Turn {
                left: true,
                rate: 0.25,
            },
            next: Some(('z', -3)),
        }
    }

    #[test]
    fn the_schema_says_which_types_hold_length_prefixes() {
        use crate::schema::Schema;
        use std::collections::BTreeMap;
        fn prefixes<T: Serialize + serde::de::DeserializeOwned>() -> LengthPrefixes {
            Schema::of_serde::<T>().expect("schema").length_prefixes()
        }
        #[derive(Serialize, Deserialize)]
        enum DeepText {
            Nothing,
            Named(Option<(u8, String)>),
        }
        #[derive(Serialize, Deserialize)]
        struct Holds(DeepText);
        assert_eq!(prefixes::<Shaped>(), LengthPrefixes::Absent);
        assert_eq!(prefixes::<[u16; 4]>(), LengthPrefixes::Absent);
        assert_eq!(prefixes::<Sample>(), LengthPrefixes::Possible);
        assert_eq!(prefixes::<Holds>(), LengthPrefixes::Possible);
        assert_eq!(prefixes::<Option<Vec<u8>>>(), LengthPrefixes::Possible);
        assert_eq!(prefixes::<BTreeMap<u8, u8>>(), LengthPrefixes::Possible);
        assert_eq!(
            prefixes::<crate::schema::tests::Blob>(),
            LengthPrefixes::Possible
        );
    }

    #[test]
    fn a_type_without_length_prefixes_decodes_the_same_without_the_limit() {
        let mut out = Vec::new();
        encode_into(&shaped(), &mut out).expect("encode");
        let unbounded: Shaped = decode_with(&out, LengthPrefixes::Absent).expect("decode");
        assert_eq!(unbounded, shaped());
        assert_eq!(decode::<Shaped>(&out).expect("decode"), shaped());
        // Short, long and hostile inputs are errors either way.
        assert!(decode_with::<Shaped>(&out[..out.len() - 1], LengthPrefixes::Absent).is_err());
        let mut long = out.clone();
        long.push(0);
        assert!(decode_with::<Shaped>(&long, LengthPrefixes::Absent).is_err());
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..5000 {
            let mut bytes = out.clone();
            for _ in 0..1 + round % 4 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = (state as usize) % bytes.len();
                bytes[at] = (state >> 32) as u8;
            }
            // Compared as text: a changed float may be a NaN, which equals nothing.
            let bounded = format!("{:?}", decode::<Shaped>(&bytes).ok());
            let unbounded = decode_with::<Shaped>(&bytes, LengthPrefixes::Absent).ok();
            assert_eq!(
                bounded,
                format!("{unbounded:?}"),
                "round {round}: {bytes:?}"
            );
        }
    }

    /// Deserializes through `deserialize_byte_buf`, the other length-prefixed allocation.
    mod serde_bytes_like {
        #[derive(Debug)]
        pub struct Buf;

        impl<'de> serde::Deserialize<'de> for Buf {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = Buf;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("bytes")
                    }
                    fn visit_byte_buf<E>(self, _: Vec<u8>) -> Result<Buf, E> {
                        Ok(Buf)
                    }
                }
                d.deserialize_byte_buf(V)
            }
        }
    }
}
