//! The memory layout of one slot and the seqlock protocol that reads and writes it.
//!
//! A slot is one shared-memory segment:
//!
//! ```text
//! 0      static header: magic, version, sizes, offsets, schema hash, name   (written once)
//! 512    the value line: latest sequence (u64), each buffer's length (4 x u32) and write time
//!        (4 x u64)                                                          (one cache line)
//! 576    writer pid, state, start time, origin host, origin sequence, origin session, writer
//!        record version, writer's first sequence, series, origin series, writer endpoint
//!                                                                        (registry-maintained)
//! 768    notify word (u32), waiters (u64: epoch, count)                     (a line of their own)
//! 1024   schema bytes (Schema::to_bytes)
//! B      4 buffers of `capacity` payload bytes each (a multiple of 64: whole cache lines)
//! ```
//!
//! Protocol (one writer per slot, enforced by the registry; any number of readers), a seqlock
//! whose sequence is `latest` itself: the writer puts value `n` in buffer `n % 4`, fences
//! (Release), writes the payload (a copy, or an encoding in place: `payload`), stores the
//! buffer's length and write time, then publishes `n` in `latest` (Release). A reader loads
//! `latest` (Acquire), reads that buffer's length and time, copies or decodes the payload in
//! place, fences (Acquire) and loads `latest` again. The buffer of `n` is written next by value
//! `n + 4`, which the writer starts only after it published `n + 3`; so if the second load
//! finds `latest` below `n + 3`, no byte the reader read came from a later value (the writer's
//! fence and the reader's pair: a load that saw a store of `n + 4` makes the later load of
//! `latest` see `n + 3` or more). Otherwise the reader was lapped and reads the newest value
//! again, discarding what it read. A writer killed mid-write leaves its buffer half written,
//! but `latest` still names the previous complete one, so readers never wait for a dead writer
//! and never see a torn value; the next writer writes that buffer again from the start. A
//! reader is lapped only if the writer completes three whole values during one copy.
//!
//! Why no sequence word per buffer, as a textbook seqlock has: a reader then reads two cache
//! lines a value (the value line and the payload, for a value of up to 64 bytes), as a raw
//! shared-memory hand-off does, where a per-buffer header line made three; that line was 40 to
//! 60 ns of every busy-poll hop (docs/results-bus.md). The price: a `latest` word overwritten
//! with a wrong number reads as the value in the buffer it names, not as an error (a corrupt
//! length still is one), and tools see the last three values, not four (`buffer_stamps`).
//!
//! Every static field is validated against the segment's real size when the slot is opened and
//! kept in `Layout`; afterwards only the atomics above are re-read, and each length read from
//! them is checked against the capacity before use.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::unistd::Gid;

use crate::error::{BusError, SegmentError};
use crate::names::SlotName;
use crate::payload::{PayloadSpace, PayloadView};
use crate::schema::{Schema, SchemaHash};
use crate::shm::{FileNow, Mapping};

pub const MAGIC: u64 = u64::from_le_bytes(*b"BATONSLT");
/// Version 2: the waiters word became 64 bits (an epoch and a count, see `waiters`). Version 3:
/// lengths and write times moved into the value line, the notify and waiters words out of it,
/// and the buffers lost their sequence words (the module comment says why).
pub const VERSION: u32 = 3;
/// Buffers per slot: with four, a reader is lapped only if the writer completes three whole
/// values during one copy. The value line has room for the lengths and times of four.
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
/// The buffers' lengths: a u32 each (`length_offset`).
const OFF_LENGTHS: usize = 520;
/// The buffers' write times: a u64 each (`time_offset`).
const OFF_TIMES: usize = 536;
const OFF_NOTIFY: usize = 768;
const OFF_WAITERS: usize = 776;
const OFF_WRITER_PID: usize = 576;
const OFF_WRITER_STATE: usize = 580;
const OFF_WRITER_START: usize = 584;
const OFF_ORIGIN_LEN: usize = 592;
const OFF_ORIGIN: usize = 600;
const ORIGIN_AREA: usize = 64;
const OFF_ORIGIN_SEQ: usize = 664;
/// Zero in segments made before it existed: "session unknown".
const OFF_ORIGIN_SESSION: usize = 672;
/// The writer record's version (see `Slot::writer`); 0 in segments made before it existed.
const OFF_WRITER_VERSION: usize = 680;
/// The first sequence the writer recorded can have written (`set_writer`): a value before it
/// is an earlier writer's. 0 in segments made before it was kept: every value counts as the
/// writer's.
const OFF_WRITER_FIRST: usize = 688;
/// Which segment this is of those ever made for the slot's name: its creation time in
/// nanoseconds, written once by `create` (0 in segments made before it was kept). A slot made
/// anew numbers its values from 1 again: a mirror tells the two series apart by it.
const OFF_SERIES: usize = 696;
/// In a mirror: the origin slot's series of the value held (see `origin_sequence`).
const OFF_ORIGIN_SERIES: usize = 704;
/// The recorded writer's endpoint number in its process (`set_writer`); in a mirror, its
/// registry's number for the origin's publisher (`set_mirror_writer`); 0: not known (segments
/// made before it was kept, and the registry's own writes).
const OFF_WRITER_ENDPOINT: usize = 712;
pub(crate) const HEADER_SIZE: usize = 1024;

/// How far `latest` may move during a read of value `n` before the buffer of `n` may have been
/// written again: value `n + BUFFER_COUNT` goes into it, started after `latest` reached
/// `n + BUFFER_COUNT - 1`.
const LAP: u64 = BUFFER_COUNT as u64 - 1;

/// Which buffer value `n` goes into. By the constant, which `Slot::open` checked the header
/// against: a remainder by a number read at run time is a division, 15 % of a busy-poll read's
/// time.
fn buffer_index(n: u64) -> usize {
    (n % u64::from(BUFFER_COUNT)) as usize
}

/// Where buffer `index`'s length is kept, in the value line.
fn length_offset(index: usize) -> usize {
    OFF_LENGTHS + 4 * index
}

/// Where buffer `index`'s write time is kept, in the value line.
fn time_offset(index: usize) -> usize {
    OFF_TIMES + 8 * index
}

/// Whether value `n`, read before `latest` was loaded again as `latest_now`
/// (`Slot::latest_after_reading`), was read whole: its buffer is written next by value
/// `n + LAP + 1`, which the writer starts only after it published `n + LAP`.
fn read_whole(n: u64, latest_now: u64) -> bool {
    latest_now.wrapping_sub(n) < LAP
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

/// Validated geometry of a slot; never re-read from shared memory. The buffers follow one
/// another, `capacity` bytes each (the header's stride, checked equal).
#[derive(Clone, Copy, Debug)]
struct Layout {
    capacity: usize,
    buffers: usize,
}

/// One mapped slot.
#[derive(Debug)]
pub struct Slot {
    map: Mapping,
    segment: String,
    name: SlotName,
    schema: StoredSchema,
    layout: Layout,
    /// Consecutive wakes by this handle's writes that found fewer sleepers than counted
    /// waiters (`waiters`).
    short_wakes: AtomicU32,
    /// Whether this handle told the others that its mapping lost pages (`tell_lost_pages`).
    lost_pages_told: AtomicBool,
    /// The odd writer-record version `writer` last gave up on (0: none), not waited for again.
    unsettled_version: AtomicU32,
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

/// Nanoseconds since the Unix epoch, as values are stamped.
pub fn now_ns() -> u64 {
    crate::futex::realtime_ns()
}

impl Slot {
    pub fn name(&self) -> &SlotName {
        &self.name
    }

    pub fn segment(&self) -> &str {
        &self.segment
    }

    /// Whether the segment's name still stands for the memory mapped here (it does not once
    /// the segment was removed, or replaced by a new one) and that memory is still shared
    /// (pages lost to a file shrunk under the mapping are private zeroes: `Mapping::is_damaged`).
    pub fn is_current(&self) -> bool {
        !self.map.is_damaged() && self.map.is_named(&self.segment)
    }

    /// Device and inode of the segment file mapped here (which file a name stands for can
    /// change; the mapping cannot).
    pub fn file(&self) -> (u64, u64) {
        self.map.file()
    }

    /// Whether the segment's name still stands for the file mapped here, damaged or not (the
    /// registry removes a damaged slot's file only if it is that one).
    pub fn names_its_file(&self) -> bool {
        self.map.is_named(&self.segment)
    }

    /// What is wrong now with the memory under this slot, if anything: its segment removed or
    /// replaced by another file, its file shrunk (pages lost: `Mapping::is_damaged`), or its
    /// static header (sizes, name, schema: everything `Slot::open` checks) overwritten. Whoever
    /// maps a damaged slot may no longer share it with the others; the registry checks its
    /// slots with this and makes a damaged one anew. Costs two system calls (`shm_open`,
    /// `fstat`) and a copy of the name and schema.
    pub fn damage(&self) -> Option<String> {
        if self.map.is_damaged() {
            return Some("its file was shrunk under the mapping (pages of it lost)".into());
        }
        match self.map.file_now(&self.segment) {
            FileNow::Removed => return Some("its segment was removed".into()),
            FileNow::Other => return Some("its segment was replaced by another file".into()),
            // Grown as well as cut: a slot never changes size under its name (another capacity
            // is another segment), and `Slot::open` refuses a file whose size is not the
            // header's, so new endpoints could not bind.
            FileNow::Mapped { size } if size != self.map.len() as u64 => {
                let how = if size < self.map.len() as u64 {
                    "cut"
                } else {
                    "grown"
                };
                return Some(format!(
                    "its segment was {how} to {size} of its {} bytes",
                    self.map.len()
                ));
            }
            _ => {}
        }
        let header_intact = self.load64(OFF_MAGIC) == MAGIC
            && self.load32(OFF_VERSION) == VERSION
            && self.load64(OFF_TOTAL_SIZE) == self.map.len() as u64
            && self.load32(OFF_CAPACITY) as usize == self.layout.capacity
            && self.load32(OFF_BUFFER_COUNT) == BUFFER_COUNT
            && self.load64(OFF_BUFFERS) == self.layout.buffers as u64
            && self.load64(OFF_STRIDE) == self.layout.capacity as u64
            && self.load32(OFF_HEADER_SIZE) as usize == HEADER_SIZE
            && self.load32(OFF_SCHEMA_OFFSET) as usize == HEADER_SIZE
            && self.load32(OFF_SCHEMA_LEN) as usize == self.schema.bytes.len()
            && self.load64(OFF_SCHEMA_HASH) == self.schema.hash.0
            && self.load32(OFF_NAME_LEN) as usize == self.name.as_str().len();
        if !header_intact {
            return Some("its header was overwritten".into());
        }
        // The name and the schema as `Slot::open` reads them: a copy of a few hundred bytes.
        let intact = |off: usize, expected: &[u8]| {
            let mut found = vec![0u8; expected.len()];
            self.copy_out(off, &mut found);
            found == expected
        };
        if !intact(OFF_NAME, self.name.as_str().as_bytes()) {
            return Some("its name in the header was overwritten".into());
        }
        (!intact(HEADER_SIZE, &self.schema.bytes))
            .then(|| "its stored schema was overwritten".into())
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
        self.load64(OFF_LATEST)
    }

    /// Whether `read` would find a value other than the one of sequence `seen`: the condition
    /// a waiter sleeps on. Sequence 0 is never a value (`read` returns nothing for it), so a
    /// `latest` of 0 after values were seen (a corrupted word) is nothing new either; a waiter
    /// that took it for news would never sleep.
    pub fn has_news(&self, seen: u64) -> bool {
        let n = self.latest_sequence();
        n != seen && n != 0
    }

    /// Writes one value. The caller checked `bytes.len() <= capacity()`; a longer value is a
    /// bug and is refused with `TooLarge` rather than truncated.
    pub fn write(&self, bytes: &[u8]) -> Result<u64, BusError> {
        self.write_bytes(bytes, now_ns)
    }

    /// Writes one value stamped with a given write time (a mirror of a remote slot keeps the
    /// origin's time).
    pub fn write_at(&self, bytes: &[u8], time_ns: u64) -> Result<u64, BusError> {
        self.write_bytes(bytes, || time_ns)
    }

    fn write_bytes(&self, bytes: &[u8], stamp: impl FnOnce() -> u64) -> Result<u64, BusError> {
        if bytes.len() > self.layout.capacity {
            return Err(BusError::TooLarge {
                name: self.name.to_string(),
                size: bytes.len(),
                capacity: self.layout.capacity,
            });
        }
        let fill = |space: PayloadSpace<'_>| {
            space.copy_from(bytes);
            Ok(bytes.len())
        };
        self.write_stamped(fill, stamp)
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

    fn write_stamped(
        &self,
        fill: impl FnOnce(PayloadSpace<'_>) -> Result<usize, BusError>,
        stamp: impl FnOnce() -> u64,
    ) -> Result<u64, BusError> {
        let latest = self.word64(OFF_LATEST);
        // Single writer: nobody else stores `latest`, so Relaxed reads our own last store (or,
        // after a writer restart, the dead writer's, published before it died).
        let n = latest.load(Ordering::Relaxed).wrapping_add(1);
        let index = buffer_index(n);
        // Orders the previous value's `latest` store (`n - 1`) before this value's stores into
        // the buffer: a reader that sees any of them and then loads `latest` (after its Acquire
        // fence) sees `n - 1` or later, and so knows that it was lapped (module comment).
        fence(Ordering::Release);
        let len = fill(PayloadSpace::new(
            &self.map,
            self.buffer_offset(index),
            self.layout.capacity,
        ))?;
        debug_assert!(len <= self.layout.capacity);
        self.word32(length_offset(index))
            .store(len as u32, Ordering::Relaxed);
        // The clock is read only now, after the copy: reading CLOCK_REALTIME waits (lfence in
        // the vDSO) for every earlier load to finish, and taken before the copy it held back
        // the stores above until the caller's last read (typically the value being answered)
        // had completed, which cost a quarter of a busy-poll round trip. The stamp still
        // precedes the moment the value becomes visible (the Release store below).
        self.word64(time_offset(index))
            .store(stamp(), Ordering::Relaxed);
        // Release: payload, length and time happen-before a reader's Acquire load that sees n.
        latest.store(n, Ordering::Release);
        // SeqCst RMW, then the SeqCst load of the waiters word in `wake_waiters`, against the
        // waiter's SeqCst count and notify load: either we see its count and wake it, or it
        // sees our new notify value and does not sleep. The notify word counts events
        // (writes, writer gone), so every event changes it.
        self.notify_word().fetch_add(1, Ordering::SeqCst);
        self.wake_waiters();
        self.tell_lost_pages();
        Ok(n)
    }

    /// A mapping that lost pages (its file was cut short under it, and a touch past the end put
    /// private zeroes there) no longer shares them with anyone. When the file has been grown
    /// back to its size meanwhile (or written over by `cp`, which truncates first), its size
    /// and header, which the registry checks (`damage`), look whole, and nothing else would
    /// tell the other users: this handle spoils the magic of the file's header, through the
    /// file, so that the registry makes the slot anew and tells every user. Once per handle,
    /// tried again at every read and write while the file is still too short (a `cp` truncates
    /// it to nothing first); one load on every read and write otherwise.
    #[inline]
    fn tell_lost_pages(&self) {
        if self.map.is_damaged() && !self.lost_pages_told.load(Ordering::Relaxed) {
            self.tell_lost_pages_now();
        }
    }

    /// `tell_lost_pages` once pages were lost: out of line, so that the check on every read and
    /// write stays a load and a branch.
    #[cold]
    #[inline(never)]
    fn tell_lost_pages_now(&self) {
        let told = self
            .map
            .write_through_file(&self.segment, OFF_MAGIC, &0u64.to_ne_bytes());
        if told == crate::shm::WriteThrough::NotNow {
            return;
        }
        self.lost_pages_told.store(true, Ordering::Relaxed);
        if told == crate::shm::WriteThrough::Written {
            tracing::warn!(
                "{}: pages of its memory were lost under this process (the segment was cut \
                 short); its header is spoilt so that the registry makes the slot anew",
                self.name
            );
        }
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
            Some((Err(len), info)) => Err(self.inconsistent(
                info.sequence,
                format!("value is {len} bytes, the type is {want}"),
            )),
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
        self.tell_lost_pages();
        self.touch_buffer(last_seen.wrapping_add(1));
        let mut attempts = 0u64;
        loop {
            let n = self.load64(OFF_LATEST);
            if n == last_seen || n == 0 {
                return Ok(None);
            }
            let index = buffer_index(n);
            let len = self.relaxed32(length_offset(index));
            let time_ns = self.relaxed64(time_offset(index));
            // Any length the writer stores fits (it checks before it writes): a larger one is
            // corrupt memory, whatever value it belongs to.
            if len as usize > self.layout.capacity {
                return Err(self.inconsistent(
                    n,
                    format!(
                        "stored length {len} exceeds capacity {}",
                        self.layout.capacity
                    ),
                ));
            }
            let result = consume(PayloadView::new(
                &self.map,
                self.buffer_offset(index),
                len as usize,
            ));
            if read_whole(n, self.latest_after_reading()) {
                return Ok(Some((
                    result,
                    ReadInfo {
                        sequence: n,
                        write_time_ns: time_ns,
                    },
                )));
            }
            // Lapped by the writer (or `latest` went backwards: memory written over by hand),
            // read the newest value again.
            attempts += 1;
            if attempts > 10_000_000 {
                return Err(self.inconsistent(n, "the writer laps every read".into()));
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
            let time_ns = self.relaxed64(time_offset(buffer_index(n)));
            if read_whole(n, self.latest_after_reading()) {
                return Some(ReadInfo {
                    sequence: n,
                    write_time_ns: time_ns,
                });
            }
        }
        None
    }

    /// The sequence, length and write time of the last values (at most three: the fourth
    /// buffer is the one the next value goes into, and may be half written), oldest first;
    /// lengths that do not fit the layout are left out. Read-only, for tools measuring rates:
    /// sampling at least once every few writes sees every write without subscribing.
    pub fn buffer_stamps(&self) -> Vec<BufferStamp> {
        let n = self.latest_sequence();
        let mut stamps: Vec<BufferStamp> = (n.saturating_sub(LAP - 1).max(1)..=n)
            .map(|sequence| {
                let index = buffer_index(sequence);
                BufferStamp {
                    sequence,
                    len: u64::from(self.relaxed32(length_offset(index))),
                    write_time_ns: self.relaxed64(time_offset(index)),
                }
            })
            .collect();
        let latest_now = self.latest_after_reading();
        stamps
            .retain(|s| read_whole(s.sequence, latest_now) && s.len <= self.layout.capacity as u64);
        stamps
    }

    /// `latest` loaded again after reading a value, to tell with `read_whole` whether the
    /// reads saw only that value. The Acquire fence pairs with the writer's Release fence at
    /// the start of each write: if any byte, length or time read before it came from a later
    /// value in the same buffer, the load sees `n + LAP` or later.
    fn latest_after_reading(&self) -> u64 {
        fence(Ordering::Acquire);
        self.relaxed64(OFF_LATEST)
    }

    /// The word writers bump and waiters sleep on.
    pub fn notify_word(&self) -> &AtomicU32 {
        self.word32(OFF_NOTIFY)
    }

    /// The error of a read that found the value `sequence` unreadable.
    fn inconsistent(&self, sequence: u64, reason: String) -> BusError {
        BusError::Inconsistent {
            name: self.name.to_string(),
            reason,
            sequence,
        }
    }

    /// Loads (and discards) the first word of the buffer that value `n` goes to, so that its
    /// cache line is on its way before `latest` says which buffer to read. A reader that polls
    /// for the next value would otherwise fetch the buffer only after `latest`, one cross-core
    /// miss after another (the buffer's address depends on `latest`); issued first, the misses
    /// overlap. The writer takes the line back from the reader's cache in any case (the reader
    /// read it four values ago); a poll that lands while the writer fills the buffer can make
    /// it take it back once more, which the publish-cost benchmark with polling subscribers
    /// does not show beyond its drift. Order plays no part: the value is read again as the
    /// protocol says.
    fn touch_buffer(&self, n: u64) {
        std::hint::black_box(self.relaxed64(self.buffer_offset(buffer_index(n))));
    }

    /// Where buffer `index` starts.
    fn buffer_offset(&self, index: usize) -> usize {
        self.layout.buffers + index * self.layout.capacity
    }

    /// A word to store, or read-modify-write: panics on a read-only slot (`Mapping::word64`).
    fn word64(&self, off: usize) -> &AtomicU64 {
        self.map.word64(off)
    }

    /// `word64` for a 32-bit word.
    fn word32(&self, off: usize) -> &AtomicU32 {
        self.map.word32(off)
    }

    /// An Acquire load, on any slot.
    fn load32(&self, off: usize) -> u32 {
        self.map.load_acquire32(off)
    }

    /// An Acquire load, on any slot.
    fn load64(&self, off: usize) -> u64 {
        self.map.load_acquire64(off)
    }

    /// A Relaxed load, on any slot.
    fn relaxed32(&self, off: usize) -> u32 {
        self.map.load32(off)
    }

    /// A Relaxed load, on any slot.
    fn relaxed64(&self, off: usize) -> u64 {
        self.map.load64(off)
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

mod record;
mod segment;
#[cfg(test)]
mod tests;
mod waiters;

pub use record::{WriterId, WriterInfo, WriterState};
pub use waiters::{WaiterTicket, STALE_AFTER};
