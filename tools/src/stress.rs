//! Self-checking values for burn-in and for the test suite: every value carries its length and
//! a checksum of its payload, so a reader can tell a torn or garbage value from a good one.

use serde::{Deserialize, Serialize};

use crate::bench::payload::Blob;

/// A value whose parts check each other. Its bytes travel in two forms so that both of the
/// bus's encoding paths are checked: `payload` as a sequence (bincode writes and reads it one
/// element at a time), `piece` as one byte string (copied in and out in one piece, straight
/// between the slot and the value once values are large).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checked {
    pub sequence: u64,
    pub payload: Vec<u8>,
    pub piece: Blob,
    /// FNV-1a of `sequence`, `payload` and `piece`.
    pub checksum: u64,
}

fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Checked {
    /// A value of `len` bytes in all (about half in each form) whose content depends on
    /// `sequence`.
    pub fn new(sequence: u64, len: usize) -> Checked {
        let mut bytes = vec![0u8; len];
        let mut x = sequence.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        for b in bytes.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let piece = Blob(bytes.split_off(len / 2));
        let checksum = fnv1a(fnv1a(sequence, &bytes), &piece.0);
        Checked {
            sequence,
            payload: bytes,
            piece,
            checksum,
        }
    }

    pub fn is_valid(&self) -> bool {
        self.checksum == fnv1a(fnv1a(self.sequence, &self.payload), &self.piece.0)
    }
}

/// Payload size for the `i`-th value when sizes cycle through `min..=max` on a log scale.
pub fn cycling_size(i: u64, min: usize, max: usize) -> usize {
    let steps = 16u64;
    let t = (i % (steps + 1)) as f64 / steps as f64;
    let (lmin, lmax) = ((min.max(1) as f64).ln(), (max.max(1) as f64).ln());
    ((lmin + (lmax - lmin) * t).exp() as usize).clamp(min, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_check_themselves() {
        let mut v = Checked::new(7, 100);
        assert!(v.is_valid());
        assert_eq!((v.payload.len(), v.piece.0.len()), (50, 50));
        v.payload[20] ^= 1;
        assert!(!v.is_valid());
        let mut v = Checked::new(8, 101);
        v.piece.0[30] ^= 1;
        assert!(!v.is_valid());
        assert_eq!(cycling_size(0, 8, 1 << 20), 8);
        assert_eq!(cycling_size(16, 8, 1 << 20), 1 << 20);
    }
}
