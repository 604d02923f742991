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
use bus::{Domain, SlotName};
use serde::Serialize;

use super::slots::{read_newer, Reading};
use super::{Error, Result};

/// How `watch` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// `--count` values were printed.
    Count,
    /// `--timeout` passed first.
    TimedOut,
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
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut slot = open_if_there(domain, name)?;
    let mut last = 0u64;
    let mut shown = 0u64;
    loop {
        if count.is_some_and(|c| shown >= c) {
            return Ok(End::Count);
        }
        if slot.is_none() {
            slot = open_if_there(domain, name)?;
        }
        if let Some(s) = &slot {
            if let Some(reading) = read_newer(s, last)? {
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
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(End::TimedOut);
        }
        std::thread::sleep(poll);
    }
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
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut watched: Vec<(SlotName, Option<Slot>, u64)> = Vec::new();
    for name in names {
        let slot = open_if_there(domain, name)?;
        let start = slot.as_ref().map_or(0, Slot::latest_sequence);
        watched.push((name.clone(), slot, start));
    }
    loop {
        let mut changed = Vec::new();
        for (name, slot, start) in &mut watched {
            if slot.is_none() {
                *slot = open_if_there(domain, name)?;
            }
            let now = slot.as_ref().map_or(0, Slot::latest_sequence);
            if now != *start {
                changed.push(Change {
                    name: name.to_string(),
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
        std::thread::sleep(poll);
    }
}

fn open_if_there(domain: &Domain, name: &SlotName) -> Result<Option<Slot>> {
    match super::open(domain, name) {
        Ok(slot) => Ok(Some(slot)),
        Err(Error::NoSlot { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}
