//! `watch` (print each new value of a slot) and `wait` (block until any of several slots
//! changes), both by polling sequence numbers read-only.
//!
//! Why polling and not the futex a subscription sleeps on: a subscriber registers in the slot's
//! waiter count before sleeping, and the writer makes the wake-up system call only when that
//! count is non-zero. Incrementing it would be a write to the bus (and would make every write of
//! the publisher pay a system call while we watch). Sleeping on the futex word *without*
//! registering is harmless but unreliable: the writer does not wake us unless some real
//! subscriber happens to wait too. So we load the slot's `latest` sequence (one atomic load on a
//! read-only mapping) every `poll` interval; the cost is a wake-up per interval, the latency at
//! most one interval, and the bus cannot tell that we look.

use std::time::{Duration, Instant};

use bus::slot::Slot;
use bus::{futex, BusError, Domain, SlotName};
use serde::Serialize;

use super::followed::Followed;
use super::remote::MirrorHold;
use super::slots::{read_newer, Reading};
use super::Error;
use super::Result;

/// How `watch` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// `--count` values were printed.
    Count,
    /// `--timeout` passed first.
    TimedOut,
    /// `--timeout` passed and the slot never existed meanwhile.
    NeverAppeared,
    /// The callback asked to stop (its output went away).
    Stopped,
}

/// Calls `each` with the current value (if any) and then with every new value seen, until
/// `count` values were passed, `timeout` passes, or `each` returns `false`. `skipped` (the
/// second argument) counts writes that happened between two polls and were never seen.
pub fn watch(
    domain: &Domain,
    name: &SlotName,
    count: Option<u64>,
    poll: Duration,
    timeout: Option<Duration>,
    mut each: impl FnMut(&Reading, u64) -> bool,
) -> Result<End> {
    let deadline = timeout.and_then(futex::deadline_after);
    let mut slot = Followed::new(domain, name)?;
    // A name only another computer publishes is mirrored here while the watch lasts.
    let mut hold = MirrorHold::new(name);
    let mut last = 0u64;
    let mut shown = 0u64;
    let mut existed = false;
    loop {
        if count.is_some_and(|c| shown >= c) {
            return Ok(End::Count);
        }
        // Checked before reading: a writer faster than the reader must not keep it past its
        // timeout.
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(if existed {
                End::TimedOut
            } else {
                End::NeverAppeared
            });
        }
        if slot.refresh(domain)? {
            // Appeared, or re-created by the registry: a new series of sequence numbers.
            if existed {
                eprintln!(
                    "bus-inspect: {name}: the registry made the slot anew; its sequence numbers \
                     start again"
                );
            }
            last = 0;
        }
        hold.keep(domain, slot.slot(), deadline);
        existed |= slot.slot().is_some();
        if let Some(s) = slot.slot() {
            let newer = match read_newer(s, last) {
                // A value that cannot be read (corrupt slot memory, bytes that do not decode)
                // is said and passed over; the writer's next value is followed.
                Err(Error::Bus(
                    e @ (BusError::Inconsistent { sequence, .. }
                    | BusError::Decode { sequence, .. }),
                )) if sequence != 0 => {
                    eprintln!("bus-inspect: {name}: passing over value {sequence}: {e}");
                    last = sequence;
                    continue;
                }
                other => other?,
            };
            if let Some(reading) = newer {
                let skipped = if last == 0 {
                    0
                } else {
                    reading.sequence.saturating_sub(last + 1)
                };
                last = reading.sequence;
                shown += 1;
                if !each(&reading, skipped) {
                    return Ok(End::Stopped);
                }
                continue;
            }
        }
        sleep_until_next_poll(poll, deadline);
    }
}

/// Sleeps one poll interval, or until `deadline` if that comes first.
fn sleep_until_next_poll(poll: Duration, deadline: Option<Instant>) {
    std::thread::sleep(poll.min(futex::time_left(deadline)));
}

/// A slot that changed during `wait`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Change {
    pub name: String,
    /// Its newest sequence number now.
    pub sequence: u64,
}

/// Blocks until the newest sequence of any of `names` differs from what it was at the start (a
/// slot that does not exist yet changes when it appears with a value). Returns every slot that
/// changed by the poll that noticed; empty when `timeout` passed first.
pub fn wait(
    domain: &Domain,
    names: &[SlotName],
    poll: Duration,
    timeout: Option<Duration>,
) -> Result<Vec<Change>> {
    let deadline = timeout.and_then(futex::deadline_after);
    let mut watched: Vec<(Followed, u64)> = Vec::new();
    for name in names {
        let slot = Followed::new(domain, name)?;
        let start = slot.slot().map_or(0, Slot::latest_sequence);
        watched.push((slot, start));
    }
    loop {
        let mut changed = Vec::new();
        for (slot, start) in &mut watched {
            if slot.refresh(domain)? {
                // Appeared, or re-created: it changes when it holds a value.
                *start = 0;
            }
            let now = slot.slot().map_or(0, Slot::latest_sequence);
            if now != *start {
                changed.push(Change {
                    name: slot.name().to_string(),
                    sequence: now,
                });
            }
        }
        if !changed.is_empty() {
            return Ok(changed);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Vec::new());
        }
        sleep_until_next_poll(poll, deadline);
    }
}
