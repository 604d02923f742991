//! The registry-maintained record in a slot's header (offsets 576 to 719): who writes the slot
//! (pid, process start time, alive or gone, the first sequence that is its own) and, in a
//! mirror of a remote slot, where its values come from (origin host, sequence, session and
//! series). The writer's record is versioned like a seqlock so that a pid is never read with
//! another process's start time.

use std::sync::atomic::{fence, Ordering};

use super::{
    Slot, OFF_ORIGIN, OFF_ORIGIN_LEN, OFF_ORIGIN_SEQ, OFF_ORIGIN_SERIES, OFF_ORIGIN_SESSION,
    OFF_SERIES, OFF_WRITER_ENDPOINT, OFF_WRITER_FIRST, OFF_WRITER_PID, OFF_WRITER_START,
    OFF_WRITER_STATE, OFF_WRITER_VERSION, ORIGIN_AREA,
};
use crate::futex;

/// How often `Slot::writer` reads a record that changes meanwhile before taking it as it is.
const TRIES_FOR_A_SETTLED_RECORD: u32 = 10_000;

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
    /// The publication's number in its process (`set_writer`; 0: not known); for a mirror,
    /// its registry's number for the origin host's publisher.
    pub endpoint: u64,
    pub state: WriterState,
}

/// Which writer wrote a value, beyond its pid: its process's start time and its publication's
/// number in that process; for a mirror of another host's slot, which of that host's
/// publishers (`origin_publisher_id`). Another `WriterId` is another writer, also under the
/// same pid: a process restarted, another publication of the same process, or the publisher on
/// the origin host restarted (the mirror's pid, its registry's, stays the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WriterId {
    pid: u32,
    start_time: u64,
    endpoint: u64,
}

impl WriterInfo {
    pub fn id(&self) -> WriterId {
        WriterId {
            pid: self.pid,
            start_time: self.start_time,
            endpoint: self.endpoint,
        }
    }

    /// The id of a mirror's writer: the origin's publisher alone (the number its registry
    /// records, `set_mirror_writer`). The process that writes the mirror is this computer's
    /// registry; restarted, it is no other writer to the mirror's readers.
    pub fn origin_publisher_id(&self) -> WriterId {
        WriterId {
            pid: 0,
            start_time: 0,
            endpoint: self.endpoint,
        }
    }

    /// Whether the writer is marked alive and its process still runs. A writer marked alive
    /// whose process died while no registry ran to notice is not running.
    pub fn is_running(&self) -> bool {
        self.state == WriterState::Alive && crate::process::is_alive(self.pid, self.start_time)
    }
}

impl Slot {
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
        let mut tries = 0;
        loop {
            let v1 = self.load32(OFF_WRITER_VERSION);
            let pid = self.load32(OFF_WRITER_PID);
            let start_time = self.load64(OFF_WRITER_START);
            let endpoint = self.load64(OFF_WRITER_ENDPOINT);
            let state = self.writer_state();
            // Pairs with `set_writer`'s Release fence: if a load above saw a later record's pid
            // or start time, this load sees that record's odd version (or later).
            fence(Ordering::Acquire);
            let v2 = self.relaxed32(OFF_WRITER_VERSION);
            tries += 1;
            if v1 == v2 && v1 % 2 == 0 {
                return WriterInfo {
                    pid,
                    start_time,
                    endpoint,
                    state,
                };
            }
            // An odd version this handle already gave up on, unchanged: a record left half
            // changed (its writer killed between its stores, or the word overwritten), which
            // every later call would spin on for as long again.
            let unsettled = v1 % 2 == 1 && v1 == v2;
            let stuck = unsettled && self.unsettled_version.load(Ordering::Relaxed) == v1;
            if tries == TRIES_FOR_A_SETTLED_RECORD || stuck {
                if unsettled {
                    self.unsettled_version.store(v1, Ordering::Relaxed);
                }
                return WriterInfo {
                    pid,
                    start_time,
                    endpoint,
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

    /// The writer of value `sequence`: the recorded writer (`writer`), or for a value from
    /// before it (`writer_state_of`) an earlier writer, gone, whose pid, start time and
    /// endpoint the slot no longer holds (all 0): the recorded writer's would name a process
    /// that did not write the value.
    pub fn writer_of(&self, sequence: Option<u64>) -> WriterInfo {
        let writer = self.writer();
        if self.is_earlier_writers(sequence) {
            return WriterInfo {
                pid: 0,
                start_time: 0,
                endpoint: 0,
                state: WriterState::Gone,
            };
        }
        writer
    }

    /// `state`, the recorded writer's, as that of the writer of value `sequence`: gone if the
    /// value was written before the recorded writer's first (sequence 0 is never a value).
    fn state_of_value(&self, state: WriterState, sequence: Option<u64>) -> WriterState {
        if state == WriterState::Alive && self.is_earlier_writers(sequence) {
            WriterState::Gone
        } else {
            state
        }
    }

    /// Whether value `sequence` was written before the recorded writer's first (sequence 0 is
    /// never a value).
    fn is_earlier_writers(&self, sequence: Option<u64>) -> bool {
        sequence.is_some_and(|s| s != 0 && s < self.writer_first_sequence())
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
    /// never see it as anything but alive; the same publication (`endpoint`, its number in its
    /// process) registering again after it was marked gone (a registry that took it for dead, or
    /// closed its connection) keeps its first sequence: the values it wrote are still its own.
    /// Another publication of the same process does not: the values of the one it dropped are
    /// a gone writer's until it writes. An `endpoint` of 0 (or one not recorded) is taken for
    /// the same publication.
    pub fn set_writer(&self, pid: u32, start_time: u64, endpoint: u64) {
        self.record_writer(pid, start_time, endpoint, false);
    }

    /// `set_writer` for a mirror's registry, whose writer process stays the same while the
    /// origin host's publisher changes: `endpoint` (its number for that publisher, not 0) is
    /// recorded, and another one is another writer (`WriterId`), also when 0 was recorded.
    pub fn set_mirror_writer(&self, pid: u32, start_time: u64, endpoint: u64) {
        self.record_writer(pid, start_time, endpoint, true);
    }

    fn record_writer(&self, pid: u32, start_time: u64, endpoint: u64, strict: bool) {
        let version = self.word32(OFF_WRITER_VERSION);
        let was = version.load(Ordering::Relaxed);
        let recorded = self.load64(OFF_WRITER_ENDPOINT);
        let same_endpoint = recorded == endpoint || (!strict && (recorded == 0 || endpoint == 0));
        let same_writer = self.load32(OFF_WRITER_PID) == pid
            && self.load64(OFF_WRITER_START) == start_time
            && same_endpoint;
        if same_writer && self.writer_state() == WriterState::Alive && was % 2 == 0 {
            return;
        }
        let changing = was | 1;
        version.store(changing, Ordering::Relaxed);
        // Orders the odd version before the new pid and start time (see `writer`).
        fence(Ordering::Release);
        self.store32(OFF_WRITER_PID, pid);
        self.store64(OFF_WRITER_START, start_time);
        self.store64(OFF_WRITER_ENDPOINT, endpoint);
        if !same_writer {
            let first = self.latest_sequence().saturating_add(1);
            self.store64(OFF_WRITER_FIRST, first);
        }
        let was_alive = self.writer_state() == WriterState::Alive;
        self.word32(OFF_WRITER_STATE).store(1, Ordering::Release);
        version.store(changing.wrapping_add(1), Ordering::Release);
        if !was_alive || !same_writer {
            // A writer that comes, or another one, is a change to a subscription group's
            // waiters (`SubscriptionGroup::wait_any`), as one that goes is
            // (`mark_writer_gone`): the value held may now be an earlier writer's.
            self.wake_all_waiters();
        }
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
}
