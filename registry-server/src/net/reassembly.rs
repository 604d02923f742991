//! Reassembly of fragmented messages, with a bound on the memory held for incomplete ones.
//!
//! Incomplete messages are kept per (sender, channel): a fragment of a newer message on the
//! same channel replaces the older incomplete one (latest-value semantics: nobody wants the old
//! value any more), a fragment (or a whole one-fragment message) of an older message is stale.
//! When the memory held would exceed the limit, or there are more than `MAX_PARTIALS`
//! incomplete messages, the oldest ones are evicted. Both are counted (`superseded`,
//! `evicted`). The memory counted for an incomplete
//! message is its buffer plus a fixed `OVERHEAD`, so that many tiny ones (a flood of crafted
//! fragments) are bounded as well as a few big ones.
//!
//! Announcements are the exception for one-fragment messages: a host's announcement parts go
//! out as consecutive messages on one channel, an older one is not superseded by a newer one
//! (it is another part), so they are delivered whatever their order (`announce.rs` sorts them
//! out by their generation). So are bundles of values (`bundle.rs`): each of their values
//! is ordered by its own sequence, and a bundle is never cut into fragments (one that claims
//! to be is malformed). Replays are the replay window's business.
//!
//! The sender and channel come off the wire: without a key anyone can make up new ones, so the
//! record of delivered messages is bounded too (`MAX_DELIVERED`); forgetting it costs at most a
//! duplicate delivery, which the mirror's sequence check then refuses. A message is recorded as
//! delivered only once the receiver found it valid (`delivered`): a forged or broken message
//! numbered far ahead must not make every real one after it stale.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::bundle::BUNDLE_CHANNEL;
use super::wire::{Datagram, Drop, ANNOUNCE_CHANNEL};

/// Memory counted per incomplete message besides its buffer: the map entry, the fragment
/// bitmap and the allocations' headers (a generous estimate).
const OVERHEAD: usize = 256;
/// Most incomplete messages held at once, whatever their size.
const MAX_PARTIALS: usize = 4096;
/// Most (sender, channel) pairs whose newest delivered message is remembered; past it the
/// record starts over.
const MAX_DELIVERED: usize = 65_536;

struct Partial {
    session: u64,
    message: u64,
    buf: Vec<u8>,
    got: Vec<u64>,
    missing: u32,
    /// When its last fragment came: a large message on a slow link takes longer than the
    /// expiry age, and is dropped only when its fragments stop coming.
    progressed: Instant,
}

pub struct Reassembler {
    partial: HashMap<(u64, u64), Partial>,
    /// Newest message delivered per (sender, channel), to refuse late fragments of it.
    delivered: HashMap<(u64, u64), (u64, u64)>,
    held: usize,
    limit: usize,
}

/// What a fragment led to.
pub enum Outcome<'a> {
    /// The message is whole (borrowed from the datagram when it had one fragment). Nothing
    /// records it yet: the receiver calls `delivered` if it is valid.
    Complete(std::borrow::Cow<'a, [u8]>),
    /// Kept; more fragments needed.
    Pending,
    /// Dropped, with the reason.
    Dropped(Drop),
}

/// Other incomplete messages a fragment cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Displaced {
    /// Dropped to keep memory bounded.
    pub evicted: u64,
    /// Replaced by a newer message of the same channel.
    pub superseded: u64,
}

impl Reassembler {
    pub fn new(limit: usize) -> Reassembler {
        Reassembler {
            partial: HashMap::new(),
            delivered: HashMap::new(),
            held: 0,
            limit,
        }
    }

    /// `--reassembly-limit`.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Memory a message of `total` bytes is counted for while incomplete.
    pub fn cost(total: u32) -> usize {
        total as usize + OVERHEAD
    }

    /// Memory counted for incomplete messages (buffers plus `OVERHEAD` each).
    pub fn held(&self) -> usize {
        self.held
    }

    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    /// Adds one decoded datagram. Returns the outcome and the other incomplete messages it
    /// cost.
    pub fn add<'a>(&mut self, d: &Datagram<'a>, now: Instant) -> (Outcome<'a>, Displaced) {
        let h = &d.header;
        let key = (h.sender, h.channel);
        let mut displaced = Displaced::default();
        if h.channel == BUNDLE_CHANNEL && d.fragments() != 1 {
            return (Outcome::Dropped(Drop::Malformed), displaced);
        }
        if d.fragments() == 1 && (h.channel == ANNOUNCE_CHANNEL || h.channel == BUNDLE_CHANNEL) {
            return (
                Outcome::Complete(std::borrow::Cow::Borrowed(d.body)),
                displaced,
            );
        }
        if let Some(&(session, message)) = self.delivered.get(&key) {
            if session == h.session && message >= h.message {
                return (Outcome::Dropped(Drop::Stale), displaced);
            }
        }
        if d.fragments() == 1 {
            if let Some(p) = self.partial.get(&key) {
                // An older message arriving late must not cost the newer incomplete one.
                if p.session == h.session && p.message > h.message {
                    return (Outcome::Dropped(Drop::Stale), displaced);
                }
            }
            displaced.superseded = u64::from(self.drop_partial(&key));
            return (
                Outcome::Complete(std::borrow::Cow::Borrowed(d.body)),
                displaced,
            );
        }
        let replace = match self.partial.get(&key) {
            None => true,
            Some(p) if p.session != h.session || p.message < h.message => true,
            Some(p) if p.message > h.message => return (Outcome::Dropped(Drop::Stale), displaced),
            Some(p) => p.buf.len() != h.total as usize,
        };
        if replace {
            displaced.superseded = u64::from(self.drop_partial(&key));
            let total = h.total as usize;
            let cost = Reassembler::cost(h.total);
            if cost > self.limit {
                return (Outcome::Dropped(Drop::Oversized), displaced);
            }
            while self.held + cost > self.limit || self.partial.len() >= MAX_PARTIALS {
                let Some(oldest) = self
                    .partial
                    .iter()
                    .min_by_key(|(_, p)| p.progressed)
                    .map(|(k, _)| *k)
                else {
                    break;
                };
                self.drop_partial(&oldest);
                displaced.evicted += 1;
            }
            let fragments = d.fragments();
            self.held += cost;
            self.partial.insert(
                key,
                Partial {
                    session: h.session,
                    message: h.message,
                    buf: vec![0; total],
                    got: vec![0; fragments.div_ceil(64) as usize],
                    missing: fragments,
                    progressed: now,
                },
            );
        }
        let Some(p) = self.partial.get_mut(&key) else {
            return (Outcome::Dropped(Drop::Malformed), displaced);
        };
        let i = d.fragment();
        let (word, bit) = ((i / 64) as usize, 1u64 << (i % 64));
        let Some(w) = p.got.get_mut(word) else {
            return (Outcome::Dropped(Drop::Malformed), displaced);
        };
        if *w & bit != 0 {
            return (Outcome::Dropped(Drop::Replayed), displaced);
        }
        *w |= bit;
        p.progressed = now;
        let off = h.offset as usize;
        let Some(dst) = p.buf.get_mut(off..off + d.body.len()) else {
            return (Outcome::Dropped(Drop::Malformed), displaced);
        };
        dst.copy_from_slice(d.body);
        p.missing -= 1;
        if p.missing > 0 {
            return (Outcome::Pending, displaced);
        }
        let done = self.partial.remove(&key);
        let Some(done) = done else {
            return (Outcome::Dropped(Drop::Malformed), displaced);
        };
        self.held -= done.buf.len() + OVERHEAD;
        (
            Outcome::Complete(std::borrow::Cow::Owned(done.buf)),
            displaced,
        )
    }

    /// Records the message whose last fragment `d` is as delivered, once the receiver found
    /// it valid: its late fragments, and older messages of its channel, are stale from now on.
    pub fn delivered(&mut self, d: &Datagram<'_>) {
        let h = &d.header;
        // A host's one-datagram announcement parts, and bundles, are all delivered (see the
        // module's text).
        if d.fragments() == 1 && (h.channel == ANNOUNCE_CHANNEL || h.channel == BUNDLE_CHANNEL) {
            return;
        }
        self.remember_delivered((h.sender, h.channel), h.session, h.message);
    }

    /// Drops incomplete messages that got no fragment for `age` (their sender moved on or
    /// died, or the rest was lost). Returns how many.
    pub fn expire(&mut self, now: Instant, age: Duration) -> u64 {
        let old: Vec<_> = self
            .partial
            .iter()
            .filter(|(_, p)| now.duration_since(p.progressed) > age)
            .map(|(k, _)| *k)
            .collect();
        for k in &old {
            self.drop_partial(k);
        }
        old.len() as u64
    }

    /// Forgets everything from one sender.
    pub fn forget(&mut self, sender: u64) {
        let keys: Vec<_> = self
            .partial
            .keys()
            .filter(|(s, _)| *s == sender)
            .copied()
            .collect();
        for k in &keys {
            self.drop_partial(k);
        }
        self.delivered.retain(|(s, _), _| *s != sender);
    }

    /// Drops the incomplete message of `sender`'s `channel` if it is older than `message` of
    /// `session`: a newer value of its slot came whole in a bundle (as one that comes alone on
    /// the channel does in `add`). Returns whether one was dropped.
    pub fn supersede(&mut self, sender: u64, channel: u64, session: u64, message: u64) -> bool {
        let key = (sender, channel);
        match self.partial.get(&key) {
            Some(p) if p.session == session && p.message < message => self.drop_partial(&key),
            _ => false,
        }
    }

    /// Drops the incomplete message of `key`; whether there was one.
    fn drop_partial(&mut self, key: &(u64, u64)) -> bool {
        match self.partial.remove(key) {
            Some(p) => {
                self.held -= p.buf.len() + OVERHEAD;
                true
            }
            None => false,
        }
    }

    fn remember_delivered(&mut self, key: (u64, u64), session: u64, message: u64) {
        if self.delivered.len() >= MAX_DELIVERED && !self.delivered.contains_key(&key) {
            self.delivered.clear();
        }
        self.delivered.insert(key, (session, message));
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::{decode_datagram, encode_header, Header};
    use super::*;

    fn frags(message: u64, channel: u64, data: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        data.chunks(chunk)
            .enumerate()
            .map(|(i, c)| {
                let h = Header {
                    flags: 0,
                    domain: 1,
                    sender: 2,
                    session: 3,
                    packet: message * 1000 + i as u64,
                    channel,
                    message,
                    total: data.len() as u32,
                    offset: (i * chunk) as u32,
                    chunk: chunk as u32,
                    body_len: c.len() as u32,
                };
                let mut out = Vec::new();
                encode_header(&h, &mut out);
                out.extend_from_slice(c);
                out
            })
            .collect()
    }

    /// Adds a datagram of a valid message: recorded as delivered once complete.
    fn add(r: &mut Reassembler, bytes: &[u8]) -> Option<Vec<u8>> {
        let d = decode_datagram(bytes, 1 << 20).unwrap();
        match r.add(&d, Instant::now()).0 {
            Outcome::Complete(m) => {
                let m = m.into_owned();
                r.delivered(&d);
                Some(m)
            }
            _ => None,
        }
    }

    /// A message whose fragments keep coming, over a slow link, outlives the expiry age
    /// counted from its first fragment: it is dropped only once they stop (it used to be
    /// dropped every time, and a large value on a slow link never arrived).
    #[test]
    fn an_incomplete_message_expires_only_when_its_fragments_stop() {
        let data = vec![7u8; 4000];
        let parts = frags(1, 5, &data, 1000);
        let mut r = Reassembler::new(1 << 20);
        let age = Duration::from_secs(5);
        let start = Instant::now();
        for (i, part) in parts[..3].iter().enumerate() {
            let at = start + Duration::from_secs(4 * i as u64);
            let d = decode_datagram(part, 1 << 20).unwrap();
            assert!(matches!(r.add(&d, at).0, Outcome::Pending));
            assert_eq!(
                r.expire(at + Duration::from_secs(1), age),
                0,
                "fragment {i}"
            );
        }
        let d = decode_datagram(&parts[3], 1 << 20).unwrap();
        let last = start + Duration::from_secs(12);
        assert!(matches!(r.add(&d, last).0, Outcome::Complete(m) if m == data));
        // Stopped: expired once `age` has passed since its last fragment.
        let next = frags(2, 5, &data, 1000);
        let d = decode_datagram(&next[0], 1 << 20).unwrap();
        assert!(matches!(r.add(&d, last).0, Outcome::Pending));
        assert_eq!(r.expire(last + Duration::from_secs(4), age), 0);
        assert_eq!(r.expire(last + Duration::from_secs(6), age), 1);
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn reassembles_in_any_order_and_newer_replaces_older() {
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut r = Reassembler::new(10_000);
        let mut f = frags(1, 7, &data, 100);
        f.reverse();
        let (last, rest) = f.split_last().unwrap();
        for x in rest {
            assert!(add(&mut r, x).is_none());
        }
        assert_eq!(r.held(), 1000 + OVERHEAD);
        assert_eq!(add(&mut r, last).unwrap(), data);
        assert_eq!(r.held(), 0);
        // Message 2 half done, then message 3 starts: 2 is dropped, its late fragments stale.
        let two = frags(2, 7, &data, 100);
        let three = frags(3, 7, &data, 100);
        add(&mut r, &two[0]);
        let first_of_three = decode_datagram(&three[0], 1 << 20).unwrap();
        let (_, displaced) = r.add(&first_of_three, Instant::now());
        assert_eq!(displaced.superseded, 1, "message 2 replaced and counted");
        assert!(add(&mut r, &two[1]).is_none());
        for x in &three[1..] {
            add(&mut r, x);
        }
        assert_eq!(r.held(), 0);
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn memory_stays_bounded() {
        let data = vec![1u8; 1000];
        let limit = 2 * (1000 + OVERHEAD) + 100;
        let mut r = Reassembler::new(limit);
        for channel in 1..10 {
            add(&mut r, &frags(1, channel, &data, 100)[0]);
            assert!(r.held() <= limit);
        }
        assert_eq!(r.pending(), 2);
        let big = vec![1u8; 3000];
        let d = frags(1, 99, &big, 100);
        let d = decode_datagram(&d[0], 1 << 20).unwrap();
        assert!(matches!(
            r.add(&d, Instant::now()).0,
            Outcome::Dropped(Drop::Oversized)
        ));
    }

    #[test]
    fn many_tiny_incomplete_messages_are_bounded_by_count_and_overhead() {
        let mut r = Reassembler::new(256 << 20);
        for channel in 0..3 * MAX_PARTIALS as u64 {
            add(&mut r, &frags(1, channel, &[1, 2], 1)[0]);
        }
        assert_eq!(r.pending(), MAX_PARTIALS);
        assert_eq!(r.held(), MAX_PARTIALS * (2 + OVERHEAD));
        // The record of delivered messages starts over instead of growing.
        for channel in 0..2 * MAX_DELIVERED as u64 {
            add(&mut r, &frags(1, 1 << 32 | channel, &[1], 1)[0]);
        }
        assert!(r.delivered.len() <= MAX_DELIVERED);
    }

    /// Bundles carry values of many slots: one delivered never makes an earlier one stale
    /// (each value's sequence orders it), and one cut into fragments is refused.
    #[test]
    fn bundles_are_delivered_in_any_order_and_never_in_fragments() {
        let mut r = Reassembler::new(1 << 20);
        let later = frags(9, BUNDLE_CHANNEL, &[4; 50], 100);
        let earlier = frags(8, BUNDLE_CHANNEL, &[3; 50], 100);
        assert_eq!(add(&mut r, &later[0]).as_deref(), Some(&[4; 50][..]));
        assert_eq!(add(&mut r, &earlier[0]).as_deref(), Some(&[3; 50][..]));
        let cut = frags(10, BUNDLE_CHANNEL, &[5; 150], 100);
        let d = decode_datagram(&cut[0], 1 << 20).unwrap();
        assert!(matches!(
            r.add(&d, Instant::now()).0,
            Outcome::Dropped(Drop::Malformed)
        ));
        assert_eq!(r.pending(), 0);
    }

    /// A newer value of a slot come whole in a bundle drops the slot's older incomplete
    /// value, never a newer one nor one of another session.
    #[test]
    fn a_bundled_value_supersedes_only_an_older_incomplete_one() {
        let mut r = Reassembler::new(1 << 20);
        let five = frags(5, 7, &[1; 200], 100);
        assert!(add(&mut r, &five[0]).is_none());
        assert!(!r.supersede(2, 7, 3, 4), "message 4 is older than 5");
        assert!(!r.supersede(2, 7, 9, 6), "another session");
        assert!(!r.supersede(2, 8, 3, 6), "another channel");
        assert_eq!(r.pending(), 1);
        assert!(r.supersede(2, 7, 3, 6));
        assert_eq!((r.pending(), r.held()), (0, 0));
    }

    #[test]
    fn a_late_older_one_fragment_message_leaves_the_newer_incomplete_one() {
        let data = vec![5u8; 200];
        let mut r = Reassembler::new(1 << 20);
        let ten = frags(10, 7, &data, 100);
        assert!(add(&mut r, &ten[0]).is_none());
        let five = frags(5, 7, &[1, 2, 3], 100);
        assert!(add(&mut r, &five[0]).is_none(), "message 5 is older: stale");
        assert_eq!(add(&mut r, &ten[1]).as_deref(), Some(&data[..]));
    }

    #[test]
    fn only_a_message_found_valid_makes_later_ones_stale() {
        let mut r = Reassembler::new(1 << 20);
        // Whole, numbered far ahead, and found invalid by the receiver: not recorded.
        let forged = frags(1 << 40, 7, &[9; 150], 100);
        for f in &forged {
            let d = decode_datagram(f, 1 << 20).unwrap();
            let _ = r.add(&d, Instant::now());
        }
        let forged_one = frags(1 << 40, 7, &[9], 100);
        let d = decode_datagram(&forged_one[0], 1 << 20).unwrap();
        assert!(matches!(r.add(&d, Instant::now()).0, Outcome::Complete(_)));
        // The real messages still come through, and once delivered their duplicates are stale.
        let real = frags(1, 7, &[1; 150], 100);
        assert!(add(&mut r, &real[0]).is_none());
        assert_eq!(add(&mut r, &real[1]).as_deref(), Some(&[1; 150][..]));
        assert!(add(&mut r, &real[1]).is_none(), "stale");
        let d = decode_datagram(&real[1], 1 << 20).unwrap();
        assert!(matches!(
            r.add(&d, Instant::now()).0,
            Outcome::Dropped(Drop::Stale)
        ));
    }
}
