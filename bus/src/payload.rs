//! One slot buffer's payload, as the seqlock in `slot` hands it out for the length of one read
//! or one write: `PayloadView` copies or decodes the value straight out of shared memory, and
//! `PayloadSpace` copies or encodes it straight in. Encoding and decoding in place is what
//! keeps a large serde value at one copy per side (the encoder writes the slot, the decoder
//! reads it) instead of two (through a private buffer first).
//!
//! Everything here touches shared memory only through `Mapping`'s word-sized atomic copies, so a
//! racing writer can make a reader see a mix of two values but never undefined behaviour; the
//! seqlock re-check after the read decides whether what was read is kept.
//!
//! Invariant kept by both streams: every access to shared memory starts at an 8-byte aligned
//! offset and covers whole words that lie inside the buffer (slot capacities are multiples of
//! 64), so the staging below exists to turn bincode's field-sized reads and writes into aligned
//! word copies.

use bincode::de::read::Reader;
use bincode::enc::write::Writer;
use bincode::error::{DecodeError, EncodeError};

use crate::shm::Mapping;

/// Bytes the writer stages before writing them out (a multiple of 8); pieces at least this
/// large (byte buffers, long strings) go straight from the value into shared memory.
const STAGE: usize = 4096;
/// Bytes the reader loads at a time for bincode's field-sized reads (a multiple of 8); a read
/// of at least this much goes straight from shared memory into the value, so that a large
/// piece is copied once, not once into the window and once more out of it.
const WINDOW: usize = 256;

/// The complete value in one buffer, valid until the seqlock re-check.
pub struct PayloadView<'a> {
    map: &'a Mapping,
    off: usize,
    len: usize,
}

impl<'a> PayloadView<'a> {
    pub(crate) fn new(map: &'a Mapping, off: usize, len: usize) -> Self {
        debug_assert!(off % 8 == 0);
        PayloadView { map, off, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the whole value into `dst`, which must be exactly `len()` bytes.
    pub fn copy_to(&self, dst: &mut [u8]) {
        assert_eq!(
            dst.len(),
            self.len,
            "copy_to needs a buffer of the value's size"
        );
        self.map.copy_out(self.off, dst);
    }

    /// A bincode reader over the value's bytes; `stage` is reused storage.
    pub fn reader<'s>(&self, stage: &'s mut Vec<u8>) -> PayloadReader<'s>
    where
        'a: 's,
    {
        if stage.len() < WINDOW {
            stage.resize(WINDOW, 0);
        }
        PayloadReader {
            map: self.map,
            off: self.off,
            len: self.len,
            pos: 0,
            stage,
            stage_start: 0,
            stage_len: 0,
        }
    }
}

/// Reads a value out of a buffer for bincode. Holds a window of the payload
/// (`stage_start..stage_start + stage_len`, `stage_start` aligned, at most `WINDOW` bytes) and
/// copies the part of a large read beyond the window straight from shared memory into the
/// caller's buffer (the window ends on a word boundary, so that copy is aligned).
pub struct PayloadReader<'a> {
    map: &'a Mapping,
    off: usize,
    len: usize,
    pos: usize,
    stage: &'a mut Vec<u8>,
    stage_start: usize,
    stage_len: usize,
}

impl PayloadReader<'_> {
    /// Bytes of the value read so far.
    #[inline]
    pub fn consumed(&self) -> usize {
        self.pos
    }

    /// Loads the window that starts at the word holding `pos`.
    fn refill(&mut self) {
        self.stage_start = self.pos & !7;
        self.stage_len = (self.len - self.stage_start).min(WINDOW);
        self.map.copy_out(
            self.off + self.stage_start,
            &mut self.stage[..self.stage_len],
        );
    }
}

impl Reader for PayloadReader<'_> {
    #[inline]
    fn read(&mut self, out: &mut [u8]) -> Result<(), DecodeError> {
        // Fast path: the field lies in the staged window (every field of a small value).
        if let Some(from) = self.pos.checked_sub(self.stage_start) {
            if from + out.len() <= self.stage_len {
                out.copy_from_slice(&self.stage[from..from + out.len()]);
                self.pos += out.len();
                return Ok(());
            }
        }
        self.read_slow(out)
    }
}

impl PayloadReader<'_> {
    /// Appends the next `n` bytes to `dst` without zeroing its new room first (a decoded
    /// string or byte buffer: `codec::byte_strings`). Fails, appending nothing, when fewer than
    /// `n` are left.
    pub fn append_to(&mut self, n: usize, dst: &mut Vec<u8>) -> Result<(), DecodeError> {
        self.take(n, dst)
    }

    fn read_slow(&mut self, out: &mut [u8]) -> Result<(), DecodeError> {
        self.take(out.len(), &mut Filling { out, done: 0 })
    }

    /// Hands the next `n` bytes to `sink`: what lies in the window from there, a large piece
    /// at a word boundary straight from shared memory (copied once, not through the window).
    fn take(&mut self, n: usize, sink: &mut impl Sink) -> Result<(), DecodeError> {
        let left = self.len - self.pos;
        if n > left {
            return Err(DecodeError::UnexpectedEnd {
                additional: n - left,
            });
        }
        sink.expect(n);
        let mut done = 0;
        while done < n {
            let staged_end = self.stage_start + self.stage_len;
            let k = if self.pos >= self.stage_start && self.pos < staged_end {
                let from = self.pos - self.stage_start;
                let k = (staged_end - self.pos).min(n - done);
                sink.staged(&self.stage[from..from + k]);
                k
            } else if self.pos % 8 == 0 && n - done >= WINDOW {
                let k = n - done;
                sink.straight(self.map, self.off + self.pos, k);
                k
            } else {
                self.refill();
                0
            };
            done += k;
            self.pos += k;
        }
        Ok(())
    }
}

/// Where `PayloadReader::take` puts what it reads.
trait Sink {
    /// `n` bytes are coming (checked to be there).
    fn expect(&mut self, _n: usize) {}
    /// Bytes from the window.
    fn staged(&mut self, bytes: &[u8]);
    /// `n` bytes at `off` of `map`, an aligned offset.
    fn straight(&mut self, map: &Mapping, off: usize, n: usize);
}

/// bincode's buffer for one read, filled front to back.
struct Filling<'o> {
    out: &'o mut [u8],
    done: usize,
}

impl Sink for Filling<'_> {
    fn staged(&mut self, bytes: &[u8]) {
        self.out[self.done..self.done + bytes.len()].copy_from_slice(bytes);
        self.done += bytes.len();
    }

    fn straight(&mut self, map: &Mapping, off: usize, n: usize) {
        map.copy_out(off, &mut self.out[self.done..self.done + n]);
        self.done += n;
    }
}

/// The end of a vector, its room reserved (`append_to`).
impl Sink for Vec<u8> {
    fn expect(&mut self, n: usize) {
        self.reserve(n);
    }

    fn staged(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn straight(&mut self, map: &Mapping, off: usize, n: usize) {
        map.append_out(off, n, self);
    }
}

/// The buffer being written, during a write.
pub struct PayloadSpace<'a> {
    map: &'a Mapping,
    off: usize,
    capacity: usize,
}

impl<'a> PayloadSpace<'a> {
    pub(crate) fn new(map: &'a Mapping, off: usize, capacity: usize) -> Self {
        debug_assert!(off % 8 == 0);
        PayloadSpace { map, off, capacity }
    }

    /// Copies `bytes` in; the caller checked that they fit (`Mapping` still refuses to write
    /// outside the segment).
    pub fn copy_from(&self, bytes: &[u8]) {
        debug_assert!(bytes.len() <= self.capacity, "value larger than the buffer");
        self.map.copy_in(self.off, bytes);
    }

    /// A bincode writer that refuses to go past `limit` bytes (at most the buffer's capacity);
    /// `stage` is reused storage.
    pub fn writer<'s>(&self, limit: usize, stage: &'s mut Vec<u8>) -> PayloadWriter<'s>
    where
        'a: 's,
    {
        stage.clear();
        PayloadWriter {
            map: self.map,
            off: self.off,
            limit: limit.min(self.capacity),
            pos: 0,
            stage,
            overflowed: false,
        }
    }
}

/// Writes a value into a buffer for bincode. The stage holds the bytes
/// `pos - stage.len()..pos`, and `pos - stage.len()` is always a multiple of 8, so every flush
/// is an aligned word copy.
pub struct PayloadWriter<'a> {
    map: &'a Mapping,
    off: usize,
    limit: usize,
    pos: usize,
    stage: &'a mut Vec<u8>,
    overflowed: bool,
}

impl PayloadWriter<'_> {
    /// Writes out what is staged and returns the value's length.
    pub fn finish(mut self) -> usize {
        self.flush(self.stage.len());
        self.pos
    }

    /// Whether the encoder tried to write past the limit (the value does not fit).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Writes the first `n` staged bytes (a multiple of 8, or everything) and drops them from
    /// the stage.
    fn flush(&mut self, n: usize) {
        if n > 0 {
            let start = self.pos - self.stage.len();
            self.map.copy_in(self.off + start, &self.stage[..n]);
            self.stage.drain(..n);
        }
    }
}

impl Writer for PayloadWriter<'_> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        if bytes.len() > self.limit - self.pos {
            self.overflowed = true;
            return Err(EncodeError::UnexpectedEnd);
        }
        if bytes.len() < STAGE {
            self.stage.extend_from_slice(bytes);
            self.pos += bytes.len();
            if self.stage.len() >= STAGE {
                self.flush(self.stage.len() / 8 * 8);
            }
            return Ok(());
        }
        // A large piece: complete the staged run to a word boundary, write it out, then copy
        // the piece's whole words straight in and stage its tail.
        let pad = (8 - self.stage.len() % 8) % 8;
        let (head, rest) = bytes.split_at(pad);
        self.stage.extend_from_slice(head);
        self.pos += pad;
        self.flush(self.stage.len());
        let direct = rest.len() / 8 * 8;
        self.map.copy_in(self.off + self.pos, &rest[..direct]);
        self.pos += direct;
        self.stage.extend_from_slice(&rest[direct..]);
        self.pos += rest.len() - direct;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;
    use crate::schema::tests::Blob;

    /// A mapping with a payload area at offset 64 (aligned, like a slot buffer), removed on
    /// drop.
    struct Area {
        name: String,
        map: Mapping,
    }

    impl Area {
        fn new(tag: &str, capacity: usize) -> Area {
            let name = format!("/baton.payload-{}-{tag}~x", std::process::id());
            let _ = crate::shm::unlink(&name);
            let map = Mapping::create(&name, 64 + capacity, None).expect("segment");
            Area { name, map }
        }

        fn space(&self, capacity: usize) -> PayloadSpace<'_> {
            PayloadSpace::new(&self.map, 64, capacity)
        }

        fn view(&self, len: usize) -> PayloadView<'_> {
            PayloadView::new(&self.map, 64, len)
        }
    }

    impl Drop for Area {
        fn drop(&mut self) {
            let _ = crate::shm::unlink(&self.name);
        }
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Mixed {
        flag: bool,
        name: String,
        blob: Blob,
        numbers: Vec<u16>,
        tail: u8,
    }

    fn mixed(name_len: usize, blob_len: usize, numbers: usize) -> Mixed {
        Mixed {
            flag: true,
            name: "n".repeat(name_len),
            blob: Blob((0..blob_len).map(|i| (i * 7 % 251) as u8).collect()),
            numbers: (0..numbers as u16).collect(),
            tail: 0xAB,
        }
    }

    #[test]
    fn values_round_trip_in_place_across_window_and_stage_edges() {
        let capacity = 64 * 1024;
        let area = Area::new("edges", capacity);
        let mut stage = Vec::new();
        // Lengths around the reader's window, the writer's stage and word boundaries, with an
        // odd-length name in front so that the large piece starts unaligned.
        for name_len in [0, 1, 3, 7] {
            for blob_len in [0, 1, 7, 8, 9, 255, 256, 257, 4095, 4096, 4097, 9000] {
                for numbers in [0, 3, 300] {
                    let value = mixed(name_len, blob_len, numbers);
                    let mut writer = area.space(capacity).writer(capacity, &mut stage);
                    codec::encode_to(&value, &mut writer).expect("fits");
                    let len = writer.finish();
                    let mut expected = Vec::new();
                    codec::encode_into(&value, &mut expected).expect("encode");
                    assert_eq!(len, expected.len());
                    let mut copied = vec![0u8; len];
                    area.view(len).copy_to(&mut copied);
                    assert_eq!(copied, expected, "bytes in place ({name_len}, {blob_len})");
                    let view = area.view(len);
                    let back: Mixed = codec::decode_from(
                        view.reader(&mut stage),
                        len,
                        codec::LengthPrefixes::Possible,
                    )
                    .expect("decode in place");
                    assert_eq!(back, value);
                }
            }
        }
    }

    /// Values large enough that their strings and byte buffers are appended straight from the
    /// slot (`PayloadReader::append_to`): from the window, then the aligned rest, with the
    /// blob starting at every offset within a word.
    #[test]
    fn large_values_decode_in_place_without_zeroing_across_alignments() {
        let capacity = (1 << 20) + 4096;
        let area = Area::new("large", capacity);
        let mut stage = Vec::new();
        for name_len in 0..8 {
            for blob_len in [64 << 10, (64 << 10) + 5, WINDOW * 3 + 1, 1 << 20] {
                let value = mixed(name_len, blob_len, 3);
                let mut writer = area.space(capacity).writer(capacity, &mut stage);
                codec::encode_to(&value, &mut writer).expect("fits");
                let len = writer.finish();
                let back: Mixed = codec::decode_from(
                    area.view(len).reader(&mut stage),
                    len,
                    codec::LengthPrefixes::Possible,
                )
                .expect("decode in place");
                assert!(back == value, "({name_len}, {blob_len})");
            }
        }
    }

    #[test]
    fn a_value_over_the_limit_is_refused_not_truncated() {
        let area = Area::new("limit", 8192);
        let mut stage = Vec::new();
        let value = mixed(3, 5000, 0);
        let mut writer = area.space(8192).writer(4096, &mut stage);
        assert!(codec::encode_to(&value, &mut writer).is_err());
        assert!(writer.overflowed());
        // An encoding error of another kind is not an overflow.
        let mut writer = area.space(8192).writer(4096, &mut stage);
        assert!(codec::encode_to(&mixed(1, 10, 1), &mut writer).is_ok());
        assert!(!writer.overflowed());
    }

    #[test]
    fn a_short_payload_is_a_decode_error() {
        let area = Area::new("short", 4096);
        let mut stage = Vec::new();
        let value = mixed(2, 600, 2);
        let mut writer = area.space(4096).writer(4096, &mut stage);
        codec::encode_to(&value, &mut writer).expect("fits");
        let len = writer.finish();
        for cut in [len - 1, len / 2, 3, 0] {
            let result: Result<Mixed, _> = codec::decode_from(
                area.view(cut).reader(&mut stage),
                cut,
                codec::LengthPrefixes::Possible,
            );
            assert!(result.is_err(), "decoding {cut} of {len} bytes");
        }
    }
}
