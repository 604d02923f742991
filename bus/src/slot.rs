//! The memory layout of one slot and the seqlock protocol that reads and writes it.
//!
//! A slot is one shared-memory segment:
//!
//! ```text
//! 0      static header: magic, version, sizes, offsets, schema hash, name   (written once)
//! 512    latest sequence (u64), notify word (u32), waiter count (u32)       (one cache line)
//! 576    writer pid, state, start time, origin host, origin sequence        (registry-maintained)
//! 1024   schema bytes (Schema::to_bytes)
//! B      `buffer_count` buffers, each: seq, len, write time (64 B) + `capacity` payload bytes
//! ```
//!
//! Protocol (one writer per slot, enforced by the registry; any number of readers):
//! the writer puts value `n` in buffer `n % buffer_count`: it stores `2n+1` (odd: being written)
//! in the buffer's seq, fences, copies the payload, stores `2n` (Release), then publishes `n` in
//! `latest` (Release). A reader loads `latest` (Acquire), checks the buffer's seq equals `2n`,
//! copies, fences (Acquire) and re-checks the seq; a change means the writer lapped it and it
//! retries. A writer killed mid-write leaves one buffer odd, but `latest` still names the previous
//! complete buffer, so readers never wait for a dead writer and never see a torn value. With four
//! buffers a reader is lapped only if the writer completes three whole values during one copy.
//!
//! Every static field is validated against the segment's real size when the slot is opened and
//! kept in `Layout`; afterwards only the atomics above are re-read, and each length read from
//! them is checked against the capacity before use.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::unistd::Gid;

use crate::error::{BusError, SegmentError};
use crate::futex;
use crate::names::SlotName;
use crate::payload::{PayloadSpace, PayloadView};
use crate::schema::{Schema, SchemaHash};
use crate::shm::Mapping;

pub const MAGIC: u64 = u64::from_le_bytes(*b"BATONSLT");
pub const VERSION: u32 = 1;
/// Buffers per slot; see the module comment for why four.
pub const BUFFER_COUNT: u32 = 4;
/// Largest capacity a slot may have (a hostile header cannot make us copy more).
pub const MAX_CAPACITY: u64 = 1 << 30;
/// Largest stored schema.
pub const MAX_SCHEMA_LEN: u64 = 1 << 20;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_HEADER_SIZE: usize = 12;
const OFF_TOTAL_SIZE: usize = 16;
const OFF_CAPACITY: usize = 24;
const OFF_BUFFER_COUNT: usize = 28;
const OFF_BUFFERS: usize = 32;
const OFF_STRIDE: usize = 40;
const OFF_SCHEMA_OFFSET: usize = 48;
const OFF_SCHEMA_LEN: usize = 52;
const OFF_SCHEMA_HASH: usize = 56;
const OFF_NAME_LEN: usize = 64;
const OFF_NAME: usize = 72;
const NAME_AREA: usize = 256;
const OFF_LATEST: usize = 512;
const OFF_NOTIFY: usize = 520;
const OFF_WAITERS: usize = 524;
const OFF_WRITER_PID: usize = 576;
const OFF_WRITER_STATE: usize = 580;
const OFF_WRITER_START: usize = 584;
const OFF_ORIGIN_LEN: usize = 592;
const OFF_ORIGIN: usize = 600;
const ORIGIN_AREA: usize = 64;
const OFF_ORIGIN_SEQ: usize = 664;
const HEADER_SIZE: usize = 1024;
const BUF_SEQ: usize = 0;
const BUF_LEN: usize = 8;
const BUF_TIME: usize = 16;
const BUF_HEADER: usize = 64;

/// Whether the slot's writer lives. Maintained by the publication and the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WriterState {
    /// No publication has ever been bound to the slot.
    None,
    /// A publication is bound and its process runs.
    Alive,
    /// The publication was dropped, or its process died.
    Gone,
}

/// Who writes the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriterInfo {
    pub pid: u32,
    pub start_time: u64,
    pub state: WriterState,
}

/// A value found by a read: its sequence number and write time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadInfo {
    pub sequence: u64,
    pub write_time_ns: u64,
}

impl ReadInfo {
    pub fn write_time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.write_time_ns)
    }
}

/// One buffer's complete value, as `Slot::buffer_stamps` finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferStamp {
    pub sequence: u64,
    /// Length of the value in bytes.
    pub len: u64,
    pub write_time_ns: u64,
}

/// Validated geometry of a slot; never re-read from shared memory.
#[derive(Clone, Copy, Debug)]
struct Layout {
    capacity: usize,
    buffer_count: u64,
    buffers: usize,
    stride: usize,
}

/// One mapped slot.
#[derive(Debug)]
pub struct Slot {
    map: Mapping,
    segment: String,
    name: SlotName,
    schema: StoredSchema,
    layout: Layout,
}

/// The slot's schema as stored: kept as bytes (parsed on demand by tools), with the two
/// facts every endpoint checks.
#[derive(Clone, Debug)]
pub struct StoredSchema {
    pub type_name: String,
    pub hash: SchemaHash,
    pub bytes: Vec<u8>,
}

impl StoredSchema {
    pub fn new(schema: &Schema) -> StoredSchema {
        StoredSchema {
            type_name: schema.type_name().to_owned(),
            hash: schema.hash(),
            bytes: schema.to_bytes(),
        }
    }

    /// The full schema, for decoding values without their Rust type.
    pub fn parse(&self) -> Result<Schema, crate::schema::SchemaError> {
        Schema::from_bytes(&self.bytes)
    }
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Slot {
    /// Creates and initialises a new slot segment (the registry's job). `capacity` is rounded
    /// up to a multiple of 64 bytes.
    pub fn create(
        segment: &str,
        name: &SlotName,
        schema: &Schema,
        capacity: usize,
        group: Option<Gid>,
    ) -> Result<Slot, SegmentError> {
        let schema_bytes = schema.to_bytes();
        let capacity = round_up(capacity.max(8), 64);
        let too_big = |what, found: u64| SegmentError::BadSize {
            segment: segment.to_owned(),
            what,
            found,
            segment_size: 0,
        };
        if capacity as u64 > MAX_CAPACITY {
            return Err(too_big("capacity", capacity as u64));
        }
        if schema_bytes.len() as u64 > MAX_SCHEMA_LEN {
            return Err(too_big("schema length", schema_bytes.len() as u64));
        }
        let buffers = round_up(HEADER_SIZE + schema_bytes.len(), 4096);
        let stride = BUF_HEADER + capacity;
        let total = buffers + stride * BUFFER_COUNT as usize;
        let map = Mapping::create(segment, total, group)?;
        let layout = Layout {
            capacity,
            buffer_count: u64::from(BUFFER_COUNT),
            buffers,
            stride,
        };
        let slot = Slot {
            map,
            segment: segment.to_owned(),
            name: name.clone(),
            schema: StoredSchema::new(schema),
            layout,
        };
        let name_bytes = name.as_str().as_bytes();
        slot.store32(OFF_VERSION, VERSION);
        slot.store32(OFF_HEADER_SIZE, HEADER_SIZE as u32);
        slot.store64(OFF_TOTAL_SIZE, total as u64);
        slot.store32(OFF_CAPACITY, capacity as u32);
        slot.store32(OFF_BUFFER_COUNT, BUFFER_COUNT);
        slot.store64(OFF_BUFFERS, buffers as u64);
        slot.store64(OFF_STRIDE, stride as u64);
        slot.store32(OFF_SCHEMA_OFFSET, HEADER_SIZE as u32);
        slot.store32(OFF_SCHEMA_LEN, schema_bytes.len() as u32);
        slot.store64(OFF_SCHEMA_HASH, schema.hash().0);
        slot.store32(OFF_NAME_LEN, name_bytes.len() as u32);
        slot.copy_in(OFF_NAME, name_bytes);
        slot.copy_in(HEADER_SIZE, &schema_bytes);
        // Magic last: a header with the magic is complete.
        slot.word64(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(slot)
    }

    /// Maps an existing slot and validates its header against the segment's real size.
    pub fn open(segment: &str, writable: bool) -> Result<Slot, SegmentError> {
        let map = Mapping::open(segment, writable)?;
        let size = map.len() as u64;
        let bad_size = |what, found: u64| SegmentError::BadSize {
            segment: segment.to_owned(),
            what,
            found,
            segment_size: size,
        };
        if size < HEADER_SIZE as u64 {
            return Err(bad_size("segment size", size));
        }
        let raw = RawHeader(&map);
        let magic = raw.0.word64(OFF_MAGIC).load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(SegmentError::BadMagic {
                segment: segment.to_owned(),
                found: magic,
                expected: MAGIC,
            });
        }
        let version = raw.load32(OFF_VERSION);
        if version != VERSION {
            return Err(SegmentError::BadVersion {
                segment: segment.to_owned(),
                found: version,
                expected: VERSION,
            });
        }
        let header_size = u64::from(raw.load32(OFF_HEADER_SIZE));
        if header_size != HEADER_SIZE as u64 {
            return Err(bad_size("header size", header_size));
        }
        let total = raw.load64(OFF_TOTAL_SIZE);
        if total != size {
            return Err(bad_size("recorded total size", total));
        }
        let capacity = u64::from(raw.load32(OFF_CAPACITY));
        if capacity == 0 || capacity % 64 != 0 || capacity > MAX_CAPACITY {
            return Err(bad_size("capacity", capacity));
        }
        let count = u64::from(raw.load32(OFF_BUFFER_COUNT));
        if !(2..=16).contains(&count) {
            return Err(bad_size("buffer count", count));
        }
        let stride = raw.load64(OFF_STRIDE);
        if stride != BUF_HEADER as u64 + capacity {
            return Err(bad_size("buffer stride", stride));
        }
        let schema_off = u64::from(raw.load32(OFF_SCHEMA_OFFSET));
        let schema_len = u64::from(raw.load32(OFF_SCHEMA_LEN));
        let buffers = raw.load64(OFF_BUFFERS);
        if schema_off != HEADER_SIZE as u64 || schema_len > MAX_SCHEMA_LEN {
            return Err(bad_size("schema length", schema_len));
        }
        if buffers % 64 != 0 || buffers < schema_off + schema_len {
            return Err(bad_size("buffer offset", buffers));
        }
        let end = stride
            .checked_mul(count)
            .and_then(|b| b.checked_add(buffers));
        if end != Some(size) {
            return Err(bad_size("buffers end", end.unwrap_or(u64::MAX)));
        }
        let name_len = raw.load32(OFF_NAME_LEN) as usize;
        if name_len > NAME_AREA {
            return Err(bad_size("name length", name_len as u64));
        }
        let bad_field = |what, reason: String| SegmentError::BadField {
            segment: segment.to_owned(),
            what,
            reason,
        };
        let mut name = vec![0u8; name_len];
        raw.0.copy_out(OFF_NAME, &mut name);
        let name = String::from_utf8(name).map_err(|e| bad_field("name", e.to_string()))?;
        let name = SlotName::parse(&name).map_err(|e| bad_field("name", e.to_string()))?;
        let mut schema = vec![0u8; schema_len as usize];
        raw.0.copy_out(HEADER_SIZE, &mut schema);
        let parsed = Schema::from_bytes(&schema).map_err(|e| bad_field("schema", e.to_string()))?;
        let schema = StoredSchema {
            type_name: parsed.type_name().to_owned(),
            hash: parsed.hash(),
            bytes: schema,
        };
        let stored_hash = raw.load64(OFF_SCHEMA_HASH);
        if stored_hash != schema.hash.0 {
            return Err(bad_field(
                "schema hash",
                format!(
                    "header says {}, the stored schema hashes to {}",
                    SchemaHash(stored_hash),
                    schema.hash
                ),
            ));
        }
        let layout = Layout {
            capacity: capacity as usize,
            buffer_count: count,
            buffers: buffers as usize,
            stride: stride as usize,
        };
        Ok(Slot {
            map,
            segment: segment.to_owned(),
            name,
            schema,
            layout,
        })
    }

    pub fn name(&self) -> &SlotName {
        &self.name
    }

    pub fn segment(&self) -> &str {
        &self.segment
    }

    pub fn schema(&self) -> &StoredSchema {
        &self.schema
    }

    /// Largest payload the slot holds, in bytes.
    pub fn capacity(&self) -> usize {
        self.layout.capacity
    }

    /// Size of the whole segment, in bytes.
    pub fn segment_size(&self) -> usize {
        self.map.len()
    }

    /// Sequence number of the newest complete value; 0 when none was ever written.
    pub fn latest_sequence(&self) -> u64 {
        self.word64(OFF_LATEST).load(Ordering::Acquire)
    }

    /// Writes one value. The caller checked `bytes.len() <= capacity()`; a longer value is a
    /// bug and is refused with `TooLarge` rather than truncated.
    pub fn write(&self, bytes: &[u8]) -> Result<u64, BusError> {
        self.check_fits(bytes.len())?;
        self.write_stamped(
            |space| {
                space.copy_from(bytes);
                Ok(bytes.len())
            },
            now_ns,
        )
    }

    /// Writes one value stamped with a given write time (a mirror of a remote slot keeps the
    /// origin's time).
    pub fn write_at(&self, bytes: &[u8], time_ns: u64) -> Result<u64, BusError> {
        self.check_fits(bytes.len())?;
        self.write_stamped(
            |space| {
                space.copy_from(bytes);
                Ok(bytes.len())
            },
            || time_ns,
        )
    }

    /// Writes one value that `fill` puts straight into the buffer (encoding in place) and whose
    /// length it returns. If `fill` fails, the value is not published: readers keep the
    /// previous one, exactly as if a writer had died in the middle of a write.
    pub fn write_with(
        &self,
        fill: impl FnOnce(PayloadSpace<'_>) -> Result<usize, BusError>,
    ) -> Result<u64, BusError> {
        self.write_stamped(fill, now_ns)
    }

    fn check_fits(&self, len: usize) -> Result<(), BusError> {
        if len > self.layout.capacity {
            return Err(BusError::TooLarge {
                name: self.name.to_string(),
                size: len,
                capacity: self.layout.capacity,
            });
        }
        Ok(())
    }

    fn write_stamped(
        &self,
        fill: impl FnOnce(PayloadSpace<'_>) -> Result<usize, BusError>,
        stamp: impl FnOnce() -> u64,
    ) -> Result<u64, BusError> {
        let latest = self.word64(OFF_LATEST);
        // Single writer: nobody else stores `latest`, so Relaxed reads our own last store (or,
        // after a writer restart, the dead writer's, published before it died).
        let n = latest.load(Ordering::Relaxed).wrapping_add(1);
        let buf = self.buffer_offset(n);
        let seq = self.word64(buf + BUF_SEQ);
        seq.store(2 * n + 1, Ordering::Relaxed);
        // Orders the odd marker before the payload stores: a reader that sees any new payload
        // byte and then re-reads seq (after its Acquire fence) sees the marker or later.
        fence(Ordering::Release);
        let len = fill(PayloadSpace::new(
            &self.map,
            buf + BUF_HEADER,
            self.layout.capacity,
        ))?;
        debug_assert!(len <= self.layout.capacity);
        self.word64(buf + BUF_LEN)
            .store(len as u64, Ordering::Relaxed);
        // The clock is read only now, after the copy: reading CLOCK_REALTIME waits (lfence in
        // the vDSO) for every earlier load to finish, and taken before the copy it held back
        // the stores above until the caller's last read (typically the value being answered)
        // had completed, which cost a quarter of a busy-poll round trip. The stamp still
        // precedes the moment the value becomes visible (the Release store below).
        self.word64(buf + BUF_TIME)
            .store(stamp(), Ordering::Relaxed);
        // Release: payload, len and time happen-before a reader's Acquire load that sees 2n.
        seq.store(2 * n, Ordering::Release);
        latest.store(n, Ordering::Release);
        // SeqCst RMW + SeqCst load against the waiter's SeqCst increment + load: either we see
        // its increment and wake it, or it sees our new notify value and does not sleep. The
        // notify word counts events (writes, writer gone), so every event changes it.
        self.notify_word().fetch_add(1, Ordering::SeqCst);
        if self.waiters_word().load(Ordering::SeqCst) != 0 {
            futex::wake_all(self.notify_word(), true);
        }
        Ok(n)
    }

    /// Reads the newest value if its sequence differs from `last_seen`, into `out` (resized to
    /// the value's length). `Ok(None)`: nothing newer (or nothing ever written).
    pub fn read(&self, last_seen: u64, out: &mut Vec<u8>) -> Result<Option<ReadInfo>, BusError> {
        let got = self.read_in_place(last_seen, |payload| {
            out.resize(payload.len(), 0);
            payload.copy_to(out);
        })?;
        Ok(got.map(|((), info)| info))
    }

    /// Like `read`, for a value of exactly `out.len()` bytes (plain-old-data types).
    pub fn read_exact(&self, last_seen: u64, out: &mut [u8]) -> Result<Option<ReadInfo>, BusError> {
        let want = out.len();
        let got = self.read_in_place(last_seen, |payload| {
            if payload.len() != want {
                return Err(payload.len());
            }
            payload.copy_to(out);
            Ok(())
        })?;
        match got {
            Some((Err(len), _)) => {
                Err(self.inconsistent(format!("value is {len} bytes, the type is {want}")))
            }
            Some((Ok(()), info)) => Ok(Some(info)),
            None => Ok(None),
        }
    }

    /// Hands the newest value, if its sequence differs from `last_seen`, to `consume` while the
    /// seqlock holds it (to copy or decode it in place), and returns what `consume` made of it
    /// once the re-check shows the writer did not touch the buffer meanwhile; otherwise the
    /// result is dropped and the newest value is read again. `consume` must therefore expect
    /// bytes that mix two values (and fail gracefully on them): only its validated result is
    /// returned.
    pub fn read_in_place<R>(
        &self,
        last_seen: u64,
        mut consume: impl FnMut(PayloadView<'_>) -> R,
    ) -> Result<Option<(R, ReadInfo)>, BusError> {
        let latest = self.word64(OFF_LATEST);
        let mut stalled = 0u32;
        let mut attempts = 0u64;
        loop {
            let n = latest.load(Ordering::Acquire);
            if n == last_seen || n == 0 {
                return Ok(None);
            }
            let buf = self.buffer_offset(n);
            let seq = self.word64(buf + BUF_SEQ);
            let s1 = seq.load(Ordering::Acquire);
            if s1 == 2 * n {
                let len = self.word64(buf + BUF_LEN).load(Ordering::Relaxed);
                if len > self.layout.capacity as u64 {
                    return Err(self.inconsistent(format!(
                        "stored length {len} exceeds capacity {}",
                        self.layout.capacity
                    )));
                }
                let result = consume(PayloadView::new(&self.map, buf + BUF_HEADER, len as usize));
                let time_ns = self.word64(buf + BUF_TIME).load(Ordering::Relaxed);
                // Pairs with the writer's Release fence: if any byte we read came from a later
                // write, the re-read below sees that write's odd marker (or later).
                fence(Ordering::Acquire);
                if seq.load(Ordering::Relaxed) == s1 {
                    return Ok(Some((
                        result,
                        ReadInfo {
                            sequence: n,
                            write_time_ns: time_ns,
                        },
                    )));
                }
            }
            // Lapped by the writer (normal), or memory that no writer will ever make consistent
            // (corrupt): tell them apart by whether `latest` moves.
            attempts += 1;
            if latest.load(Ordering::Acquire) == n {
                stalled += 1;
                if stalled > 1000 {
                    return Err(self.inconsistent(format!(
                        "latest value {n} points at a buffer holding sequence word {s1}"
                    )));
                }
                std::thread::yield_now();
            } else {
                stalled = 0;
            }
            if attempts > 10_000_000 {
                return Err(self.inconsistent("the writer laps every read".into()));
            }
            std::hint::spin_loop();
        }
    }

    /// Sequence and write time of the newest value without copying it (for tools).
    pub fn last_write(&self) -> Option<ReadInfo> {
        for _ in 0..1000 {
            let n = self.latest_sequence();
            if n == 0 {
                return None;
            }
            let buf = self.buffer_offset(n);
            let seq = self.word64(buf + BUF_SEQ);
            if seq.load(Ordering::Acquire) == 2 * n {
                let time_ns = self.word64(buf + BUF_TIME).load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if seq.load(Ordering::Relaxed) == 2 * n {
                    return Some(ReadInfo {
                        sequence: n,
                        write_time_ns: time_ns,
                    });
                }
            }
        }
        None
    }

    /// What each buffer holds now: the sequence, length and write time of the complete value in
    /// it, oldest first; buffers being written (odd sequence word), never written, or holding
    /// numbers that do not fit the layout are left out. Read-only, for tools measuring rates:
    /// the buffers keep the last `buffer_count` values, so sampling them at least once every
    /// few writes sees every write without subscribing.
    pub fn buffer_stamps(&self) -> Vec<BufferStamp> {
        let mut stamps = Vec::with_capacity(self.layout.buffer_count as usize);
        for i in 0..self.layout.buffer_count {
            let buf = self.layout.buffers + i as usize * self.layout.stride;
            let seq = self.word64(buf + BUF_SEQ);
            let s1 = seq.load(Ordering::Acquire);
            let n = s1 / 2;
            if s1 == 0 || s1 % 2 == 1 || n % self.layout.buffer_count != i {
                continue;
            }
            let len = self.word64(buf + BUF_LEN).load(Ordering::Relaxed);
            let time_ns = self.word64(buf + BUF_TIME).load(Ordering::Relaxed);
            // Pairs with the writer's Release fence, as in `read_with`: if len or time came from
            // a later write, the re-read sees that write's odd marker (or later).
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == s1 && len <= self.layout.capacity as u64 {
                stamps.push(BufferStamp {
                    sequence: n,
                    len,
                    write_time_ns: time_ns,
                });
            }
        }
        stamps.sort_by_key(|s| s.sequence);
        stamps
    }

    pub fn writer(&self) -> WriterInfo {
        WriterInfo {
            pid: self.load32(OFF_WRITER_PID),
            start_time: self.load64(OFF_WRITER_START),
            state: self.writer_state(),
        }
    }

    /// Whether the writer lives: one load, for the paths that check it on every update
    /// (subscription groups, arbiters).
    pub fn writer_state(&self) -> WriterState {
        match self.load32(OFF_WRITER_STATE) {
            1 => WriterState::Alive,
            2 => WriterState::Gone,
            _ => WriterState::None,
        }
    }

    /// Records the slot's writer (registry, at registration).
    pub fn set_writer(&self, pid: u32, start_time: u64) {
        self.store32(OFF_WRITER_STATE, 0);
        self.store32(OFF_WRITER_PID, pid);
        self.store64(OFF_WRITER_START, start_time);
        self.word32(OFF_WRITER_STATE).store(1, Ordering::Release);
    }

    /// Marks the writer gone (clean drop, or the registry saw its process die) and wakes
    /// waiters so that they can notice.
    pub fn mark_writer_gone(&self) {
        self.word32(OFF_WRITER_STATE).store(2, Ordering::Release);
        self.notify_word().fetch_add(1, Ordering::SeqCst);
        futex::wake_all(self.notify_word(), true);
    }

    /// Host the current value came from (empty for local values).
    pub fn origin(&self) -> String {
        let len = (self.load32(OFF_ORIGIN_LEN) as usize).min(ORIGIN_AREA);
        let mut bytes = vec![0u8; len];
        self.copy_out(OFF_ORIGIN, &mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Records the host a mirrored slot's values come from (the registry, when it creates a
    /// mirror of a remote publication); `""` marks the slot local again. Longer names are cut
    /// at 64 bytes.
    pub fn set_origin(&self, host: &str) {
        let bytes = host.as_bytes();
        let len = bytes.len().min(ORIGIN_AREA);
        self.copy_in(OFF_ORIGIN, &bytes[..len]);
        // Release: a reader that sees the new length sees the bytes stored before it.
        self.word32(OFF_ORIGIN_LEN)
            .store(len as u32, Ordering::Release);
    }

    /// Sequence number the latest reflected value had on its origin host (0 for local slots).
    /// Informational, and what a restarted registry resumes ordering from.
    pub fn origin_sequence(&self) -> u64 {
        self.load64(OFF_ORIGIN_SEQ)
    }

    /// Stores the origin sequence of the value about to be (or just) written by the mirror's
    /// writer, the registry.
    pub fn set_origin_sequence(&self, sequence: u64) {
        self.word64(OFF_ORIGIN_SEQ)
            .store(sequence, Ordering::Release);
    }

    /// The word writers bump and waiters sleep on.
    pub fn notify_word(&self) -> &AtomicU32 {
        self.word32(OFF_NOTIFY)
    }

    /// Count of processes sleeping on `notify_word`; writers wake only when it is non-zero.
    pub fn waiters_word(&self) -> &AtomicU32 {
        self.word32(OFF_WAITERS)
    }

    fn inconsistent(&self, reason: String) -> BusError {
        BusError::Inconsistent {
            name: self.name.to_string(),
            reason,
        }
    }

    fn buffer_offset(&self, n: u64) -> usize {
        self.layout.buffers + (n % self.layout.buffer_count) as usize * self.layout.stride
    }

    fn word64(&self, off: usize) -> &AtomicU64 {
        self.map.word64(off)
    }

    fn word32(&self, off: usize) -> &AtomicU32 {
        self.map.word32(off)
    }

    fn load32(&self, off: usize) -> u32 {
        self.word32(off).load(Ordering::Acquire)
    }

    fn load64(&self, off: usize) -> u64 {
        self.word64(off).load(Ordering::Acquire)
    }

    fn store32(&self, off: usize, v: u32) {
        self.word32(off).store(v, Ordering::Relaxed)
    }

    fn store64(&self, off: usize, v: u64) {
        self.word64(off).store(v, Ordering::Relaxed)
    }

    fn copy_in(&self, off: usize, src: &[u8]) {
        self.map.copy_in(off, src)
    }

    fn copy_out(&self, off: usize, dst: &mut [u8]) {
        self.map.copy_out(off, dst)
    }
}

/// Header reads during validation, before a `Slot` exists.
struct RawHeader<'a>(&'a Mapping);

impl RawHeader<'_> {
    fn load32(&self, off: usize) -> u32 {
        self.0.word32(off).load(Ordering::Acquire)
    }

    fn load64(&self, off: usize) -> u64 {
        self.0.word64(off).load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(String);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = crate::shm::unlink(&self.0);
        }
    }

    fn new_slot(tag: &str) -> (Scratch, Slot) {
        let seg = format!("/baton.unit-{}-{tag}~x", std::process::id());
        let _ = crate::shm::unlink(&seg);
        let schema = Schema::of_serde::<Vec<u8>>().unwrap();
        let name = SlotName::public("/x").unwrap();
        let slot = Slot::create(&seg, &name, &schema, 256, None).unwrap();
        (Scratch(seg), slot)
    }

    #[test]
    fn a_write_interrupted_midway_is_invisible() {
        let (_s, slot) = new_slot("mid");
        slot.write(b"complete value").unwrap();
        // What a writer killed after its odd marker and half a payload leaves behind.
        let n = slot.latest_sequence() + 1;
        let buf = slot.buffer_offset(n);
        slot.word64(buf + BUF_SEQ)
            .store(2 * n + 1, Ordering::Relaxed);
        slot.copy_in(buf + BUF_HEADER, b"garbage garbage garbage");
        let reader = Slot::open(slot.segment(), false).unwrap();
        let mut out = Vec::new();
        let info = reader.read(0, &mut out).unwrap().unwrap();
        assert_eq!(info.sequence, 1);
        assert_eq!(out, b"complete value");
        // The next writer (a restarted process) continues the sequence over the dead buffer.
        slot.write(b"next").unwrap();
        assert_eq!(reader.read(1, &mut out).unwrap().unwrap().sequence, 2);
        assert_eq!(out, b"next");
    }

    #[test]
    fn corrupt_lengths_and_sequences_are_errors_not_hangs() {
        let (_s, slot) = new_slot("corrupt");
        slot.write(b"abc").unwrap();
        let buf = slot.buffer_offset(1);
        slot.word64(buf + BUF_LEN)
            .store(u64::MAX, Ordering::Relaxed);
        let mut out = Vec::new();
        let err = slot.read(0, &mut out).unwrap_err();
        assert!(err.to_string().contains("exceeds capacity"), "{err}");
        // `latest` names a value no buffer holds: bounded retries, then an error.
        slot.word64(OFF_LATEST).store(99, Ordering::Release);
        let err = slot.read(0, &mut out).unwrap_err();
        assert!(matches!(err, BusError::Inconsistent { .. }), "{err}");
    }

    #[test]
    fn buffer_stamps_name_the_last_values() {
        let (_s, slot) = new_slot("stamps");
        assert!(slot.buffer_stamps().is_empty());
        for i in 1u64..=6 {
            slot.write_at(&vec![0u8; i as usize], 1000 * i).unwrap();
        }
        let reader = Slot::open(slot.segment(), false).unwrap();
        let stamps = reader.buffer_stamps();
        let seqs: Vec<u64> = stamps.iter().map(|s| s.sequence).collect();
        assert_eq!(seqs, vec![3, 4, 5, 6]);
        assert!(stamps
            .iter()
            .all(|s| s.len == s.sequence && s.write_time_ns == 1000 * s.sequence));
    }

    #[test]
    fn readers_are_lapped_only_by_progress() {
        let (_s, slot) = new_slot("lap");
        let reader = Slot::open(slot.segment(), false).unwrap();
        let mut out = Vec::new();
        for i in 0u64..100 {
            slot.write(&i.to_le_bytes()).unwrap();
            let info = reader.read(i, &mut out).unwrap().unwrap();
            assert_eq!(info.sequence, i + 1);
            assert_eq!(out, i.to_le_bytes());
            assert!(reader.read(i + 1, &mut out).unwrap().is_none());
        }
    }
}
