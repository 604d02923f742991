//! Datagram authentication: a keyed BLAKE3 MAC (truncated to 16 bytes) derived from a shared key
//! file and the domain, and a per-sender window of packet numbers against replays.

use std::collections::HashMap;

use super::wire::{Drop, MAC_LEN};

/// The MAC key of one domain.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl Key {
    /// Derives the key from the key file's bytes and the domain name, so that the same file
    /// used by two domains gives two keys.
    pub fn derive(file: &[u8], domain: &str) -> Key {
        let mut material = Vec::with_capacity(file.len() + domain.len() + 1);
        material.extend_from_slice(domain.as_bytes());
        material.push(0);
        material.extend_from_slice(file);
        Key(blake3::derive_key(
            "baton registry datagram MAC v1",
            &material,
        ))
    }

    /// Reads a key file: any bytes, at least 16 of them (whitespace at the ends is ignored so
    /// that a file written with `echo` works).
    pub fn from_file(path: &std::path::Path, domain: &str) -> Result<Key, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read key file {}: {e}", path.display()))?;
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < 16 {
            return Err(format!(
                "key file {} holds {} bytes; expected at least 16",
                path.display(),
                trimmed.len()
            ));
        }
        Ok(Key::derive(trimmed, domain))
    }

    pub fn mac(&self, signed: &[u8]) -> [u8; MAC_LEN] {
        let full = blake3::keyed_hash(&self.0, signed);
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&full.as_bytes()[..MAC_LEN]);
        out
    }

    pub fn verify(&self, signed: &[u8], mac: &[u8]) -> bool {
        // Constant time: blake3's Hash equality is, but we compare a truncation; fold instead.
        let expected = self.mac(signed);
        mac.len() == MAC_LEN && expected.iter().zip(mac).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    }
}

/// Packets accepted out of order behind the newest one.
pub const WINDOW: u64 = 256;

/// Per-sender replay window: the sender's session (start time) and which of the last `WINDOW`
/// packet numbers were seen.
#[derive(Default)]
pub struct Replay {
    senders: HashMap<u64, SenderWindow>,
}

struct SenderWindow {
    session: u64,
    newest: u64,
    seen: [u64; (WINDOW / 64) as usize],
}

impl Replay {
    /// Accepts `(session, packet)` from `sender` once; a packet of an older session, a packet
    /// seen before, or one older than the window is refused.
    pub fn accept(&mut self, sender: u64, session: u64, packet: u64) -> Result<(), Drop> {
        let w = self.senders.entry(sender).or_insert(SenderWindow {
            session,
            newest: 0,
            seen: [0; (WINDOW / 64) as usize],
        });
        if session < w.session {
            return Err(Drop::Replayed);
        }
        if session > w.session {
            *w = SenderWindow {
                session,
                newest: 0,
                seen: [0; (WINDOW / 64) as usize],
            };
        }
        let bit = |p: u64| ((p % WINDOW / 64) as usize, 1u64 << (p % 64));
        if packet > w.newest {
            // Clear the bits of the packets that slide out of the window.
            let advance = packet - w.newest;
            if advance >= WINDOW {
                w.seen = [0; (WINDOW / 64) as usize];
            } else {
                for p in w.newest + 1..=packet {
                    let (i, m) = bit(p);
                    w.seen[i] &= !m;
                }
            }
            w.newest = packet;
        } else if w.newest - packet >= WINDOW {
            return Err(Drop::Replayed);
        }
        let (i, m) = bit(packet);
        if w.seen[i] & m != 0 {
            return Err(Drop::Replayed);
        }
        w.seen[i] |= m;
        Ok(())
    }

    /// Forgets a sender (after it timed out).
    pub fn forget(&mut self, sender: u64) {
        self.senders.remove(&sender);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_depend_on_key_domain_and_bytes() {
        let k = Key::derive(b"0123456789abcdef", "d1");
        let mac = k.mac(b"hello");
        assert!(k.verify(b"hello", &mac));
        assert!(!k.verify(b"hellO", &mac));
        assert!(!Key::derive(b"0123456789abcdeX", "d1").verify(b"hello", &mac));
        assert!(!Key::derive(b"0123456789abcdef", "d2").verify(b"hello", &mac));
        assert!(!k.verify(b"hello", &mac[..8]));
    }

    #[test]
    fn replays_and_old_sessions_are_refused() {
        let mut r = Replay::default();
        assert!(r.accept(1, 10, 1).is_ok());
        assert!(r.accept(1, 10, 3).is_ok());
        assert!(r.accept(1, 10, 2).is_ok(), "reordered within the window");
        assert_eq!(r.accept(1, 10, 2), Err(Drop::Replayed));
        assert!(r.accept(1, 10, 1000).is_ok());
        assert_eq!(r.accept(1, 10, 3), Err(Drop::Replayed), "behind the window");
        assert!(r.accept(1, 10, 1000 - WINDOW + 1).is_ok());
        assert!(r.accept(1, 11, 1).is_ok(), "a restarted sender");
        assert_eq!(
            r.accept(1, 10, 2000),
            Err(Drop::Replayed),
            "its old session"
        );
        assert!(r.accept(2, 10, 1).is_ok(), "another sender");
    }
}
