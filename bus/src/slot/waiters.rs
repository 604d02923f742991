//! Who may be asleep on a slot, so that a writer makes the futex wake system call only when
//! someone may be.
//!
//! The waiters word (64 bits at offset 776, beside the notify word on a cache line of their
//! own, away from the value line that readers poll) holds a count (low 32 bits) and an
//! epoch (high 32 bits). A waiter adds one to the count before it reads the notify word and
//! sleeps, and takes its one back afterwards; a writer bumps the notify word and then wakes it
//! if the count is not zero. Both sides use SeqCst, so either the writer sees the count or the
//! waiter sees the new notify value and does not sleep.
//!
//! A waiter killed while counted (SIGKILL during `wait_update`, or a process holding a group)
//! never takes its one back, and without repair every later write would pay a wake system call
//! that finds nobody. So once a writer's wakes have found fewer sleepers than counted waiters
//! [`STALE_AFTER`] times in a row, it drops every count: it moves the word to the next epoch
//! with a count of zero, then bumps the notify word and wakes it. A live waiter whose count was
//! dropped finds out:
//! - asleep: that wake wakes it; it re-checks, sees its ticket's epoch gone and counts again;
//! - between counting and sleeping: it checks its ticket after reading the notify word
//!   ([`Slot::notify_to_sleep_on`]). If the epoch moved before that check it does not sleep. If
//!   it moved after, the repair's notify bump came after the waiter's read, so the futex wait
//!   returns at once or the repair's wake reaches it.
//!
//! So a repair is safe whenever it happens, and dropping a live waiter's count costs it one
//! spurious wake-up. (The repair is a compare-and-swap against the value the writer saw only to
//! skip it when waiters came or went meanwhile.) A writer that dies between the repair's swap
//! and its notify bump leaves dropped sleepers asleep until the next event that wakes the word
//! whatever the count: its writer marked gone (the registry does that for a dead writer).
//!
//! A waiter takes its one back only while the epoch is still its ticket's, and a ticket is
//! taken back at most once (it is consumed), so a repair never leaves the count too small. A
//! stale ticket could match again only after 2^32 repairs (each needs 64 writes) while it is
//! held without a wait.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Slot, OFF_WAITERS};
use crate::futex;

/// Wakes in a row that found fewer sleepers than counted waiters, after which a writer drops the
/// counts as stale. Live waiters are counted while not asleep only for moments (between counting
/// and sleeping) or while a group handles a change, so they cost at most a spurious wake-up per
/// this many writes; a dead one costs writers this many wake calls, once.
pub const STALE_AFTER: u32 = 64;

const COUNT_MASK: u64 = 0xffff_ffff;
const EPOCH_ONE: u64 = 1 << 32;

/// A waiter's count on one slot (`Slot::count_waiter`): the epoch of the waiters word it was
/// added to. Not `Copy`: `Slot::uncount_waiter` consumes it, so a count is taken back once.
#[derive(Debug, PartialEq, Eq)]
pub struct WaiterTicket {
    epoch: u64,
}

impl Slot {
    fn waiters_word(&self) -> &AtomicU64 {
        self.word64(OFF_WAITERS)
    }

    /// Counts the caller as a waiter, before it reads the notify word to sleep on it
    /// ([`Slot::notify_to_sleep_on`]).
    pub fn count_waiter(&self) -> WaiterTicket {
        let before = self.waiters_word().fetch_add(1, Ordering::SeqCst);
        WaiterTicket {
            epoch: before & !COUNT_MASK,
        }
    }

    /// Whether `ticket`'s count still stands: no writer has dropped the counts since, and the
    /// count includes it (a count of 0 with the ticket's epoch is a word overwritten under
    /// the waiter, which writers would never wake).
    pub fn is_counted(&self, ticket: &WaiterTicket) -> bool {
        let word = self.waiters_word().load(Ordering::SeqCst);
        word & !COUNT_MASK == ticket.epoch && word & COUNT_MASK != 0
    }

    /// The notify word's value to sleep against, read after counting `ticket`; `None` when a
    /// writer dropped the count meanwhile (do not sleep: check again, and count again).
    pub fn notify_to_sleep_on(&self, ticket: &WaiterTicket) -> Option<u32> {
        let expected = self.notify_word().load(Ordering::SeqCst);
        self.is_counted(ticket).then_some(expected)
    }

    /// Takes back the count `ticket` added, unless a writer has dropped it already.
    pub fn uncount_waiter(&self, ticket: WaiterTicket) {
        let _ = self
            .waiters_word()
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                (w & !COUNT_MASK == ticket.epoch && w & COUNT_MASK != 0).then(|| w - 1)
            });
    }

    /// How many waiters are counted now (those asleep, about to sleep, or groups between
    /// waits; until repaired, also waiters that died).
    /// A statistic: a Relaxed load, allowed on a read-only slot.
    pub fn waiter_count(&self) -> u32 {
        (self.relaxed64(OFF_WAITERS) & COUNT_MASK) as u32
    }

    /// How many times writers dropped this slot's waiter counts as stale since it was created.
    /// A statistic, as `waiter_count`.
    pub fn waiter_repairs(&self) -> u32 {
        (self.relaxed64(OFF_WAITERS) >> 32) as u32
    }

    /// The writer's side, after it bumped the notify word (SeqCst): wakes the word if anyone is
    /// counted, and drops the counts once `STALE_AFTER` wakes in a row found fewer sleepers
    /// than counted waiters. The streak is this handle's (the slot's one writer); a write that
    /// finds nobody counted ends it.
    pub(super) fn wake_waiters(&self) {
        // `short_wakes` is process-local and written only by this handle's writes: Relaxed.
        let seen = self.waiters_word().load(Ordering::SeqCst);
        let counted = seen & COUNT_MASK;
        if counted == 0 {
            if self.short_wakes.load(Ordering::Relaxed) != 0 {
                self.short_wakes.store(0, Ordering::Relaxed);
            }
            return;
        }
        // Futex queue entries woken: a group waiting on two members of this slot counts twice,
        // which only delays a repair.
        let woken = futex::wake_all(self.notify_word(), true) as u64;
        if woken >= counted {
            self.short_wakes.store(0, Ordering::Relaxed);
            return;
        }
        let short = self.short_wakes.load(Ordering::Relaxed) + 1;
        if short < STALE_AFTER {
            self.short_wakes.store(short, Ordering::Relaxed);
            return;
        }
        self.short_wakes.store(0, Ordering::Relaxed);
        let next_epoch = (seen & !COUNT_MASK).wrapping_add(EPOCH_ONE);
        if self
            .waiters_word()
            .compare_exchange(seen, next_epoch, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.notify_word().fetch_add(1, Ordering::SeqCst);
            futex::wake_all(self.notify_word(), true);
        }
    }
}
