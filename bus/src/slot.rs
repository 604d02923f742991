//! The memory layout of one slot and the seqlock protocol that reads and writes it.
//!
//! A slot is one shared-memory segment:
//!
//! ```text
//! 0      static header: magic, version, sizes, offsets, schema hash, name   (written once)
//! 512    latest sequence (u64), notify word (u32), waiters (u64: epoch, count) (one cache line)
//! 576    writer pid, state, start time, origin host, origin sequence, writer record version,
//!        writer's first sequence, series, origin series                      (registry-maintained)
//! 1024   schema bytes (Schema::to_bytes)
//! B      `buffer_count` buffers, each: seq, len, write time (64 B) + `capacity` payload bytes
//! ```
//!
//! Protocol (one writer per slot, enforced by the registry; any number of readers):
//! the writer puts value `n` in buffer `n % buffer_count`: it stores `2n+1` (odd: being written)
//! in the buffer's seq, fences, writes the payload (a copy, or an encoding in place: `payload`),
//! stores `2n` (Release), then publishes `n` in `latest` (Release). A reader loads `latest`
//! (Acquire), checks the buffer's seq equals `2n`, copies or decodes in place, fences (Acquire)
//! and re-checks the seq; a change means the writer lapped it and it retries, discarding what it
//! read. A writer killed mid-write leaves one buffer odd, but `latest` still names the previous
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
use crate::shm::{load_acquire32, load_acquire64, Mapping};

pub const MAGIC: u64 = u64::from_le_bytes(*b"BATONSLT");
/// Version 2: the waiters word became 64 bits (an epoch and a count, see `waiters`).
pub const VERSION: u32 = 2;
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
const OFF_WAITERS: usize = 528;
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
/// How often `Slot::writer` reads a record that changes meanwhile before taking it as it is.
const TRIES_FOR_A_SETTLED_RECORD: u32 = 10_000;
pub(crate) const HEADER_SIZE: usize = 1024;
const BUF_SEQ: usize = 0;
const BUF_LEN: usize = 8;
const BUF_TIME: usize = 16;
const BUF_HEADER: usize = 64;

/// The buffer seq word of complete value `n` (`2n`; odd while it is being written). Wrapping:
/// a corrupt `latest` must give a mismatch, and so an error, not an overflow panic.
fn complete(n: u64) -> u64 {
    n.wrapping_mul(2)
}

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

impl WriterInfo {
    /// Whether the writer is marked alive and its process still runs. A writer marked alive
    /// whose process died while no registry ran to notice is not running.
    pub fn is_running(&self) -> bool {
        self.state == WriterState::Alive && crate::process::is_alive(self.pid, self.start_time)
    }
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
    /// Consecutive wakes by this handle's writes that found fewer sleepers than counted
    /// waiters (`waiters`).
    short_wakes: AtomicU32,
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

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Slot {
    pub fn name(&self) -> &SlotName {
        &self.name
    }

    pub fn segment(&self) -> &str {
        &self.segment
    }

    /// Whether the segment's name still stands for the memory mapped here (it does not once
    /// the segment was removed, or replaced by a new one).
    pub fn is_current(&self) -> bool {
        self.map.is_named(&self.segment)
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
        load_acquire64(self.word64(OFF_LATEST))
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
        let buf = self.buffer_offset(n);
        let seq = self.word64(buf + BUF_SEQ);
        seq.store(complete(n) | 1, Ordering::Relaxed);
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
        seq.store(complete(n), Ordering::Release);
        latest.store(n, Ordering::Release);
        // SeqCst RMW, then the SeqCst load of the waiters word in `wake_waiters`, against the
        // waiter's SeqCst count and notify load: either we see its count and wake it, or it
        // sees our new notify value and does not sleep. The notify word counts events
        // (writes, writer gone), so every event changes it.
        self.notify_word().fetch_add(1, Ordering::SeqCst);
        self.wake_waiters();
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
        let latest = self.word64(OFF_LATEST);
        let mut stalled = 0u32;
        let mut attempts = 0u64;
        loop {
            let n = load_acquire64(latest);
            if n == last_seen || n == 0 {
                return Ok(None);
            }
            let buf = self.buffer_offset(n);
            let seq = self.word64(buf + BUF_SEQ);
            let s1 = load_acquire64(seq);
            if s1 == complete(n) {
                let len = self.word64(buf + BUF_LEN).load(Ordering::Relaxed);
                if len > self.layout.capacity as u64 {
                    return Err(self.inconsistent(
                        n,
                        format!(
                            "stored length {len} exceeds capacity {}",
                            self.layout.capacity
                        ),
                    ));
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
            if load_acquire64(latest) == n {
                stalled += 1;
                if stalled > 1000 {
                    return Err(self.inconsistent(
                        n,
                        format!("latest value {n} points at a buffer holding sequence word {s1}"),
                    ));
                }
                std::thread::yield_now();
            } else {
                stalled = 0;
            }
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
            let buf = self.buffer_offset(n);
            let seq = self.word64(buf + BUF_SEQ);
            if load_acquire64(seq) == complete(n) {
                let time_ns = self.word64(buf + BUF_TIME).load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                if seq.load(Ordering::Relaxed) == complete(n) {
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
            let s1 = load_acquire64(seq);
            let n = s1 / 2;
            if s1 == 0 || s1 % 2 == 1 || n % self.layout.buffer_count != i {
                continue;
            }
            let len = self.word64(buf + BUF_LEN).load(Ordering::Relaxed);
            let time_ns = self.word64(buf + BUF_TIME).load(Ordering::Relaxed);
            // Pairs with the writer's Release fence, as in `read_in_place`: if len or time came
            // from a later write, the re-read sees that write's odd marker (or later).
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

    /// The writer's record. `set_writer` makes the record's version (a word of its own) odd
    /// before it stores the pid and start time, and even again when done; a record read
    /// between two equal even versions is one writer's, so a pid never goes with another
    /// process's start time (which would make a live writer look dead). A record that does not
    /// settle within `TRIES_FOR_A_SETTLED_RECORD` tries (well under a millisecond; off every
    /// hot path: those read `writer_state`) reads as it stands with its state `None`: its
    /// writer was stopped between its stores (preempted, or a registry killed there leaves the
    /// version odd), or it changes without pause; nothing can be said of it. The state word keeps
    /// its values (0 none, 1 alive, 2 gone): processes built before the version read it alike.
    pub fn writer(&self) -> WriterInfo {
        let version = self.word32(OFF_WRITER_VERSION);
        let mut tries = 0;
        loop {
            let v1 = load_acquire32(version);
            let pid = self.load32(OFF_WRITER_PID);
            let start_time = self.load64(OFF_WRITER_START);
            let state = self.writer_state();
            // Pairs with `set_writer`'s Release fence: if a load above saw a later record's pid
            // or start time, this load sees that record's odd version (or later).
            fence(Ordering::Acquire);
            let v2 = version.load(Ordering::Relaxed);
            tries += 1;
            if v1 == v2 && v1 % 2 == 0 {
                return WriterInfo {
                    pid,
                    start_time,
                    state,
                };
            }
            if tries == TRIES_FOR_A_SETTLED_RECORD {
                return WriterInfo {
                    pid,
                    start_time,
                    state: WriterState::None,
                };
            }
            std::hint::spin_loop();
        }
    }

    /// Whether the writer lives: one load, for the paths that check it on every update
    /// (subscription groups, arbiters).
    pub fn writer_state(&self) -> WriterState {
        // Builds of one afternoon kept a version above two state bits in this word: a segment
        // one of them wrote reads by its low bits.
        match self.load32(OFF_WRITER_STATE) & 0b11 {
            1 => WriterState::Alive,
            2 => WriterState::Gone,
            _ => WriterState::None,
        }
    }

    /// The state of the writer of value `sequence` (a value read from this slot; `None`: no
    /// value): the writer's state, except that a value from before the writer recorded now
    /// (`set_writer`'s `first_sequence`) is an earlier writer's, and that one is gone. A
    /// process that starts publishing a name whose last writer died does not make that
    /// writer's value live again before it writes its own: a robot controller restarted under
    /// the same name must not have its dead predecessor's command obeyed.
    pub fn writer_state_of(&self, sequence: Option<u64>) -> WriterState {
        self.state_of_value(self.writer_state(), sequence)
    }

    /// As `writer`, with the state of the writer of value `sequence` (`writer_state_of`).
    pub fn writer_of(&self, sequence: Option<u64>) -> WriterInfo {
        let writer = self.writer();
        WriterInfo {
            state: self.state_of_value(writer.state, sequence),
            ..writer
        }
    }

    /// `state`, the recorded writer's, as that of the writer of value `sequence`: gone if the
    /// value was written before the recorded writer's first (sequence 0 is never a value).
    fn state_of_value(&self, state: WriterState, sequence: Option<u64>) -> WriterState {
        let earlier = || sequence.is_some_and(|s| s != 0 && s < self.writer_first_sequence());
        if state == WriterState::Alive && earlier() {
            WriterState::Gone
        } else {
            state
        }
    }

    /// The first sequence that is the recorded writer's (`set_writer`; 0: every value).
    pub fn writer_first_sequence(&self) -> u64 {
        self.load64(OFF_WRITER_FIRST)
    }

    /// Sets the first sequence that is the writer's, the writer staying the same: a mirror's
    /// registry learns from the origin host which of the values it holds are its origin's
    /// running publisher's (see `set_writer`).
    pub fn set_writer_first_sequence(&self, first: u64) {
        // Release: with the values it dates, for a reader that loads it after them.
        self.word64(OFF_WRITER_FIRST)
            .store(first, Ordering::Release);
    }

    /// Records the slot's writer (registry, at registration): its values are those written from
    /// now on (`writer_state_of`); the value the slot holds, if any, is an earlier writer's (a
    /// mirror's registry dates what it holds with `set_writer_first_sequence`). The same live
    /// writer registering again (after a registry restart) changes nothing, so that its readers
    /// never see it as anything but alive; the same process registering again after it was
    /// marked gone (a registry that took it for dead, or closed its connection) keeps its first
    /// sequence: the values it wrote are still its own.
    pub fn set_writer(&self, pid: u32, start_time: u64) {
        let version = self.word32(OFF_WRITER_VERSION);
        let was = version.load(Ordering::Relaxed);
        let same_process =
            self.load32(OFF_WRITER_PID) == pid && self.load64(OFF_WRITER_START) == start_time;
        if same_process && self.writer_state() == WriterState::Alive && was % 2 == 0 {
            return;
        }
        let changing = was | 1;
        version.store(changing, Ordering::Relaxed);
        // Orders the odd version before the new pid and start time (see `writer`).
        fence(Ordering::Release);
        self.store32(OFF_WRITER_PID, pid);
        self.store64(OFF_WRITER_START, start_time);
        if !same_process {
            let first = self.latest_sequence().saturating_add(1);
            self.store64(OFF_WRITER_FIRST, first);
        }
        self.word32(OFF_WRITER_STATE).store(1, Ordering::Release);
        version.store(changing.wrapping_add(1), Ordering::Release);
    }

    /// Wakes everyone waiting on this slot, as a write would, without a value: a waiter
    /// re-checks what it waits for (a client wakes the waiters of memory the registry
    /// replaced, so that they learn it).
    pub fn wake_all_waiters(&self) {
        self.notify_word().fetch_add(1, Ordering::SeqCst);
        futex::wake_all(self.notify_word(), true);
    }

    /// Marks the writer gone (clean drop, or the registry saw its process die) and wakes
    /// waiters so that they can notice.
    pub fn mark_writer_gone(&self) {
        self.word32(OFF_WRITER_STATE).store(2, Ordering::Release);
        self.wake_all_waiters();
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

    /// The session (start time) of the origin registry that sent the latest reflected value;
    /// 0 when unknown. With `origin_sequence`, what a restarted registry resumes ordering from:
    /// a value of that session is taken only with a newer sequence.
    pub fn origin_session(&self) -> u64 {
        self.load64(OFF_ORIGIN_SESSION)
    }

    /// Stores the origin session of the value about to be written by the mirror's writer.
    pub fn set_origin_session(&self, session: u64) {
        self.word64(OFF_ORIGIN_SESSION)
            .store(session, Ordering::Release);
    }

    /// Which segment of its name this is (see `OFF_SERIES`); 0 when not known.
    pub fn series(&self) -> u64 {
        self.load64(OFF_SERIES)
    }

    /// In a mirror: the origin slot's series of the value held; 0 when unknown.
    pub fn origin_series(&self) -> u64 {
        self.load64(OFF_ORIGIN_SERIES)
    }

    /// Stores the origin series of the value about to be written by the mirror's writer.
    pub fn set_origin_series(&self, series: u64) {
        self.word64(OFF_ORIGIN_SERIES)
            .store(series, Ordering::Release);
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
        load_acquire32(self.word32(off))
    }

    fn load64(&self, off: usize) -> u64 {
        load_acquire64(self.word64(off))
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

mod segment;
#[cfg(test)]
mod tests;
mod waiters;

pub use waiters::{WaiterTicket, STALE_AFTER};
