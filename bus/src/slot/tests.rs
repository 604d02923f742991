//! The seqlock and the header validation, on segments of this process.

use super::*;
use crate::futex;
use std::sync::atomic::AtomicBool;

struct Scratch(String);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = crate::shm::unlink(&self.0);
    }
}

impl Scratch {
    /// Truncates the segment's file to 0 bytes under its mappings.
    fn cut_to_nothing(&self) {
        let path = format!("/dev/shm/{}", &self.0[1..]);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(0))
            .unwrap();
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

/// A capacity beyond the largest is refused, also one so close to the largest number that
/// rounding it up to 64 bytes wraps to 0 (a remote host's announcement may carry any).
#[test]
fn a_capacity_too_large_is_refused_even_where_rounding_would_wrap() {
    let seg = format!("/baton.unit-{}-huge~x", std::process::id());
    let schema = Schema::of_serde::<Vec<u8>>().unwrap();
    let name = SlotName::public("/x").unwrap();
    for capacity in [MAX_CAPACITY as usize + 1, usize::MAX - 10] {
        let e = Slot::create(&seg, &name, &schema, capacity, None).unwrap_err();
        assert!(
            matches!(e, SegmentError::TooLarge { .. }),
            "{capacity}: {e}"
        );
    }
    assert!(crate::shm::unlink(&seg).is_err(), "nothing made");
}

#[test]
fn a_write_interrupted_midway_is_invisible() {
    let (_s, slot) = new_slot("mid");
    slot.write(b"complete value").unwrap();
    // What a writer killed after half a payload and its length leaves behind: `latest` not
    // moved on.
    let index = buffer_index(slot.latest_sequence() + 1);
    slot.copy_in(slot.buffer_offset(index), b"garbage garbage garbage");
    slot.word32(length_offset(index))
        .store(23, Ordering::Relaxed);
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
    slot.word32(length_offset(buffer_index(1)))
        .store(u32::MAX, Ordering::Relaxed);
    let mut out = Vec::new();
    let err = slot.read(0, &mut out).unwrap_err();
    assert!(err.to_string().contains("exceeds capacity"), "{err}");
    assert!(matches!(err, BusError::Inconsistent { .. }), "{err}");
    // `latest` overwritten with a number no value had: it reads as the buffer it names holds
    // (here one never written, empty), and a sequence beyond any real one is no arithmetic
    // overflow. A type of fixed size finds the length wrong: an error.
    for latest in [99, u64::MAX] {
        slot.word64(OFF_LATEST).store(latest, Ordering::Release);
        let info = slot.read(0, &mut out).unwrap().unwrap();
        assert_eq!((info.sequence, out.len()), (latest, 0));
        let err = slot.read_exact(0, &mut [0u8; 3]).unwrap_err();
        assert!(matches!(err, BusError::Inconsistent { .. }), "{err}");
        assert_eq!(slot.last_write().map(|i| i.sequence), Some(latest));
    }
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
    // The fourth buffer holds value 3, but is the one value 7 goes into: left out.
    assert_eq!(seqs, vec![4, 5, 6]);
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

#[test]
fn waiter_counts_left_by_the_dead_are_dropped_after_stale_wakes() {
    let (_s, slot) = new_slot("stale");
    let dead = slot.count_waiter(); // never taken back: its process "died"
    let live = slot.count_waiter();
    assert_eq!(slot.waiter_count(), 2);
    for _ in 1..STALE_AFTER {
        slot.write(b"v").unwrap();
    }
    assert_eq!(
        slot.waiter_count(),
        2,
        "kept until STALE_AFTER wakes found fewer sleepers than counted"
    );
    let notify = slot.notify_word().load(Ordering::SeqCst);
    slot.write(b"v").unwrap();
    assert_eq!(slot.waiter_count(), 0);
    assert_eq!(slot.waiter_repairs(), 1);
    assert!(!slot.is_counted(&live), "a live waiter sees its count gone");
    // The write's bump and the repair's: a waiter that read the word before sleeps not.
    assert_eq!(
        slot.notify_word().load(Ordering::SeqCst),
        notify.wrapping_add(2)
    );
    // Taking back a dropped count changes nothing; a fresh count is counted.
    slot.uncount_waiter(dead);
    slot.uncount_waiter(live);
    assert_eq!(slot.waiter_count(), 0);
    let again = slot.count_waiter();
    assert!(slot.is_counted(&again));
    assert_eq!(slot.waiter_count(), 1);
    slot.uncount_waiter(again);
    assert_eq!(slot.waiter_count(), 0);
}

#[test]
fn a_write_that_finds_nobody_counted_ends_the_streak() {
    let (_s, slot) = new_slot("streak");
    let dead = slot.count_waiter();
    for _ in 1..STALE_AFTER {
        slot.write(b"v").unwrap();
    }
    slot.uncount_waiter(dead);
    slot.write(b"v").unwrap(); // nobody counted
    let _dead = slot.count_waiter();
    for _ in 1..STALE_AFTER {
        slot.write(b"v").unwrap();
    }
    assert_eq!(
        slot.waiter_repairs(),
        0,
        "a fresh streak of STALE_AFTER - 1"
    );
    slot.write(b"v").unwrap();
    assert_eq!(slot.waiter_repairs(), 1);
}

/// Forces the writer's next wake to repair (as after STALE_AFTER - 1 short wakes).
fn repair(slot: &Slot) {
    slot.short_wakes.store(STALE_AFTER - 1, Ordering::Relaxed);
    slot.wake_waiters();
}

/// The moments at which a repair can meet a live waiter (see `waiters`): before its check (it
/// does not sleep), after its check (its sleep returns at once), and asleep (woken: by the
/// writer's wake, which always comes first, and by the repair's).
#[test]
fn a_repair_never_leaves_a_live_waiter_asleep_uncounted() {
    let (_s, slot) = new_slot("repair-race");
    let _dead = slot.count_waiter();

    let ticket = slot.count_waiter();
    repair(&slot);
    assert_eq!(
        slot.notify_to_sleep_on(&ticket),
        None,
        "before the check: no sleep"
    );
    slot.uncount_waiter(ticket);

    let _dead = slot.count_waiter();
    let ticket = slot.count_waiter();
    let expected = slot.notify_to_sleep_on(&ticket).expect("still counted");
    repair(&slot);
    let started = std::time::Instant::now();
    let deadline = Some(started + Duration::from_secs(5));
    let wake = futex::wait(slot.notify_word(), expected, true, deadline);
    assert_eq!(wake, futex::Wake::Maybe(None));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "after the check: no sleep"
    );
    assert!(!slot.is_counted(&ticket));
    slot.uncount_waiter(ticket);

    let _dead = slot.count_waiter();
    std::thread::scope(|s| {
        let sleeper = s.spawn(|| {
            let ticket = slot.count_waiter();
            let expected = slot.notify_to_sleep_on(&ticket).expect("counted");
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            let wake = futex::wait(slot.notify_word(), expected, true, Some(deadline));
            slot.uncount_waiter(ticket);
            wake
        });
        // Asleep: counted (with the dead one), and given time to get into the kernel.
        while slot.waiter_count() < 2 {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(50));
        let started = std::time::Instant::now();
        repair(&slot);
        assert_eq!(sleeper.join().unwrap(), futex::Wake::Maybe(None));
        assert!(started.elapsed() < Duration::from_secs(1), "asleep: woken");
    });
}

/// The registry records the writer again each time it registers (after every registry
/// restart): the same live writer must read alive throughout, or an arbiter drops its command
/// for a cycle. And a record read while it changes is never half one writer, half another.
#[test]
fn the_writer_record_never_flickers() {
    let (_s, slot) = new_slot("writer");
    slot.set_writer(10, 1000, 1);
    // The state word keeps the values processes built before the record's version read.
    assert_eq!(slot.word32(OFF_WRITER_STATE).load(Ordering::Relaxed), 1);
    let reader = Slot::open(slot.segment(), false).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..200_000 {
                slot.set_writer(10, 1000, 1);
            }
            // At most a few seconds: on a machine loaded by other tests each yield may give the
            // CPU away for a time slice, and 200,000 of them took minutes.
            let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
            for i in 0..200_000u32 {
                // Two writers whose pid and start time always go together. A moment between
                // two changes, as between two registrations (a record that does not settle,
                // its writer preempted mid-change on a loaded machine, reads as none: see
                // `Slot::writer`).
                let pid = 11 + i % 2;
                slot.set_writer(pid, u64::from(pid) * 100, 1);
                std::thread::yield_now();
                if i % 1024 == 0 && std::time::Instant::now() > until {
                    break;
                }
            }
            done.store(true, Ordering::SeqCst);
        });
        let mut same_writer_reads = 0u64;
        while !done.load(Ordering::SeqCst) {
            let w = reader.writer();
            if w.pid == 10 {
                assert_eq!(
                    w.state,
                    WriterState::Alive,
                    "the same writer read not alive"
                );
                assert_eq!(w.start_time, 1000);
                same_writer_reads += 1;
            } else if w.state == WriterState::Alive {
                assert_eq!(
                    w.start_time,
                    u64::from(w.pid) * 100,
                    "one writer's pid with another's start time"
                );
            }
        }
        assert!(same_writer_reads > 0);
    });
}

/// A slot is another once its name stands for another file, or none; when the name cannot be
/// looked at (no file descriptor left), it is taken as the same: a process short of
/// descriptors must not take every slot for replaced.
#[test]
fn a_slot_is_replaced_only_when_its_name_is_seen_to_stand_for_another_file() {
    let (scratch, slot) = new_slot("current");
    assert!(slot.is_current());
    let limits = |soft: libc::rlim_t, hard: libc::rlim_t| libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    let mut before = limits(0, 0);
    // SAFETY: getrlimit writes one rlimit into the valid local.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut before) };
    assert_eq!(got, 0);
    // No descriptor above 2 can be opened now (this test runs in a process of its own).
    let none_left = limits(3, before.rlim_max);
    // SAFETY: setrlimit reads one valid rlimit.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &none_left) };
    assert_eq!(set, 0);
    let current = slot.is_current();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &before) }, 0);
    assert!(current, "taken for replaced when it could not be looked at");
    crate::shm::unlink(&scratch.0).unwrap();
    assert!(!slot.is_current(), "removed");
}

/// A record left half changed (a registry killed between its stores leaves the version odd)
/// reads as "none" in full, never as a live writer with a doubtful pid; the one-load state
/// the hot paths read is untouched.
#[test]
fn a_record_that_never_settles_reads_as_none() {
    let (_s, slot) = new_slot("unsettled");
    slot.set_writer(10, 1000, 1);
    slot.word32(OFF_WRITER_VERSION).store(7, Ordering::Relaxed);
    assert_eq!(slot.writer().state, WriterState::None);
    assert_eq!(slot.writer_state(), WriterState::Alive);
    // Given up on once, that version is not waited for again (every value's metadata reads
    // the record: a reader spun 10,000 times per value on it).
    assert_eq!(slot.unsettled_version.load(Ordering::Relaxed), 7);
    assert_eq!(slot.writer().state, WriterState::None);
    // The next registration settles it, also the same writer's.
    slot.set_writer(10, 1000, 1);
    let w = slot.writer();
    assert_eq!(
        (w.pid, w.start_time, w.state),
        (10, 1000, WriterState::Alive)
    );
}

/// A value from before the writer recorded now is an earlier writer's, gone; the new writer's
/// values are its own. Sequence 0 (no value) reads the record as it is, and so does a slot
/// whose first sequence is 0 (a mirror, or a segment made before the word was kept).
#[test]
fn a_value_from_before_the_writer_registered_is_a_gone_writers() {
    let (_s, slot) = new_slot("first");
    slot.set_writer(10, 1000, 1);
    slot.write(b"old").unwrap();
    slot.write(b"old").unwrap();
    assert_eq!(slot.writer_state_of(Some(2)), WriterState::Alive);
    slot.mark_writer_gone();
    slot.set_writer(11, 1100, 1);
    assert_eq!(slot.writer_state(), WriterState::Alive, "the record");
    assert_eq!(slot.writer_state_of(Some(2)), WriterState::Gone);
    assert_eq!(slot.writer_of(Some(2)).state, WriterState::Gone);
    // Its identity is not the recorded writer's, which did not write it: unknown.
    assert_eq!(slot.writer_of(Some(2)).pid, 0);
    assert_ne!(slot.writer_of(Some(2)).id(), slot.writer().id());
    assert_eq!(slot.writer_state_of(None), WriterState::Alive);
    assert_eq!(slot.writer_state_of(Some(0)), WriterState::Alive);
    slot.write(b"new").unwrap();
    assert_eq!(slot.writer_state_of(Some(3)), WriterState::Alive);
    // The same writer registering again (a registry restart) keeps its first sequence, also
    // after it was marked gone (a registry that took it for dead).
    slot.set_writer(11, 1100, 1);
    assert_eq!(slot.writer_state_of(Some(3)), WriterState::Alive);
    slot.mark_writer_gone();
    slot.set_writer(11, 1100, 1);
    assert_eq!(slot.writer_state_of(Some(3)), WriterState::Alive);
    // Another publication of the same process (it dropped the one that wrote): the value
    // held is a gone writer's until the new one writes (the API audit: it read as alive).
    slot.mark_writer_gone();
    slot.set_writer(11, 1100, 2);
    assert_eq!(slot.writer_state_of(Some(3)), WriterState::Gone);
    slot.write(b"newer").unwrap();
    assert_eq!(slot.writer_state_of(Some(4)), WriterState::Alive);
    // Every value counts as the writer's with first sequence 0.
    slot.mark_writer_gone();
    slot.set_writer(12, 1200, 1);
    slot.set_writer_first_sequence(0);
    assert_eq!(slot.writer_state_of(Some(2)), WriterState::Alive);
}

/// A segment cut short under a process that maps it: the next touch of a lost page used to
/// end the process with SIGBUS. It now reads zeroes there, the slot says what happened, and
/// the writes and reads that follow complete (into memory nobody else shares).
#[test]
fn a_segment_cut_short_under_the_mapping_is_damage_not_a_crash() {
    let (scratch, slot) = new_slot("cut");
    slot.write(&[7u8; 200]).unwrap();
    assert_eq!(slot.damage(), None);
    scratch.cut_to_nothing();
    assert_eq!(
        slot.damage().as_deref(),
        Some(
            format!(
                "its segment was cut to 0 of its {} bytes",
                slot.segment_size()
            )
            .as_str()
        )
    );
    // Every page is gone: the header's words, the value's buffer.
    let mut out = Vec::new();
    assert_eq!(slot.read(0, &mut out).unwrap(), None, "zeroes: no value");
    slot.write(&[8u8; 200]).unwrap();
    assert!(slot.read(0, &mut out).unwrap().is_some());
    assert_eq!(out, vec![8u8; 200]);
    assert_eq!(
        slot.damage().as_deref(),
        Some("its file was shrunk under the mapping (pages of it lost)")
    );
    assert!(!slot.is_current());
}

/// A read-only slot (tools open slots so) reads everything a reader needs, and refuses, with a
/// panic that says why, what would store into its memory: Rust allows no atomic access but a
/// Relaxed load on read-only memory (a store there faults), and these methods are safe.
#[test]
fn a_read_only_slot_reads_and_refuses_to_write() {
    let (_s, slot) = new_slot("ro");
    slot.write(b"value").unwrap();
    slot.set_writer(std::process::id(), 1, 1);
    let reader = Slot::open(slot.segment(), false).unwrap();
    let mut out = Vec::new();
    assert_eq!(reader.read(0, &mut out).unwrap().unwrap().sequence, 1);
    assert_eq!(out, b"value");
    assert_eq!(reader.last_write().unwrap().sequence, 1);
    assert_eq!(reader.buffer_stamps().len(), 1);
    assert_eq!(reader.writer().pid, std::process::id());
    assert_eq!(reader.waiter_count(), 0);
    assert_eq!(reader.origin_sequence(), 0);
    let writes = [
        Box::new(|r: &Slot| {
            let _ = r.write(b"x");
        }) as Box<dyn Fn(&Slot)>,
        Box::new(|r: &Slot| {
            let _ = r.count_waiter();
        }),
        Box::new(|r: &Slot| r.mark_writer_gone()),
        Box::new(|r: &Slot| r.set_origin_sequence(7)),
        Box::new(|r: &Slot| {
            let _ = r.notify_word();
        }),
    ];
    for (i, write) in writes.iter().enumerate() {
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write(&reader)));
        let message = refused.expect_err("a store into a read-only mapping");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(text.contains("read-only"), "write {i}: {text}");
    }
    // Nothing reached the memory.
    assert_eq!(slot.latest_sequence(), 1);
    assert_eq!(slot.origin_sequence(), 0);
}

/// An offset near the end of the address space is refused, not wrapped around to an address
/// before the mapping.
#[test]
#[should_panic(expected = "word32 at")]
fn a_word_offset_that_overflows_is_refused() {
    let (_s, slot) = new_slot("wrap");
    let _ = slot.map.word32(usize::MAX - 3);
}

/// A group's sleep on a slot whose segment was cut short since the group last touched it: the
/// kernel's read of the notify word fails (EFAULT, no SIGBUS for the kernel's own read). That
/// is a wake to look again, not a failure: the group took it for the "futex_waitv refused"
/// error, and an arbiter stopped on it. Once the word is touched, the next sleep times out.
#[test]
fn a_wait_on_a_word_whose_page_is_gone_is_a_wake_not_a_failure() {
    let (scratch, slot) = new_slot("waitv-cut");
    scratch.cut_to_nothing();
    let soon = || Some(std::time::Instant::now() + std::time::Duration::from_millis(20));
    let on = |expected| {
        [futex::WaitOn {
            word: slot.notify_word(),
            expected,
            shared: true,
        }]
    };
    assert!(matches!(
        futex::wait_any(&on(0), soon()),
        futex::Wake::Maybe(None)
    ));
    // The user-space read maps zeroes over the lost page (`shm::lost_pages`).
    let now = slot.notify_word().load(Ordering::SeqCst);
    assert!(matches!(
        futex::wait_any(&on(now), soon()),
        futex::Wake::TimedOut
    ));
}

/// A header whose name was overwritten (its length at the largest, its bytes zeroes) gives an
/// error of a readable length: the rule's message quoted all of it, each byte written out.
#[test]
fn an_overwritten_name_gives_a_short_error() {
    let (_s, slot) = new_slot("longname");
    slot.store32(OFF_NAME_LEN, NAME_AREA as u32);
    slot.copy_in(OFF_NAME, &[0u8; NAME_AREA]);
    let error = Slot::open(slot.segment(), false).unwrap_err().to_string();
    assert!(error.contains("name"), "{error}");
    assert!(
        error.chars().count() < 400,
        "{} chars: {error}",
        error.len()
    );
}
