//! Datagram authentication: a keyed BLAKE3 MAC (truncated to 16 bytes) derived from a shared key
//! file and the domain, and a per-sender window of packet numbers against replays, kept (within
//! a bound) beyond the forgetting of a silent host.

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

/// Most senders whose windows are kept. A forgotten host's window is kept too (a datagram it
/// sent before it was forgotten stays a replay afterwards); past this bound the window of the
/// forgotten (then the least recently heard) sender is dropped first.
pub const MAX_SENDERS: usize = 1024;

/// Per-sender replay windows: each sender's session (its registry's start time) and which of
/// its last `WINDOW` packet numbers were seen.
///
/// Windows outlive the forgetting of their host: forgetting only marks a window as the first to
/// evict. Consequence: a host whose restart yields a smaller session (its clock went backwards,
/// e.g. a computer without a real-time clock booting before time synchronisation) is refused as a
/// replay until its window is evicted; its datagrams are counted as `replayed`.
#[derive(Default)]
pub struct Replay {
    senders: HashMap<u64, SenderWindow>,
    /// Logical clock of accepted packets, for least-recently-heard eviction.
    clock: u64,
}

struct SenderWindow {
    session: u64,
    newest: u64,
    seen: [u64; (WINDOW / 64) as usize],
    /// Its host was forgotten (and not heard from since).
    forgotten: bool,
    /// `clock` when a packet from it was last accepted.
    heard: u64,
}

impl SenderWindow {
    fn new(session: u64) -> SenderWindow {
        SenderWindow {
            session,
            newest: 0,
            seen: [0; (WINDOW / 64) as usize],
            forgotten: false,
            heard: 0,
        }
    }
}

impl Replay {
    /// Accepts `(session, packet)` from `sender` once; a packet of an older session, a packet
    /// seen before, or one older than the window is refused.
    pub fn accept(&mut self, sender: u64, session: u64, packet: u64) -> Result<(), Drop> {
        if !self.senders.contains_key(&sender) {
            self.make_room();
        }
        let w = self
            .senders
            .entry(sender)
            .or_insert_with(|| SenderWindow::new(session));
        if session < w.session {
            return Err(Drop::Replayed);
        }
        if session > w.session {
            *w = SenderWindow::new(session);
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
        self.clock += 1;
        w.heard = self.clock;
        w.forgotten = false;
        Ok(())
    }

    /// Its host was forgotten (timed out): the window stays, first in line for eviction.
    pub fn forget(&mut self, sender: u64) {
        if let Some(w) = self.senders.get_mut(&sender) {
            w.forgotten = true;
        }
    }

    /// Makes room for one more sender: evicts a forgotten one, else the least recently heard.
    fn make_room(&mut self) {
        while self.senders.len() >= MAX_SENDERS {
            let victim = self
                .senders
                .iter()
                .min_by_key(|(_, w)| (!w.forgotten, w.heard))
                .map(|(s, _)| *s);
            match victim {
                Some(s) => {
                    self.senders.remove(&s);
                }
                None => break,
            }
        }
    }

    /// Senders whose windows are kept.
    pub fn len(&self) -> usize {
        self.senders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.senders.is_empty()
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

    #[test]
    fn a_forgotten_senders_old_datagrams_stay_replays() {
        let mut r = Replay::default();
        for p in 1..=5 {
            assert!(r.accept(1, 10, p).is_ok());
        }
        r.forget(1);
        assert_eq!(r.accept(1, 10, 3), Err(Drop::Replayed), "seen before");
        assert_eq!(r.accept(1, 9, 100), Err(Drop::Replayed), "an older session");
        assert!(r.accept(1, 10, 6).is_ok(), "the same host, back again");
        assert!(r.accept(1, 11, 1).is_ok(), "the host restarted");
    }

    #[test]
    fn windows_are_bounded_and_forgotten_senders_are_evicted_first() {
        let mut r = Replay::default();
        for s in 0..MAX_SENDERS as u64 {
            assert!(r.accept(s, 10, 1).is_ok());
        }
        r.forget(7);
        // Sender 0 is the least recently heard, but 7 was forgotten: 7 goes.
        assert!(r.accept(5000, 10, 1).is_ok());
        assert_eq!(r.len(), MAX_SENDERS);
        assert_eq!(r.accept(0, 10, 1), Err(Drop::Replayed), "0 kept");
        assert!(r.accept(7, 10, 1).is_ok(), "7's window was evicted");
        // No forgotten sender left: the least recently heard (0: a refused replay does not
        // count as heard) went to make room for 7.
        assert_eq!(r.len(), MAX_SENDERS);
        assert_eq!(r.accept(1, 10, 1), Err(Drop::Replayed), "1 kept");
        assert!(r.accept(0, 10, 1).is_ok(), "0 was evicted");
    }
}
