//! How a Rust type travels through a slot. Two codecs:
//! - `Serde` (the default): any serde type, encoded with bincode (see `codec`);
//! - `Pod`: "fast exportable" `#[repr(C)]` plain-old-data (`bytemuck::Pod`), copied as bytes
//!   with no encoding at all.
//!
//! Either way the type exports its name and schema (`schema::Schema`), which the slot stores.
//!
//! A serde value larger than 4 KiB is decoded straight from the slot while the writer may be
//! overwriting it; the decode is thrown away and redone if so. Its `Deserialize` may therefore
//! see bytes that mix two values: it must report what it does not accept as an error (as every
//! derived and standard implementation does), never panic.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::LengthPrefixes;
use crate::error::BusError;
use crate::schema::Schema;
use crate::slot::{ReadInfo, Slot};

/// Encoding of `T` in a slot. Implemented by `Serde` and `Pod`.
pub trait Codec<T>: 'static {
    fn schema() -> Result<Schema, BusError>;
    /// Payload capacity a publication needs when the user does not ask for one.
    fn default_capacity() -> usize;
    /// The bytes that represent `value`; `scratch` is reused storage. The publication copies
    /// them into the slot (or keeps them until the slot exists).
    fn encode<'a>(value: &'a T, scratch: &'a mut Vec<u8>) -> Result<&'a [u8], BusError>;
    /// Writes `value` straight into `slot`'s buffer, refusing (never truncating) one of more
    /// than `limit` bytes, and returns its length; `None` when this codec does not, or
    /// `last_len` (the length of the publication's previous value) says the value is small
    /// enough that `encode` and a copy are cheaper. `scratch` is reused storage.
    fn write_in_place(
        _value: &T,
        _slot: &Slot,
        _limit: usize,
        _scratch: &mut Vec<u8>,
        _last_len: usize,
    ) -> Option<Result<usize, BusError>> {
        None
    }
    /// Reads the slot's value if newer than `last_seen` into `current`; `prefixes` is what the
    /// type's schema says ([`Schema::length_prefixes`]).
    fn read(
        slot: &Slot,
        last_seen: u64,
        scratch: &mut Vec<u8>,
        prefixes: LengthPrefixes,
        current: &mut Option<T>,
    ) -> Result<Option<ReadInfo>, BusError>;
}

/// Serde types, bincode-encoded.
pub struct Serde;
/// `#[repr(C)]` plain-old-data, copied as bytes.
pub struct Pod;

/// Values up to this size are encoded aside and copied in, and copied out whole and decoded
/// from the copy (cheapest for small values); larger ones are encoded and decoded straight in
/// the slot's buffer, saving a copy of the whole value on each side.
const SMALL_VALUE: usize = 4096;

/// Default capacity of a serde slot, in bytes. Ask for more with `.capacity()`.
pub const DEFAULT_CAPACITY: usize = 4096;

fn schema_error<T>(e: impl std::fmt::Display) -> BusError {
    BusError::Schema {
        type_name: std::any::type_name::<T>().to_owned(),
        reason: e.to_string(),
    }
}

impl<T: Serialize + DeserializeOwned + 'static> Codec<T> for Serde {
    fn schema() -> Result<Schema, BusError> {
        Schema::of_serde::<T>().map_err(schema_error::<T>)
    }

    fn default_capacity() -> usize {
        DEFAULT_CAPACITY
    }

    fn encode<'a>(value: &'a T, scratch: &'a mut Vec<u8>) -> Result<&'a [u8], BusError> {
        crate::codec::encode_into(value, scratch).map_err(schema_error::<T>)?;
        Ok(scratch)
    }

    /// A small value is encoded aside and copied in: measured cheaper (by 100 to 200 ns per
    /// round trip at 64 B) than encoding inside the seqlock's write window. After a large value
    /// the next one is encoded straight into the slot's buffer, saving a copy of the whole
    /// value (about a quarter of a 1 MiB round trip).
    fn write_in_place(
        value: &T,
        slot: &Slot,
        limit: usize,
        scratch: &mut Vec<u8>,
        last_len: usize,
    ) -> Option<Result<usize, BusError>> {
        if last_len <= SMALL_VALUE {
            return None;
        }
        let mut len = 0;
        let written = slot.write_with(|space| {
            let mut writer = space.writer(limit, scratch);
            match crate::codec::encode_to(value, &mut writer) {
                Ok(()) => {
                    len = writer.finish();
                    Ok(len)
                }
                Err(_) if writer.overflowed() => {
                    // Rare: encode once more, aside, only to say how large the value is.
                    let mut all = Vec::new();
                    crate::codec::encode_into(value, &mut all).map_err(schema_error::<T>)?;
                    Err(BusError::TooLarge {
                        name: slot.name().to_string(),
                        size: all.len(),
                        capacity: limit,
                    })
                }
                Err(e) => Err(schema_error::<T>(e)),
            }
        });
        Some(written.map(|_| len))
    }

    /// A small value is copied out and decoded once the copy is validated; a larger one is
    /// decoded straight from the slot's buffer (the seqlock re-check afterwards discards a
    /// decode of bytes that a racing writer changed).
    fn read(
        slot: &Slot,
        last_seen: u64,
        scratch: &mut Vec<u8>,
        prefixes: LengthPrefixes,
        current: &mut Option<T>,
    ) -> Result<Option<ReadInfo>, BusError> {
        // `None`: a small value, copied into `scratch` and decoded once the copy is validated.
        let read = slot.read_in_place(last_seen, |payload| {
            if payload.len() <= SMALL_VALUE {
                scratch.resize(payload.len(), 0);
                payload.copy_to(scratch);
                None
            } else {
                Some(crate::codec::decode_from::<T>(
                    payload.reader(scratch),
                    payload.len(),
                    prefixes,
                ))
            }
        })?;
        let Some((decoded, info)) = read else {
            return Ok(None);
        };
        let value = decoded
            .unwrap_or_else(|| crate::codec::decode_with::<T>(scratch, prefixes))
            .map_err(|e| BusError::Decode {
                name: slot.name().to_string(),
                type_name: std::any::type_name::<T>().to_owned(),
                reason: e.to_string(),
                sequence: info.sequence,
            })?;
        *current = Some(value);
        Ok(Some(info))
    }
}

impl<T: bytemuck::Pod + DeserializeOwned + 'static> Codec<T> for Pod {
    fn schema() -> Result<Schema, BusError> {
        Schema::of_pod::<T>().map_err(schema_error::<T>)
    }

    fn default_capacity() -> usize {
        std::mem::size_of::<T>()
    }

    fn encode<'a>(value: &'a T, _scratch: &'a mut Vec<u8>) -> Result<&'a [u8], BusError> {
        Ok(bytemuck::bytes_of(value))
    }

    fn read(
        slot: &Slot,
        last_seen: u64,
        _scratch: &mut Vec<u8>,
        _prefixes: LengthPrefixes,
        current: &mut Option<T>,
    ) -> Result<Option<ReadInfo>, BusError> {
        let mut value = T::zeroed();
        let info = slot.read_exact(last_seen, bytemuck::bytes_of_mut(&mut value))?;
        if info.is_some() {
            *current = Some(value);
        }
        Ok(info)
    }
}
