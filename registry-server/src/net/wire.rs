//! The datagram format between registry servers. Pure functions over bytes: decoding never
//! panics and never allocates more than the input justifies (fuzzed in `fuzz/`, property-tested
//! below).
//!
//! Every datagram is one fragment of one message; a message that fits is a single fragment.
//!
//! ```text
//! 0   magic "BTNW"            4   version (VERSION)    5  flags (bit 0: MAC trailer present)
//! 6   reserved u16 = 0        8   domain (FNV-1a of the domain name)
//! 16  sender (FNV-1a of the sender's host name)        24 session (sender's start, ns)
//! 32  packet (per-sender counter: replay window)       40 channel (0: announce; else slot)
//! 48  message (per-sender counter: newer replaces older)
//! 56  total message length u32    60 offset of this fragment u32
//! 64  chunk (fragment size every fragment but the last uses) u32   68 body length u32
//! 72  body                        then, if flag 0: a 16-byte keyed MAC of everything before it
//! ```
//!
//! All integers little-endian. A message body starts with a kind byte: `1` announce (bincode
//! of [`Announce`]), `2` value (fixed fields, then the name, then the raw value bytes, so that
//! a large value is not encoded byte by byte), `3` schema (the name's length and the name, then
//! `Schema::to_bytes` of the type a host publishes it with: sent to a host that asks for it,
//! `Want::schema`), `4` values (several value messages for one host in one datagram, on the
//! bundle channel: `bundle.rs`).

use serde::{Deserialize, Serialize};

use super::bundle::{Values, BUNDLE_CHANNEL};

pub const MAGIC: [u8; 4] = *b"BTNW";
/// Version 5: a publication is announced without its schema (a mirror stores the schema of the
/// subscribers it is made for, whose hash matched the announced one); a wanted name carries
/// the series of the mirror that wants it (`Want`). Version 6: a publication whose publisher is
/// gone is announced while its host keeps the value (`PubInfo::kept`). Version 7: a host asks
/// for a publication's schema (`Want::schema`) and is sent it (`Message::Schema`). Version 8: a
/// value says which publisher wrote it (`Value::writer_first`). Version 9: several values in one
/// datagram (`Message::Values`, `bundle.rs`).
pub const VERSION: u8 = 9;
pub const HEADER_LEN: usize = 72;
pub const MAC_LEN: usize = 16;
pub const FLAG_MAC: u8 = 1;
/// Bytes of IPv4 and UDP headers, subtracted from the MTU to size fragments.
pub const IP_UDP_OVERHEAD: usize = 28;
/// Channel of announcements; value channels are the slot name's hash, never 0 (nor
/// `bundle::BUNDLE_CHANNEL`).
pub const ANNOUNCE_CHANNEL: u64 = 0;

/// Most parts one announcement may be cut into (about 5 MB of publications at the default
/// MTU, far beyond any robot); a receiver holds at most this many parts per host, and at most
/// `announce::MAX_HELD_BYTES` of them.
pub const MAX_ANNOUNCE_PARTS: u16 = 4096;

const KIND_ANNOUNCE: u8 = 1;
pub const KIND_VALUE: u8 = 2;
const KIND_SCHEMA: u8 = 3;
pub const KIND_VALUES: u8 = 4;
/// A value message: kind, sequence, write time, schema hash, series, writer's first sequence,
/// name length.
const VALUE_FIXED: usize = 1 + 8 + 8 + 8 + 8 + 8 + 2;

/// Why a datagram was dropped (or a value not sent); each has a counter in the registry's
/// statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Drop {
    /// Shorter than its header or its declared lengths.
    Truncated,
    /// Not ours, or inconsistent fields.
    Malformed,
    /// A message longer than this registry accepts.
    Oversized,
    /// Another domain's datagram.
    OtherDomain,
    /// Our own datagram, looped back.
    Own,
    /// No MAC, but this registry requires one.
    Unauthenticated,
    /// A MAC that does not verify (wrong key or altered), or a MAC this registry cannot check.
    BadMac,
    /// A packet number seen before, or from an older session of the sender.
    Replayed,
    /// A fragment of a message older than one already being reassembled or delivered.
    Stale,
    /// An incomplete message evicted to keep reassembly memory bounded.
    Evicted,
    /// A value for a slot this registry does not mirror (or not from that host, or of another
    /// series of its slot than the one announced).
    Unexpected,
    /// A value older than the one the mirror holds (the same one counts as unchanged).
    Older,
    /// The sender is a loopback address.
    Loopback,
    /// An incomplete message replaced by a newer one of the same channel (the older value is of
    /// no use any more: a fragment of it was lost, or the newer came too soon).
    Superseded,
    /// A local value larger than `--max-value`, not sent (once per value and subscribing host).
    TooLargeToSend,
}

impl Drop {
    pub const ALL: [Drop; 15] = [
        Drop::Truncated,
        Drop::Malformed,
        Drop::Oversized,
        Drop::OtherDomain,
        Drop::Own,
        Drop::Unauthenticated,
        Drop::BadMac,
        Drop::Replayed,
        Drop::Stale,
        Drop::Evicted,
        Drop::Unexpected,
        Drop::Older,
        Drop::Loopback,
        Drop::Superseded,
        Drop::TooLargeToSend,
    ];

    /// Position in `ALL` (which lists the causes in declaration order; a test holds it so).
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Drop::Truncated => "truncated",
            Drop::Malformed => "malformed",
            Drop::Oversized => "oversized",
            Drop::OtherDomain => "other_domain",
            Drop::Own => "own",
            Drop::Unauthenticated => "unauthenticated",
            Drop::BadMac => "bad_mac",
            Drop::Replayed => "replayed",
            Drop::Stale => "stale",
            Drop::Evicted => "evicted",
            Drop::Unexpected => "unexpected",
            Drop::Older => "older",
            Drop::Loopback => "loopback",
            Drop::Superseded => "superseded",
            Drop::TooLargeToSend => "too_large_to_send",
        }
    }
}

/// The fixed header of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub flags: u8,
    pub domain: u64,
    pub sender: u64,
    pub session: u64,
    pub packet: u64,
    pub channel: u64,
    pub message: u64,
    pub total: u32,
    pub offset: u32,
    pub chunk: u32,
    pub body_len: u32,
}

/// A decoded datagram, borrowing its input.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    pub header: Header,
    pub body: &'a [u8],
    /// Everything the MAC covers (header and body).
    pub signed: &'a [u8],
    pub mac: Option<&'a [u8]>,
}

impl Datagram<'_> {
    /// Index of this fragment within its message.
    pub fn fragment(&self) -> u32 {
        self.header.offset / self.header.chunk
    }

    pub fn fragments(&self) -> u32 {
        self.header.total.div_ceil(self.header.chunk).max(1)
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// The wire version and domain of a datagram of another wire version than this one's (`None`
/// for this version's, or for what is no Baton datagram): the magic, version and domain fields
/// keep their places across versions.
pub fn other_version(bytes: &[u8]) -> Option<(u8, u64)> {
    (bytes.len() >= 16 && bytes[0..4] == MAGIC && bytes[4] != VERSION)
        .then(|| (bytes[4], u64_at(bytes, 8)))
}

/// Decodes and checks one datagram. `max_message` bounds the declared message length.
pub fn decode_datagram(bytes: &[u8], max_message: u32) -> Result<Datagram<'_>, Drop> {
    if bytes.len() < HEADER_LEN {
        return Err(Drop::Truncated);
    }
    if bytes[0..4] != MAGIC || bytes[4] != VERSION || bytes[6] != 0 || bytes[7] != 0 {
        return Err(Drop::Malformed);
    }
    let flags = bytes[5];
    if flags & !FLAG_MAC != 0 {
        return Err(Drop::Malformed);
    }
    let header = Header {
        flags,
        domain: u64_at(bytes, 8),
        sender: u64_at(bytes, 16),
        session: u64_at(bytes, 24),
        packet: u64_at(bytes, 32),
        channel: u64_at(bytes, 40),
        message: u64_at(bytes, 48),
        total: u32_at(bytes, 56),
        offset: u32_at(bytes, 60),
        chunk: u32_at(bytes, 64),
        body_len: u32_at(bytes, 68),
    };
    let mac_len = if flags & FLAG_MAC != 0 { MAC_LEN } else { 0 };
    let body_len = header.body_len as usize;
    let expected = HEADER_LEN + body_len + mac_len;
    if bytes.len() < expected {
        return Err(Drop::Truncated);
    }
    if bytes.len() > expected {
        return Err(Drop::Malformed);
    }
    if header.total > max_message {
        return Err(Drop::Oversized);
    }
    // Fragment geometry: offset on a chunk boundary, every fragment a full chunk but the last,
    // which ends the message exactly.
    let (total, offset, chunk) = (
        u64::from(header.total),
        u64::from(header.offset),
        u64::from(header.chunk),
    );
    if chunk == 0 || total == 0 || offset % chunk != 0 || offset >= total {
        return Err(Drop::Malformed);
    }
    if body_len as u64 != chunk.min(total - offset) {
        return Err(Drop::Malformed);
    }
    let signed = &bytes[..HEADER_LEN + body_len];
    Ok(Datagram {
        header,
        body: &bytes[HEADER_LEN..HEADER_LEN + body_len],
        signed,
        mac: (mac_len > 0).then(|| &bytes[HEADER_LEN + body_len..]),
    })
}

/// Appends a datagram's header (`HEADER_LEN` bytes) to `out`.
pub fn encode_header(h: &Header, out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(h.flags);
    out.extend_from_slice(&[0, 0]);
    for v in [
        h.domain, h.sender, h.session, h.packet, h.channel, h.message,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [h.total, h.offset, h.chunk, h.body_len] {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Fewest payload bytes a fragment carries: a smaller MTU is refused.
const LEAST_CHUNK: usize = 64;

/// Payload bytes per fragment for a path MTU (`None` if the MTU leaves no room).
pub fn chunk_for_mtu(mtu: usize, authenticated: bool) -> Option<usize> {
    mtu.checked_sub(least_mtu(authenticated) - LEAST_CHUNK)
        .filter(|c| *c >= LEAST_CHUNK)
}

/// The smallest MTU a datagram fits in (its headers, its MAC with a key, `LEAST_CHUNK` bytes).
pub const fn least_mtu(authenticated: bool) -> usize {
    let mac = if authenticated { MAC_LEN } else { 0 };
    IP_UDP_OVERHEAD + HEADER_LEN + mac + LEAST_CHUNK
}

/// One public publication as announced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PubInfo {
    pub name: String,
    pub type_name: String,
    pub schema_hash: u64,
    pub capacity: u64,
    /// Whether the publishing process still runs, and wrote the value the slot holds.
    pub writer_alive: bool,
    /// The slot's sequence from which its values are the running publisher's (0: all): a
    /// mirror tells by it whether the value it holds is that publisher's or an earlier one's.
    pub writer_first: u64,
    /// Which segment of its name the slot is (`Slot::series`): one made anew numbers its
    /// values from 1 again.
    pub series: u64,
    /// No process publishes the name on its host any more: the slot keeps the last value of
    /// one that is gone, for subscribers that come later, here or on other hosts. Never a
    /// conflict: a publisher on any host takes the name.
    pub kept: bool,
    /// When the kept value was written (its host's clock, ns since the epoch); 0 for a
    /// publication. Of two hosts that each keep a value, the newer is followed.
    pub kept_written_ns: u64,
}

/// What a registry tells the others, periodically and whenever it changes: one part of it, cut
/// to fit a datagram (see `announce.rs`). It carries no address: peers answer to the
/// datagram's source address and the announced `data_port`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announce {
    pub host: String,
    pub data_port: u16,
    /// How often to expect the next announcement, in milliseconds.
    pub interval_ms: u32,
    /// Grows whenever what the host announces changes; the parts of one generation are the
    /// same at every repetition.
    pub generation: u64,
    /// This part's index, below `parts`.
    pub part: u16,
    /// How many parts this generation has (at least one).
    pub parts: u16,
    pub publications: Vec<PubInfo>,
    /// Public names this host subscribes to without publishing them.
    pub wants: Vec<Want>,
}

/// A public name a host asks for, and which slot of that name the host holds (`Slot::series`;
/// 0 while it holds none; a mirror, or a slot kept there that becomes the mirror). A host that
/// makes its mirror anew (it had forgotten it once unused, or found it damaged) asks with
/// another series, and the publisher's host then sends it the
/// current value at once, as it does to a host that starts asking: the new mirror holds
/// nothing, and the publisher may not write again for a long time.
///
/// With `schema`, the host asks only for the schema of the publication (a tool there reads the
/// name, and nothing there knows its type yet): no values are sent for such a want.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Want {
    pub name: String,
    pub mirror: u64,
    pub schema: bool,
}

/// One value of a slot, as reflected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value<'a> {
    pub name: &'a str,
    pub sequence: u64,
    pub write_time_ns: u64,
    pub schema_hash: u64,
    /// The series of the slot the value was read from (`Slot::series`): `sequence` counts
    /// within it.
    pub series: u64,
    /// The first sequence of the publisher that wrote it, as `PubInfo::writer_first` (but
    /// never 0: 1 for every value), when that publisher was running as it was read; 0 when it
    /// was not (a kept value, refreshed). A receiver tells by it a publisher restarted on this
    /// host before the next announcement says so.
    pub writer_first: u64,
    pub bytes: &'a [u8],
}

/// The schema a host publishes a name with, for a host that asked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemaOffer<'a> {
    pub name: &'a str,
    /// `Schema::to_bytes`.
    pub schema: &'a [u8],
}

#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    Announce(Announce),
    Value(Value<'a>),
    Schema(SchemaOffer<'a>),
    /// A bundle of values (`bundle.rs`), checked whole.
    Values(Values<'a>),
}

pub fn encode_announce(a: &Announce, out: &mut Vec<u8>) -> Result<(), String> {
    let mut body = Vec::new();
    bus::codec::encode_into(a, &mut body).map_err(|e| e.to_string())?;
    out.clear();
    out.push(KIND_ANNOUNCE);
    out.extend_from_slice(&body);
    Ok(())
}

pub fn encode_value(v: &Value<'_>, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(VALUE_FIXED + v.name.len() + v.bytes.len());
    out.push(KIND_VALUE);
    out.extend_from_slice(&v.sequence.to_le_bytes());
    out.extend_from_slice(&v.write_time_ns.to_le_bytes());
    out.extend_from_slice(&v.schema_hash.to_le_bytes());
    out.extend_from_slice(&v.series.to_le_bytes());
    out.extend_from_slice(&v.writer_first.to_le_bytes());
    out.extend_from_slice(&(v.name.len() as u16).to_le_bytes());
    out.extend_from_slice(v.name.as_bytes());
    out.extend_from_slice(v.bytes);
}

pub fn encode_schema(offer: &SchemaOffer<'_>, out: &mut Vec<u8>) {
    out.clear();
    out.push(KIND_SCHEMA);
    out.extend_from_slice(&(offer.name.len() as u16).to_le_bytes());
    out.extend_from_slice(offer.name.as_bytes());
    out.extend_from_slice(offer.schema);
}

/// Decodes a reassembled message.
pub fn decode_message(bytes: &[u8]) -> Result<Message<'_>, Drop> {
    match bytes.first() {
        Some(&KIND_ANNOUNCE) => bus::codec::decode::<Announce>(&bytes[1..])
            .ok()
            .filter(|a| a.part < a.parts && a.parts <= MAX_ANNOUNCE_PARTS)
            .map(Message::Announce)
            .ok_or(Drop::Malformed),
        Some(&KIND_VALUE) => {
            if bytes.len() < VALUE_FIXED {
                return Err(Drop::Truncated);
            }
            let name_len = usize::from(u16::from_le_bytes([bytes[41], bytes[42]]));
            let rest = &bytes[VALUE_FIXED..];
            if rest.len() < name_len {
                return Err(Drop::Truncated);
            }
            let name = std::str::from_utf8(&rest[..name_len]).map_err(|_| Drop::Malformed)?;
            Ok(Message::Value(Value {
                name,
                sequence: u64_at(bytes, 1),
                write_time_ns: u64_at(bytes, 9),
                schema_hash: u64_at(bytes, 17),
                series: u64_at(bytes, 25),
                writer_first: u64_at(bytes, 33),
                bytes: &rest[name_len..],
            }))
        }
        Some(&KIND_SCHEMA) => {
            let Some(len) = bytes.get(1..3) else {
                return Err(Drop::Truncated);
            };
            let name_len = usize::from(u16::from_le_bytes([len[0], len[1]]));
            let rest = &bytes[3..];
            if rest.len() < name_len {
                return Err(Drop::Truncated);
            }
            let name = std::str::from_utf8(&rest[..name_len]).map_err(|_| Drop::Malformed)?;
            Ok(Message::Schema(SchemaOffer {
                name,
                schema: &rest[name_len..],
            }))
        }
        Some(&KIND_VALUES) => Values::decode(bytes).map(Message::Values),
        Some(_) => Err(Drop::Malformed),
        None => Err(Drop::Truncated),
    }
}

/// FNV-1a, 64 bit (the bus's schema hash function): stable across builds and machines (unlike
/// std's hasher), for domain, host and channel identifiers. Not a security measure; the MAC is.
pub use bus::schema::fnv1a64 as fnv1a;

/// The channel of a slot's values: never the announce channel, nor the bundles'.
pub fn channel_of(name: &str) -> u64 {
    fnv1a(name.as_bytes()).clamp(1, BUNDLE_CHANNEL - 1)
}

/// The channel of a slot's schema: apart from its values' (a schema sent between two
/// fragments of a value would otherwise replace the incomplete value), never the announce
/// channel, nor the bundles'.
pub fn schema_channel_of(name: &str) -> u64 {
    fnv1a(format!("schema {name}").as_bytes()).clamp(1, BUNDLE_CHANNEL - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every drop cause `bus-inspect stats` prints is explained in docs/debugging.md.
    #[test]
    fn every_drop_cause_is_explained_in_the_debugging_guide() {
        let guide = include_str!("../../../docs/debugging.md");
        for cause in Drop::ALL {
            let row = format!("| `{}` |", cause.name());
            assert!(guide.contains(&row), "docs/debugging.md has no row {row}");
        }
    }

    #[test]
    fn drop_causes_are_listed_in_declaration_order() {
        for (i, cause) in Drop::ALL.iter().enumerate() {
            assert_eq!(cause.index(), i, "{}", cause.name());
        }
    }

    fn header(total: u32, offset: u32, chunk: u32, body_len: u32) -> Header {
        Header {
            flags: 0,
            domain: 1,
            sender: 2,
            session: 3,
            packet: 4,
            channel: 5,
            message: 6,
            total,
            offset,
            chunk,
            body_len,
        }
    }

    fn datagram(h: &Header, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_header(h, &mut out);
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn round_trip_and_geometry_checks() {
        let d = datagram(&header(10, 0, 10, 10), &[7; 10]);
        let got = decode_datagram(&d, 100).unwrap();
        assert_eq!(got.header, header(10, 0, 10, 10));
        assert_eq!(got.body, &[7; 10]);
        assert_eq!(
            decode_datagram(&d[..d.len() - 1], 100).unwrap_err(),
            Drop::Truncated
        );
        assert_eq!(decode_datagram(&d, 5).unwrap_err(), Drop::Oversized);
        // Second fragment of 25 bytes in chunks of 10: 10 bytes at offset 10.
        let d = datagram(&header(25, 10, 10, 10), &[1; 10]);
        assert_eq!(decode_datagram(&d, 100).unwrap().fragment(), 1);
        // Last fragment must end the message exactly.
        let d = datagram(&header(25, 20, 10, 10), &[1; 10]);
        assert_eq!(decode_datagram(&d, 100).unwrap_err(), Drop::Malformed);
        // Offset not on a chunk boundary.
        let d = datagram(&header(25, 5, 10, 10), &[1; 10]);
        assert_eq!(decode_datagram(&d, 100).unwrap_err(), Drop::Malformed);
    }

    #[test]
    fn messages_round_trip() {
        let v = Value {
            name: "/a/b",
            sequence: 9,
            write_time_ns: 10,
            schema_hash: 11,
            series: 12,
            writer_first: 13,
            bytes: b"xyz",
        };
        let mut out = Vec::new();
        encode_value(&v, &mut out);
        assert_eq!(decode_message(&out).unwrap(), Message::Value(v));
        let a = Announce {
            host: "h".into(),
            data_port: 5,
            interval_ms: 100,
            generation: 4,
            part: 1,
            parts: 2,
            publications: vec![PubInfo {
                name: "/x".into(),
                type_name: "T".into(),
                schema_hash: 3,
                capacity: 64,
                writer_alive: true,
                writer_first: 7,
                series: 9,
                kept: false,
                kept_written_ns: 0,
            }],
            wants: vec![Want {
                name: "/y".into(),
                mirror: 4,
                schema: true,
            }],
        };
        encode_announce(&a, &mut out).unwrap();
        assert_eq!(decode_message(&out).unwrap(), Message::Announce(a));
        let offer = SchemaOffer {
            name: "/z",
            schema: b"schema bytes",
        };
        encode_schema(&offer, &mut out);
        assert_eq!(decode_message(&out).unwrap(), Message::Schema(offer));
        for cut in 0..5 {
            assert_eq!(decode_message(&out[..cut]).unwrap_err(), Drop::Truncated);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Arbitrary bytes never panic either decoder.
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(d) = decode_datagram(&bytes, 1 << 20) {
                let _ = decode_message(d.body);
            }
            let _ = decode_message(&bytes);
        }

        /// A valid header followed by arbitrary (possibly mutated) bytes never panics, and
        /// an accepted datagram's body lies within the input.
        #[test]
        fn mutated_datagrams_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..300),
            flip in proptest::collection::vec((0usize..400, any::<u8>()), 0..8),
            chunk in 1u32..400,
        ) {
            let total = body.len().max(1) as u32;
            let len = chunk.min(total);
            let mut bytes = datagram(&header(total, 0, chunk, len), &body[..len.min(body.len() as u32) as usize]);
            for (i, b) in flip {
                if let Some(x) = bytes.get_mut(i) {
                    *x ^= b;
                }
            }
            if let Ok(d) = decode_datagram(&bytes, 1 << 20) {
                prop_assert!(d.body.len() <= bytes.len());
                prop_assert!(d.header.offset < d.header.total);
                let _ = decode_message(d.body);
            }
        }

        /// Encoded values decode to themselves.
        #[test]
        fn values_round_trip(name in "/[a-z]{1,20}", seq: u64, t: u64, h: u64, series: u64,
                             writer_first: u64,
                             bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let v = Value {
                name: &name, sequence: seq, write_time_ns: t, schema_hash: h, series,
                writer_first, bytes: &bytes,
            };
            let mut out = Vec::new();
            encode_value(&v, &mut out);
            prop_assert_eq!(decode_message(&out).unwrap(), Message::Value(v));
        }
    }
}
