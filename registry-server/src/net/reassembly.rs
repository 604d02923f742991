//! Reassembly of fragmented messages, with a bound on the memory held for incomplete ones.
//!
//! Incomplete messages are kept per (sender, channel): a fragment of a newer message on the
//! same channel replaces the older incomplete one (latest-value semantics: nobody wants the old
//! value any more), a fragment of an older message is stale. When the bytes held would exceed
//! the limit, the oldest incomplete messages are evicted.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::wire::{Datagram, Drop};

struct Partial {
    session: u64,
    message: u64,
    buf: Vec<u8>,
    got: Vec<u64>,
    missing: u32,
    started: Instant,
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
    /// The message is whole (borrowed from the datagram when it had one fragment).
    Complete(std::borrow::Cow<'a, [u8]>),
    /// Kept; more fragments needed.
    Pending,
    /// Dropped, with the reason; `evicted` other incomplete messages were dropped to make room.
    Dropped(Drop),
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

    /// Bytes held for incomplete messages.
    pub fn held(&self) -> usize {
        self.held
    }

    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    /// Adds one decoded datagram. Returns the outcome and how many incomplete messages were
    /// evicted for room.
    pub fn add<'a>(&mut self, d: &Datagram<'a>, now: Instant) -> (Outcome<'a>, u64) {
        let h = &d.header;
        let key = (h.sender, h.channel);
        if let Some(&(session, message)) = self.delivered.get(&key) {
            if session == h.session && message >= h.message {
                return (Outcome::Dropped(Drop::Stale), 0);
            }
        }
        if d.fragments() == 1 {
            self.drop_partial(&key);
            self.delivered.insert(key, (h.session, h.message));
            return (Outcome::Complete(std::borrow::Cow::Borrowed(d.body)), 0);
        }
        let mut evicted = 0;
        let replace = match self.partial.get(&key) {
            None => true,
            Some(p) if p.session != h.session || p.message < h.message => true,
            Some(p) if p.message > h.message => return (Outcome::Dropped(Drop::Stale), 0),
            Some(p) => p.buf.len() != h.total as usize,
        };
        if replace {
            self.drop_partial(&key);
            let total = h.total as usize;
            if total > self.limit {
                return (Outcome::Dropped(Drop::Oversized), 0);
            }
            while self.held + total > self.limit {
                let Some(oldest) = self
                    .partial
                    .iter()
                    .min_by_key(|(_, p)| p.started)
                    .map(|(k, _)| *k)
                else {
                    break;
                };
                self.drop_partial(&oldest);
                evicted += 1;
            }
            let fragments = d.fragments();
            self.held += total;
            self.partial.insert(
                key,
                Partial {
                    session: h.session,
                    message: h.message,
                    buf: vec![0; total],
                    got: vec![0; fragments.div_ceil(64) as usize],
                    missing: fragments,
                    started: now,
                },
            );
        }
        let Some(p) = self.partial.get_mut(&key) else {
            return (Outcome::Dropped(Drop::Malformed), evicted);
        };
        let i = d.fragment();
        let (word, bit) = ((i / 64) as usize, 1u64 << (i % 64));
        let Some(w) = p.got.get_mut(word) else {
            return (Outcome::Dropped(Drop::Malformed), evicted);
        };
        if *w & bit != 0 {
            return (Outcome::Dropped(Drop::Replayed), evicted);
        }
        *w |= bit;
        let off = h.offset as usize;
        let Some(dst) = p.buf.get_mut(off..off + d.body.len()) else {
            return (Outcome::Dropped(Drop::Malformed), evicted);
        };
        dst.copy_from_slice(d.body);
        p.missing -= 1;
        if p.missing > 0 {
            return (Outcome::Pending, evicted);
        }
        let done = self.partial.remove(&key);
        let Some(done) = done else {
            return (Outcome::Dropped(Drop::Malformed), evicted);
        };
        self.held -= done.buf.len();
        self.delivered.insert(key, (h.session, h.message));
        (
            Outcome::Complete(std::borrow::Cow::Owned(done.buf)),
            evicted,
        )
    }

    /// Drops incomplete messages older than `age` (their sender moved on or died). Returns how
    /// many.
    pub fn expire(&mut self, now: Instant, age: Duration) -> u64 {
        let old: Vec<_> = self
            .partial
            .iter()
            .filter(|(_, p)| now.duration_since(p.started) > age)
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

    fn drop_partial(&mut self, key: &(u64, u64)) {
        if let Some(p) = self.partial.remove(key) {
            self.held -= p.buf.len();
        }
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

    fn add(r: &mut Reassembler, bytes: &[u8]) -> Option<Vec<u8>> {
        let d = decode_datagram(bytes, 1 << 20).unwrap();
        match r.add(&d, Instant::now()).0 {
            Outcome::Complete(m) => Some(m.into_owned()),
            _ => None,
        }
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
        assert_eq!(r.held(), 1000);
        assert_eq!(add(&mut r, last).unwrap(), data);
        assert_eq!(r.held(), 0);
        // Message 2 half done, then message 3 starts: 2 is dropped, its late fragments stale.
        let two = frags(2, 7, &data, 100);
        let three = frags(3, 7, &data, 100);
        add(&mut r, &two[0]);
        add(&mut r, &three[0]);
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
        let mut r = Reassembler::new(2500);
        for channel in 1..10 {
            add(&mut r, &frags(1, channel, &data, 100)[0]);
            assert!(r.held() <= 2500);
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
}
