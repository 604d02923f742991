//! The values bus-bench sends: a 64-byte plain-old-data struct, a serde struct whose bincode
//! encoding is exactly 64 bytes, and byte payloads (4 KiB, 1 MiB) that serde hands to bincode as
//! one byte string. Each carries a sequence number so that a round trip can tell its own echo
//! from an older value.

use std::fmt;

use bus::{Bus, BusError, Codec, Subscription};
use serde::{Deserialize, Serialize};

/// Sequence number that tells a peer to echo once more and stop.
pub const STOP: u64 = u64::MAX;

/// The payload kinds of the ping-pong cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// `#[repr(C)]` struct of 8 u64, copied as bytes (`publish_pod`).
    Pod64,
    /// Serde struct whose bincode encoding is 64 bytes.
    Bincode64,
    /// 4 KiB byte payload (serde bytes, capacity set).
    Bytes4k,
    /// 1 MiB byte payload (serde bytes, capacity set).
    Bytes1m,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Pod64, Kind::Bincode64, Kind::Bytes4k, Kind::Bytes1m];

    /// Payload bytes of one value (for the byte kinds, without bincode's 8-byte length).
    pub fn bytes(self) -> usize {
        match self {
            Kind::Pod64 | Kind::Bincode64 => 64,
            Kind::Bytes4k => 4096,
            Kind::Bytes1m => 1 << 20,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Pod64 => "64 B POD",
            Kind::Bincode64 => "64 B bincode",
            Kind::Bytes4k => "4 KiB bytes",
            Kind::Bytes1m => "1 MiB bytes",
        }
    }

    /// The value passed as `--kind` to a peer.
    pub fn arg(self) -> &'static str {
        match self {
            Kind::Pod64 => "pod64",
            Kind::Bincode64 => "bincode64",
            Kind::Bytes4k => "bytes4k",
            Kind::Bytes1m => "bytes1m",
        }
    }
}

/// A value type the benchmarks can send, with its codec.
pub trait Payload: Sized + 'static {
    type Codec: Codec<Self>;
    /// A value of `bytes` payload bytes.
    fn make(bytes: usize) -> Self;
    fn set_seq(&mut self, seq: u64);
    fn seq(&self) -> u64;
    /// Slot capacity a value of `bytes` payload bytes needs.
    fn capacity(bytes: usize) -> usize;
    fn subscribe(bus: &Bus, name: &str) -> Result<Subscription<Self, Self::Codec>, BusError>;
}

/// 64 bytes of plain-old-data.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable, Serialize, Deserialize,
)]
pub struct Pod64 {
    pub words: [u64; 8],
}

impl Payload for Pod64 {
    type Codec = bus::Pod;
    fn make(_bytes: usize) -> Self {
        Pod64 {
            words: [0x0123_4567_89ab_cdef; 8],
        }
    }
    fn set_seq(&mut self, seq: u64) {
        self.words[0] = seq;
    }
    fn seq(&self) -> u64 {
        self.words[0]
    }
    fn capacity(_bytes: usize) -> usize {
        std::mem::size_of::<Pod64>()
    }
    fn subscribe(bus: &Bus, name: &str) -> Result<Subscription<Self, bus::Pod>, BusError> {
        bus.subscribe_pod(name)
    }
}

/// A serde struct shaped like a small robot message; bincode (fixed-width integers) encodes it
/// in 8 + 48 + 4 + 2 + 1 + 1 = 64 bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Msg64 {
    pub seq: u64,
    pub pose: [f64; 6],
    pub status: u32,
    pub mode: u16,
    pub ok: bool,
    pub level: u8,
}

impl Payload for Msg64 {
    type Codec = bus::Serde;
    fn make(_bytes: usize) -> Self {
        Msg64 {
            seq: 0,
            pose: [0.5, -1.25, 2.0, 0.1, 0.2, 0.3],
            status: 7,
            mode: 2,
            ok: true,
            level: 3,
        }
    }
    fn set_seq(&mut self, seq: u64) {
        self.seq = seq;
    }
    fn seq(&self) -> u64 {
        self.seq
    }
    fn capacity(_bytes: usize) -> usize {
        64
    }
    fn subscribe(bus: &Bus, name: &str) -> Result<Subscription<Self, bus::Serde>, BusError> {
        bus.subscribe(name)
    }
}

/// A byte payload that serializes through `serialize_bytes`, so bincode writes it as a length
/// and one block copy (a plain `Vec<u8>` would go through serde one element at a time). As a
/// bus-bench payload its first eight bytes hold the sequence number (`Payload::seq`).
#[derive(Clone, PartialEq)]
pub struct Blob(pub Vec<u8>);

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Blob({} bytes, seq {})", self.0.len(), self.seq())
    }
}

impl Serialize for Blob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Blob;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E>(self, bytes: &[u8]) -> Result<Blob, E> {
                Ok(Blob(bytes.to_vec()))
            }
            fn visit_byte_buf<E>(self, bytes: Vec<u8>) -> Result<Blob, E> {
                Ok(Blob(bytes))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Blob, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(b) = seq.next_element()? {
                    bytes.push(b);
                }
                Ok(Blob(bytes))
            }
        }
        d.deserialize_byte_buf(Visitor)
    }
}

impl Payload for Blob {
    type Codec = bus::Serde;
    fn make(bytes: usize) -> Self {
        let mut data: Vec<u8> = (0..bytes.max(8)).map(|i| (i * 31 % 251) as u8).collect();
        data[..8].copy_from_slice(&0u64.to_le_bytes());
        Blob(data)
    }
    fn set_seq(&mut self, seq: u64) {
        self.0[..8].copy_from_slice(&seq.to_le_bytes());
    }
    fn seq(&self) -> u64 {
        let mut b = [0u8; 8];
        if let Some(head) = self.0.get(..8) {
            b.copy_from_slice(head);
        }
        u64::from_le_bytes(b)
    }
    fn capacity(bytes: usize) -> usize {
        bytes.max(8) + 8
    }
    fn subscribe(bus: &Bus, name: &str) -> Result<Subscription<Self, bus::Serde>, BusError> {
        bus.subscribe(name)
    }
}

/// Checks that the serde struct really encodes to 64 bytes (the case's name says so).
pub fn check_msg64() -> Result<(), String> {
    let mut out = Vec::new();
    bus::codec::encode_into(&Msg64::make(64), &mut out).map_err(|e| e.to_string())?;
    if out.len() == 64 {
        Ok(())
    } else {
        Err(format!(
            "Msg64 should encode to 64 bytes, bincode gives {}",
            out.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_carry_their_sequence_and_size() {
        check_msg64().expect("64-byte encoding");
        let mut blob = Blob::make(4096);
        blob.set_seq(42);
        assert_eq!(blob.seq(), 42);
        let mut out = Vec::new();
        bus::codec::encode_into(&blob, &mut out).expect("encode");
        assert_eq!(out.len(), Blob::capacity(4096));
        let back: Blob = bus::codec::decode(&out).expect("decode");
        assert_eq!(back, blob);
        assert_eq!(std::mem::size_of::<Pod64>(), 64);
    }
}
