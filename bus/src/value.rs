//! How a Rust type travels through a slot. Two codecs:
//! - `Serde` (the default): any serde type, encoded with bincode (see `codec`);
//! - `Pod`: "fast exportable" `#[repr(C)]` plain-old-data (`bytemuck::Pod`), copied as bytes
//!   with no encoding at all.
//!
//! Either way the type exports its name and schema (`schema::Schema`), which the slot stores.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::BusError;
use crate::schema::Schema;
use crate::slot::{ReadInfo, Slot};

/// Encoding of `T` in a slot. Implemented by `Serde` and `Pod`.
pub trait Codec<T>: 'static {
    fn schema() -> Result<Schema, BusError>;
    /// Payload capacity a publication needs when the user does not ask for one.
    fn default_capacity() -> usize;
    /// The bytes that represent `value`; `scratch` is reused storage.
    fn encode<'a>(value: &'a T, scratch: &'a mut Vec<u8>) -> Result<&'a [u8], BusError>;
    /// Reads the slot's value if newer than `last_seen` into `current`.
    fn read(
        slot: &Slot,
        last_seen: u64,
        scratch: &mut Vec<u8>,
        current: &mut Option<T>,
    ) -> Result<Option<ReadInfo>, BusError>;
}

/// Serde types, bincode-encoded.
pub struct Serde;
/// `#[repr(C)]` plain-old-data, copied as bytes.
pub struct Pod;

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

    fn read(
        slot: &Slot,
        last_seen: u64,
        scratch: &mut Vec<u8>,
        current: &mut Option<T>,
    ) -> Result<Option<ReadInfo>, BusError> {
        let Some(info) = slot.read(last_seen, scratch)? else {
            return Ok(None);
        };
        let value = crate::codec::decode::<T>(scratch).map_err(|e| BusError::Decode {
            name: slot.name().to_string(),
            type_name: std::any::type_name::<T>().to_owned(),
            reason: e.to_string(),
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
