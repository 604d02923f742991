//! Bundles: several small values for one host in one datagram. A reflector pass that finds more
//! than one value to send to a host (many slots written at once, or the periodic refresh) packs
//! those that fit into datagrams of the chunk size instead of sending each alone: on a busy
//! robot the kernel's cost per datagram, not the bytes, bounds how many values a second cross
//! the network. A pass with one value for a host sends it alone, as a plain value message on
//! its slot's channel: an idle bus pays nothing for bundling.
//!
//! On the wire a bundle is one message of kind `wire::KIND_VALUES` on [`BUNDLE_CHANNEL`], and
//! always one datagram:
//!
//! ```text
//! 0  kind (4)   1  count u16   3  count entries, each: a u32 length, then a value message
//!                                  (`wire::encode_value`, its kind byte included)
//! ```
//!
//! A bundle is at most a datagram, and no larger than the sender's largest message
//! (`--max-value` and the fields). A receiver takes or drops it whole at the datagram's checks
//! (domain, MAC, replay window, session; not its own `--max-value`, which it holds each value to
//! instead), and then takes or drops each value on its own, counted by cause, as if it had come
//! alone; a value taken also supersedes an older one of its slot still being reassembled. The
//! bundle channel keeps no order between messages (reassembly treats it as the announce
//! channel): each value's sequence orders it against the other values of its slot, however the
//! datagrams that carry them were reordered.

use std::net::SocketAddr;

use super::wire::{self, Drop, Message, Value};

/// The channel of bundles: never a slot's (`wire::channel_of` stays below it), nor announce.
pub const BUNDLE_CHANNEL: u64 = u64::MAX;
/// The kind byte and the count.
const HEAD: usize = 1 + 2;
/// Each entry's length prefix.
const ENTRY_PREFIX: usize = 4;

/// The values of a received bundle, checked whole by [`Values::decode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Values<'a> {
    count: u16,
    entries: &'a [u8],
}

impl<'a> Values<'a> {
    /// Checks a bundle message (its kind byte first): the count matches the entries, which
    /// fill the message exactly, and each is a value message. Never allocates.
    pub fn decode(bytes: &'a [u8]) -> Result<Values<'a>, Drop> {
        if bytes.len() < HEAD {
            return Err(Drop::Truncated);
        }
        if bytes[0] != wire::KIND_VALUES {
            return Err(Drop::Malformed);
        }
        let count = u16::from_le_bytes([bytes[1], bytes[2]]);
        let values = Values {
            count,
            entries: &bytes[HEAD..],
        };
        let mut seen = 0u16;
        let mut rest = values.entries;
        while !rest.is_empty() {
            let (entry, next) = split_entry(rest)?;
            // Checked before decoding: a bundle inside a bundle would make the decoder recurse
            // as deep as the input allows.
            if entry.first() != Some(&wire::KIND_VALUE) {
                return Err(Drop::Malformed);
            }
            wire::decode_message(entry)?;
            seen = seen.checked_add(1).ok_or(Drop::Malformed)?;
            rest = next;
        }
        if seen != count || count == 0 {
            return Err(Drop::Malformed);
        }
        Ok(values)
    }

    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The values, in the order they were packed.
    pub fn iter(&self) -> impl Iterator<Item = Value<'a>> + 'a {
        let mut rest = self.entries;
        std::iter::from_fn(move || {
            // `decode` checked every entry: no error is met here.
            let (entry, next) = split_entry(rest).ok()?;
            rest = next;
            if entry.first() != Some(&wire::KIND_VALUE) {
                return None;
            }
            match wire::decode_message(entry).ok()? {
                Message::Value(v) => Some(v),
                _ => None,
            }
        })
    }
}

/// The first entry of `bytes` and what follows it.
fn split_entry(bytes: &[u8]) -> Result<(&[u8], &[u8]), Drop> {
    let prefix = bytes.get(..ENTRY_PREFIX).ok_or(Drop::Truncated)?;
    let len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
    let rest = &bytes[ENTRY_PREFIX..];
    if rest.len() < len {
        return Err(Drop::Truncated);
    }
    Ok(rest.split_at(len))
}

/// A bundle being filled for one host.
#[derive(Debug)]
pub struct Bundle {
    body: Vec<u8>,
    count: u16,
    /// The channel of the first value: a bundle of one goes as that value alone.
    first_channel: u64,
}

/// What a filled bundle sends: a value alone on its slot's channel, or a bundle.
pub struct Outgoing<'a> {
    pub channel: u64,
    pub message: &'a [u8],
    /// How many values it carries.
    pub values: usize,
}

impl Bundle {
    fn new(chunk: usize) -> Bundle {
        let mut body = Vec::with_capacity(chunk);
        body.extend_from_slice(&[wire::KIND_VALUES, 0, 0]);
        Bundle {
            body,
            count: 0,
            first_channel: 0,
        }
    }

    fn clear(&mut self) {
        self.body.truncate(HEAD);
        self.count = 0;
    }

    fn fits(&self, value_message: &[u8], chunk: usize) -> bool {
        self.count < u16::MAX && self.body.len() + ENTRY_PREFIX + value_message.len() <= chunk
    }

    fn push(&mut self, channel: u64, value_message: &[u8]) {
        if self.count == 0 {
            self.first_channel = channel;
        }
        self.body
            .extend_from_slice(&(value_message.len() as u32).to_le_bytes());
        self.body.extend_from_slice(value_message);
        self.count += 1;
        self.body[1..HEAD].copy_from_slice(&self.count.to_le_bytes());
    }

    /// The message to send (`None` when empty).
    pub fn outgoing(&self) -> Option<Outgoing<'_>> {
        match self.count {
            0 => None,
            1 => Some(Outgoing {
                channel: self.first_channel,
                message: &self.body[HEAD + ENTRY_PREFIX..],
                values: 1,
            }),
            n => Some(Outgoing {
                channel: BUNDLE_CHANNEL,
                message: &self.body,
                values: usize::from(n),
            }),
        }
    }
}

/// The bundles of one reflector pass, one open per host; kept between passes (their buffers
/// are reused).
#[derive(Debug)]
pub struct Bundler {
    chunk: usize,
    open: Vec<(SocketAddr, Bundle)>,
}

impl Bundler {
    /// Bundles of at most `chunk` bytes: one datagram each.
    pub fn new(chunk: usize) -> Bundler {
        Bundler {
            chunk,
            open: Vec::new(),
        }
    }

    /// Whether a value message can go in a bundle at all (a larger one goes alone, in as many
    /// datagrams as it needs).
    pub fn takes(&self, value_message: &[u8]) -> bool {
        HEAD + ENTRY_PREFIX + value_message.len() <= self.chunk
    }

    /// Adds a value message (one [`Bundler::takes`]) for `to`; when the host's bundle is full,
    /// `send` is given it first.
    pub fn add(
        &mut self,
        to: SocketAddr,
        channel: u64,
        value_message: &[u8],
        mut send: impl FnMut(SocketAddr, Outgoing<'_>),
    ) {
        let chunk = self.chunk;
        let at = match self.open.iter().position(|(a, _)| *a == to) {
            Some(at) => at,
            None => {
                self.open.push((to, Bundle::new(chunk)));
                self.open.len() - 1
            }
        };
        let bundle = &mut self.open[at].1;
        if !bundle.fits(value_message, chunk) {
            if let Some(out) = bundle.outgoing() {
                send(to, out);
            }
            bundle.clear();
        }
        bundle.push(channel, value_message);
    }

    /// Gives `send` every bundle not sent yet, and empties them.
    pub fn flush(&mut self, mut send: impl FnMut(SocketAddr, Outgoing<'_>)) {
        for (to, bundle) in &mut self.open {
            if let Some(out) = bundle.outgoing() {
                send(*to, out);
            }
            bundle.clear();
        }
        // Hosts come and go: keep the buffers of a few.
        self.open.truncate(8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value_message(name: &str, sequence: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        wire::encode_value(
            &Value {
                name,
                sequence,
                write_time_ns: 1,
                schema_hash: 2,
                series: 3,
                writer_first: 4,
                bytes,
            },
            &mut out,
        );
        out
    }

    /// Everything `flush` and `add` sent, per host: (channel, message, values).
    fn collect(
        sent: &mut Vec<(SocketAddr, u64, Vec<u8>, usize)>,
    ) -> impl FnMut(SocketAddr, Outgoing<'_>) + '_ {
        |to, out| sent.push((to, out.channel, out.message.to_vec(), out.values))
    }

    #[test]
    fn one_value_for_a_host_goes_alone_on_its_channel() {
        let a: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        let m = value_message("/a", 1, &[9; 64]);
        let mut b = Bundler::new(1400);
        let mut sent = Vec::new();
        b.add(a, 77, &m, collect(&mut sent));
        b.flush(collect(&mut sent));
        assert_eq!(sent, vec![(a, 77, m, 1)]);
        // Flushed: nothing goes twice.
        b.flush(collect(&mut sent));
        assert_eq!(sent.len(), 1);
    }

    #[test]
    fn values_for_a_host_fill_bundles_of_at_most_a_chunk() {
        let a: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        let c: SocketAddr = "10.0.0.2:7000".parse().unwrap();
        let chunk = 1400;
        let mut b = Bundler::new(chunk);
        let mut sent = Vec::new();
        let messages: Vec<Vec<u8>> = (0..30)
            .map(|i| value_message(&format!("/bench/rate/{i}"), i + 1, &[i as u8; 64]))
            .collect();
        for m in &messages {
            b.add(a, 5, m, collect(&mut sent));
            b.add(c, 5, m, collect(&mut sent));
        }
        b.flush(collect(&mut sent));
        for host in [a, c] {
            let mut got = Vec::new();
            for (_, channel, message, values) in sent.iter().filter(|s| s.0 == host) {
                assert_eq!(*channel, BUNDLE_CHANNEL);
                assert!(message.len() <= chunk, "{}", message.len());
                let decoded = match wire::decode_message(message).unwrap() {
                    Message::Values(v) => v,
                    other => panic!("{other:?}"),
                };
                assert_eq!(decoded.len(), *values);
                got.extend(decoded.iter().map(|v| (v.name.to_string(), v.sequence)));
            }
            let want: Vec<(String, u64)> = (0..30)
                .map(|i| (format!("/bench/rate/{i}"), i + 1))
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn a_value_too_large_for_a_bundle_is_not_taken() {
        let b = Bundler::new(200);
        assert!(b.takes(&value_message("/a", 1, &[0; 100])));
        assert!(!b.takes(&value_message("/a", 1, &[0; 200])));
    }

    #[test]
    fn malformed_bundles_are_refused() {
        let m = value_message("/a", 1, b"xyz");
        let mut bundle = Bundle::new(1400);
        bundle.push(9, &m);
        bundle.push(9, &m);
        let good = bundle.body.clone();
        assert_eq!(Values::decode(&good).unwrap().len(), 2);
        // Every cut is refused, never read past.
        for cut in 0..good.len() {
            assert!(Values::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        // A count that does not match the entries.
        let mut wrong = good.clone();
        wrong[1] = 3;
        assert_eq!(Values::decode(&wrong).unwrap_err(), Drop::Malformed);
        // No entries.
        assert_eq!(
            Values::decode(&[wire::KIND_VALUES, 0, 0]).unwrap_err(),
            Drop::Malformed
        );
        // An entry that is not a value: a bundle in a bundle.
        let mut nested = Bundle::new(1400);
        nested.push(9, &good);
        assert_eq!(Values::decode(&nested.body).unwrap_err(), Drop::Malformed);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// What a bundler packs, for any values and chunk, decodes to the same values in the
        /// same order, each message within its chunk.
        #[test]
        fn bundles_round_trip(
            sizes in proptest::collection::vec(0usize..300, 1..60),
            chunk in 64usize..2000,
        ) {
            let to: SocketAddr = "10.0.0.1:7000".parse().unwrap();
            let mut b = Bundler::new(chunk);
            let mut sent = Vec::new();
            let mut want = Vec::new();
            for (i, size) in sizes.iter().enumerate() {
                let m = value_message(&format!("/v/{i}"), i as u64, &vec![i as u8; *size]);
                if b.takes(&m) {
                    b.add(to, wire::channel_of(&format!("/v/{i}")), &m, collect(&mut sent));
                    want.push(i as u64);
                }
            }
            b.flush(collect(&mut sent));
            let mut got = Vec::new();
            for (_, channel, message, values) in &sent {
                prop_assert!(message.len() <= chunk);
                match wire::decode_message(message).unwrap() {
                    Message::Values(v) => {
                        prop_assert_eq!(*channel, BUNDLE_CHANNEL);
                        prop_assert_eq!(v.len(), *values);
                        got.extend(v.iter().map(|v| v.sequence));
                    }
                    Message::Value(v) => {
                        prop_assert_eq!(*channel, wire::channel_of(v.name));
                        got.push(v.sequence);
                    }
                    other => prop_assert!(false, "{:?}", other),
                }
            }
            prop_assert_eq!(got, want);
        }

        /// A bundle with bytes flipped is refused or decodes whole: never a panic, and never
        /// fewer or more values than it claims.
        #[test]
        fn mutated_bundles_never_panic(
            count in 1usize..6,
            flip in proptest::collection::vec((0usize..400, any::<u8>()), 1..6),
        ) {
            let mut bundle = Bundle::new(1400);
            for i in 0..count {
                bundle.push(1, &value_message(&format!("/m/{i}"), i as u64, &[1; 20]));
            }
            let mut bytes = bundle.body.clone();
            for (i, b) in flip {
                if let Some(x) = bytes.get_mut(i) {
                    *x ^= b;
                }
            }
            if let Ok(values) = Values::decode(&bytes) {
                prop_assert_eq!(values.iter().count(), values.len());
            }
        }
    }
}
