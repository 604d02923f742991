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
    /// that a file written with `echo` works). A file that other users may read or write (mode
    /// `o+r` or `o+w`) is refused: whoever can read the key can forge datagrams. Readable by
    /// its group is allowed (a group reserved for the registry, see docs/deploying.md).
    pub fn from_file(path: &std::path::Path, domain: &str) -> Result<Key, String> {
        use std::io::Read;
        let cannot = |e: std::io::Error| {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                format!(
                    "; this registry (uid {}) must be able to read it: give the file to a group \
                     the registry is in (under systemd, the unit's SupplementaryGroups=: see \
                     docs/deploying.md)",
                    nix::unistd::getuid()
                )
            } else {
                String::new()
            };
            format!("cannot read key file {}: {e}{hint}", path.display())
        };
        let mut file = std::fs::File::open(path).map_err(cannot)?;
        // The mode of the file opened, not of whatever the path names a moment later.
        let metadata = file.metadata().map_err(cannot)?;
        if !metadata.is_file() {
            return Err(format!(
                "key file {} is not a regular file: give the file that holds the key",
                path.display()
            ));
        }
        let mode = metadata.permissions();
        check_mode(path, std::os::unix::fs::PermissionsExt::mode(&mode))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(cannot)?;
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < 16 {
            return Err(format!(
                "key file {} holds {} bytes{}; expected at least 16",
                path.display(),
                trimmed.len(),
                if trimmed.len() == bytes.len() {
                    String::new()
                } else {
                    format!(
                        " once the whitespace around them is left out ({} in the file)",
                        bytes.len()
                    )
                }
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

/// Refuses a key file that other users may read or write (see `Key::from_file`).
fn check_mode(path: &std::path::Path, mode: u32) -> Result<(), String> {
    let others = mode & 0o007;
    if others & 0o006 == 0 {
        return Ok(());
    }
    let what = match (others & 0o004 != 0, others & 0o002 != 0) {
        (true, true) => {
            "readable and writable by every user: anyone could forge this bus's \
                         datagrams or replace the key"
        }
        (true, false) => "readable by every user: anyone could forge this bus's datagrams",
        _ => "writable by every user: anyone could replace the key",
    };
    // Keep what the owner and group have; 0600 is the usual choice.
    let fixed = mode & 0o770;
    let or_usual = if fixed == 0o600 { "" } else { " (or 0600)" };
    Err(format!(
        "key file {} is mode {:04o}, {what}. Run `chmod {fixed:04o} {}`{or_usual} and start again",
        path.display(),
        mode & 0o7777,
        path.display()
    ))
}

/// Packets accepted out of order behind the newest one.
pub const WINDOW: u64 = 256;

/// Most windows kept (one per sender and stream). A forgotten host's windows are kept too (a
/// datagram it sent before it was forgotten stays a replay afterwards); past this bound the
/// windows of forgotten (then of the least recently heard) senders are dropped first.
pub const MAX_WINDOWS: usize = 2048;

/// Which of a sender's two streams a datagram belongs to. A registry numbers all its datagrams
/// with one counter, but sends announcements and values from two sockets, and two receiver
/// threads read them in no order between them: one window over both would refuse values
/// overtaken by a later announcement (by more than `WINDOW` packets, as during a big value) as
/// replays. Within one stream the numbers still only grow, so a window per stream keeps every
/// replay out. The stream is read from the signed header (its channel), so a replay cannot
/// change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    Announcements,
    Values,
}

/// Per-sender replay windows, one per stream: each sender's session (its registry's start
/// time) and which of its last `WINDOW` packet numbers were seen.
///
/// Windows are changed only by datagrams found valid (`check`, then `commit`).
///
/// With a key, windows outlive the forgetting of their host: forgetting only marks a window as the
/// first to evict. Consequence: a host whose restart yields a smaller session (its clock went
/// backwards, e.g. a computer without a real-time clock booting before time synchronisation) is
/// refused as a replay until its windows are evicted or this registry restarts; its datagrams are
/// counted as `replayed`. A registry with a state directory (`--state-dir`, the systemd unit's)
/// never restarts with a smaller session (`session.rs`). (Mirrors then follow it again: a value of
/// the session the peers follow now is taken as a new series even when that session is smaller, see
/// `receive.rs`.)
///
/// Without a key a forgotten host's windows are dropped (`remove`): anyone can forge its
/// datagrams anyway, and a validly formed one claiming a session far ahead must shut the real
/// host out only until it is forgotten (silent in the session followed, `forget_after`), not for
/// ever; a restarted host with a smaller session is taken back then too.
///
/// Without a key, too, a packet older than the window is taken (as one of a duplicate the window
/// can no longer tell): a forged packet number far ahead in the real host's own session moved
/// the window there, and every real datagram after it was refused for good (the host, heard
/// through its other stream, was never forgotten). Duplicates the window misses are harmless:
/// values carry their own sequence, announcements their generation.
pub struct Replay {
    senders: HashMap<(u64, Stream), SenderWindow>,
    /// Logical clock of accepted packets, for least-recently-heard eviction.
    clock: u64,
    /// Datagrams carry a MAC: a packet older than the window is a replay.
    keyed: bool,
}

/// Where packet `p` is in a window's `seen` bits: (word, mask).
fn bit(p: u64) -> (usize, u64) {
    ((p % WINDOW / 64) as usize, 1u64 << (p % 64))
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
    /// The windows of a registry with a key (`keyed`) or without one.
    pub fn new(keyed: bool) -> Replay {
        Replay {
            senders: HashMap::new(),
            clock: 0,
            keyed,
        }
    }

    /// The session of `sender`'s window on `stream`, if one is kept.
    pub fn session(&self, sender: u64, stream: Stream) -> Option<u64> {
        self.senders.get(&(sender, stream)).map(|w| w.session)
    }

    /// Whether `(session, packet)` from `sender` may be new: refused if of an older session,
    /// seen before, or older than the window. Changes nothing: a datagram is entered with
    /// `commit` only once it proved valid, so that one forged or broken datagram (a session far
    /// ahead, a junk body) cannot move the window and shut the real sender out.
    pub fn check(
        &self,
        sender: u64,
        stream: Stream,
        session: u64,
        packet: u64,
    ) -> Result<(), Drop> {
        let Some(w) = self.senders.get(&(sender, stream)) else {
            return Ok(());
        };
        if session < w.session {
            return Err(Drop::Replayed);
        }
        if session > w.session || packet > w.newest {
            return Ok(());
        }
        if w.newest - packet >= WINDOW {
            return if self.keyed {
                Err(Drop::Replayed)
            } else {
                Ok(())
            };
        }
        let (i, m) = bit(packet);
        if w.seen[i] & m != 0 {
            return Err(Drop::Replayed);
        }
        Ok(())
    }

    /// Enters `(session, packet)` from `sender`, checked with `check` and since found valid: a
    /// newer session starts a new window. A packet that became old meanwhile (another of a
    /// newer session or far ahead was entered) is left out.
    pub fn commit(&mut self, sender: u64, stream: Stream, session: u64, packet: u64) {
        let key = (sender, stream);
        if !self.senders.contains_key(&key) {
            self.make_room();
        }
        let w = self
            .senders
            .entry(key)
            .or_insert_with(|| SenderWindow::new(session));
        if session < w.session {
            return;
        }
        if session > w.session {
            *w = SenderWindow::new(session);
        }
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
            return;
        }
        let (i, m) = bit(packet);
        w.seen[i] |= m;
        self.clock += 1;
        w.heard = self.clock;
        w.forgotten = false;
    }

    /// `check`, then `commit`: for a datagram valid as soon as it passes the window.
    #[cfg(test)]
    pub fn accept(
        &mut self,
        sender: u64,
        stream: Stream,
        session: u64,
        packet: u64,
    ) -> Result<(), Drop> {
        self.check(sender, stream, session, packet)?;
        self.commit(sender, stream, session, packet);
        Ok(())
    }

    /// Its host was forgotten (timed out): the window stays, first in line for eviction.
    pub fn forget(&mut self, sender: u64) {
        for stream in [Stream::Announcements, Stream::Values] {
            if let Some(w) = self.senders.get_mut(&(sender, stream)) {
                w.forgotten = true;
            }
        }
    }

    /// Drops a sender's windows: without a key, where a window only keeps out duplicates,
    /// because anyone may forge any datagram. A forged "newer session" then shuts the real
    /// host out only until it is forgotten, not for ever.
    pub fn remove(&mut self, sender: u64) {
        for stream in [Stream::Announcements, Stream::Values] {
            self.senders.remove(&(sender, stream));
        }
    }

    /// Makes room for one more sender: evicts a forgotten one, else the least recently heard.
    fn make_room(&mut self) {
        while self.senders.len() >= MAX_WINDOWS {
            let victim = self
                .senders
                .iter()
                .min_by_key(|(_, w)| (!w.forgotten, w.heard))
                .map(|(k, _)| *k);
            match victim {
                Some(s) => {
                    self.senders.remove(&s);
                }
                None => break,
            }
        }
    }

    /// Windows kept (at most two per sender).
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
    use Stream::Values;

    #[test]
    fn a_key_file_others_may_read_or_write_is_refused() {
        let path = std::path::Path::new("/etc/baton/net.key");
        for ok in [0o600, 0o400, 0o640, 0o660, 0o100640] {
            assert!(check_mode(path, ok).is_ok(), "{ok:o}");
        }
        let e = check_mode(path, 0o100644).unwrap_err();
        assert!(
            e.contains("/etc/baton/net.key is mode 0644, readable by every user")
                && e.contains("chmod 0640 /etc/baton/net.key"),
            "{e}"
        );
        assert!(check_mode(path, 0o602)
            .unwrap_err()
            .contains("0602, writable by every user: anyone could replace"));
        assert!(check_mode(path, 0o666)
            .unwrap_err()
            .contains("readable and writable"));
        // Execute by others alone gives nothing away.
        assert!(check_mode(path, 0o601).is_ok());
    }

    #[test]
    fn key_files_are_read_only_when_others_cannot_read_them() {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(format!("baton-auth-key-{}", std::process::id()));
        std::fs::write(&path, "correct horse battery staple\n").unwrap();
        let set =
            |mode| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        set(0o644);
        let refused = Key::from_file(&path, "d").err();
        set(0o640);
        let accepted = Key::from_file(&path, "d");
        std::fs::remove_file(&path).unwrap();
        assert!(refused.is_some_and(|e| e.contains("mode 0644")));
        let expected = Key::derive(b"correct horse battery staple", "d");
        assert_eq!(accepted.unwrap().0, expected.0);
    }

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
        let mut r = Replay::new(true);
        assert!(r.accept(1, Values, 10, 1).is_ok());
        assert!(r.accept(1, Values, 10, 3).is_ok());
        assert!(
            r.accept(1, Values, 10, 2).is_ok(),
            "reordered within the window"
        );
        assert_eq!(r.accept(1, Values, 10, 2), Err(Drop::Replayed));
        assert!(r.accept(1, Values, 10, 1000).is_ok());
        assert_eq!(
            r.accept(1, Values, 10, 3),
            Err(Drop::Replayed),
            "behind the window"
        );
        assert!(r.accept(1, Values, 10, 1000 - WINDOW + 1).is_ok());
        assert!(r.accept(1, Values, 11, 1).is_ok(), "a restarted sender");
        assert_eq!(
            r.accept(1, Values, 10, 2000),
            Err(Drop::Replayed),
            "its old session"
        );
        assert!(r.accept(2, Values, 10, 1).is_ok(), "another sender");
    }

    /// Without a key a packet number far ahead (forged) must not shut out the real packets
    /// behind it; a duplicate within the window is still dropped.
    #[test]
    fn without_a_key_only_duplicates_within_the_window_are_refused() {
        let mut r = Replay::new(false);
        assert!(r.accept(1, Values, 10, 5).is_ok());
        assert_eq!(r.accept(1, Values, 10, 5), Err(Drop::Replayed));
        assert!(r.accept(1, Values, 10, 1_000_000_000_000).is_ok());
        assert!(r.accept(1, Values, 10, 6).is_ok(), "behind the window");
        assert!(r.accept(1, Values, 10, 7).is_ok());
        assert_eq!(
            r.accept(1, Values, 9, 8),
            Err(Drop::Replayed),
            "an older session"
        );
    }

    #[test]
    fn a_checked_datagram_changes_nothing_until_committed() {
        use Stream::Announcements as A;
        let mut r = Replay::new(true);
        assert!(r.accept(1, A, 10, 5).is_ok());
        // A datagram of a session far ahead passes the check; found invalid, it is never
        // committed, and the real sender goes on.
        assert!(r.check(1, A, u64::MAX, 1).is_ok());
        assert!(r.check(1, A, 10, 6).is_ok());
        r.commit(1, A, 10, 6);
        assert_eq!(r.check(1, A, 10, 6), Err(Drop::Replayed));
        // A committed newer session is followed: the older one is refused.
        r.commit(1, A, 11, 1);
        assert_eq!(r.check(1, A, 10, 7), Err(Drop::Replayed));
        r.commit(1, A, 10, 7);
        assert_eq!(r.check(1, A, 11, 1), Err(Drop::Replayed), "late: left out");
        // Removed (a forgotten host without a key): anything goes again.
        r.remove(1);
        assert!(r.is_empty());
        assert!(r.check(1, A, 10, 7).is_ok());
    }

    #[test]
    fn a_forgotten_senders_old_datagrams_stay_replays() {
        let mut r = Replay::new(true);
        for p in 1..=5 {
            assert!(r.accept(1, Values, 10, p).is_ok());
        }
        r.forget(1);
        assert_eq!(
            r.accept(1, Values, 10, 3),
            Err(Drop::Replayed),
            "seen before"
        );
        assert_eq!(
            r.accept(1, Values, 9, 100),
            Err(Drop::Replayed),
            "an older session"
        );
        assert!(
            r.accept(1, Values, 10, 6).is_ok(),
            "the same host, back again"
        );
        assert!(r.accept(1, Values, 11, 1).is_ok(), "the host restarted");
    }

    #[test]
    fn windows_are_bounded_and_forgotten_senders_are_evicted_first() {
        let mut r = Replay::new(true);
        for s in 0..MAX_WINDOWS as u64 {
            assert!(r.accept(s, Values, 10, 1).is_ok());
        }
        r.forget(7);
        // Sender 0 is the least recently heard, but 7 was forgotten: 7 goes.
        assert!(r.accept(5000, Values, 10, 1).is_ok());
        assert_eq!(r.len(), MAX_WINDOWS);
        assert_eq!(r.accept(0, Values, 10, 1), Err(Drop::Replayed), "0 kept");
        assert!(r.accept(7, Values, 10, 1).is_ok(), "7's window was evicted");
        // No forgotten sender left: the least recently heard (0: a refused replay does not
        // count as heard) went to make room for 7.
        assert_eq!(r.len(), MAX_WINDOWS);
        assert_eq!(r.accept(1, Values, 10, 1), Err(Drop::Replayed), "1 kept");
        assert!(r.accept(0, Values, 10, 1).is_ok(), "0 was evicted");
    }

    #[test]
    fn announcements_and_values_have_windows_of_their_own() {
        // One counter numbers both streams; a late value behind a much newer announcement is
        // not a replay, a value seen before still is.
        let mut r = Replay::new(true);
        assert!(r.accept(1, Values, 10, 5).is_ok());
        assert!(r.accept(1, Stream::Announcements, 10, 5000).is_ok());
        assert!(r.accept(1, Values, 10, 6).is_ok());
        assert_eq!(r.accept(1, Values, 10, 6), Err(Drop::Replayed));
        assert_eq!(
            r.accept(1, Stream::Announcements, 10, 5000),
            Err(Drop::Replayed)
        );
        r.forget(1);
        assert_eq!(
            r.accept(1, Values, 10, 5),
            Err(Drop::Replayed),
            "kept when forgotten"
        );
    }
}
