//! Forgetting slots nobody uses any more: a slot whose publisher is gone (on this host, or, for
//! a mirror, on its origin host) and that has no endpoint left. Such a slot keeps its last
//! value for a subscriber that comes later (a publisher that wrote once and exited is still
//! read), so public ones are kept up to a limit, `KeepUnused` (a number of slots and the
//! shared memory they take together), and the ones unused longest are forgotten first; without
//! the limit an application started under a new name each time (a script's
//! `robot-controller --name job-$N`) grew /dev/shm, the registry's mappings and its directory
//! slot without end. The memory bound matters as much as the count: a slot's segment holds its
//! capacity four times over, so a thousand kept 1 MiB slots would hold 4 GiB of /dev/shm
//! (which is RAM). A private slot (generated name, known only to whom its writer
//! told) is forgotten once unused for `PRIVATE_UNUSED_FOR`.
//!
//! A mirror whose publisher still runs on its origin host, or whose origin host keeps its gone
//! publisher's value (and announces it, `wire::PubInfo::kept`), and that nobody here subscribes
//! to any more is forgotten once unused for `MIRROR_UNUSED_FOR`, whatever the limit: while it
//! exists this host asks for its values (`Registry::wanted`), so keeping it would have every
//! write of the origin sent here for nobody (a camera stream once looked at from an operator's
//! laptop would go on crossing the radio link). Nothing is lost: a later subscriber asks again
//! and gets the current value from the origin, as the first one did. A mirror is kept under the
//! limit only when it holds the last copy this host can get: its origin no longer has it.
//!
//! A gone publisher's value kept here is forgotten at once, unused, when a publisher on another
//! host has written the name since: that value is newer, and every host follows it. Kept, the
//! old value would be offered again once that publisher is gone too, to be told from the newer
//! one only by the two hosts' clocks (`net::peers::keeps`).
//!
//! Forgetting unlinks the segment and unmaps it here. A process that still maps it (a
//! `bus-inspect` reading it without the registry) keeps its mapping; a publication or
//! subscription of the name registered later gets a new slot.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bus::slot::WriterState;
use bus::SlotName;

use super::{Registry, SlotEntry};

/// How long a private slot stays after its writer and its last reader are gone.
pub const PRIVATE_UNUSED_FOR: Duration = Duration::from_secs(5);

/// How long a mirror whose value its origin host still has (a running publisher there, or a
/// kept value) stays after its last subscriber here left (a subscriber restarted within it finds
/// the value still there and still followed).
pub const MIRROR_UNUSED_FOR: Duration = Duration::from_secs(5);

/// How many unused public slots are kept at most, and how much shared memory they may take
/// together (bytes of their segments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepUnused {
    pub slots: usize,
    pub bytes: u64,
}

/// The default of `--keep-unused`.
pub const DEFAULT_KEEP_UNUSED: usize = 1000;
/// The default of `--keep-unused-mib`.
pub const DEFAULT_KEEP_UNUSED_MIB: u64 = 256;

impl Default for KeepUnused {
    fn default() -> KeepUnused {
        KeepUnused {
            slots: DEFAULT_KEEP_UNUSED,
            bytes: DEFAULT_KEEP_UNUSED_MIB << 20,
        }
    }
}

impl SlotEntry {
    /// A slot with no endpoint and no live writer (see the module comment); not the registry's
    /// own. An adopted slot counts only once its processes had their time to register again.
    pub(super) fn unused(&self, now: Instant) -> bool {
        self.no_endpoint_left(now) && self.writer_state().is_some_and(|w| w != WriterState::Alive)
    }

    fn no_endpoint_left(&self, now: Instant) -> bool {
        self.own.is_none()
            && self.endpoints.is_empty()
            && self.adopted_until.is_none_or(|t| now >= t)
    }

    fn writer_state(&self) -> Option<WriterState> {
        self.slot.as_ref().map(|s| s.writer_state())
    }
}

impl Registry {
    /// Forgets `name`: its entry goes and its segment is unlinked. Whoever still maps it (a
    /// `bus-inspect watch`) sees that nothing writes it any more, a mirror's publisher running
    /// elsewhere or not.
    pub(super) fn forget_slot(&mut self, name: &SlotName) {
        self.unused_since.remove(name);
        if let Some(slot) = self.slots.remove(name).and_then(|e| e.slot) {
            slot.mark_writer_gone();
            if let Err(e) = super::foreign::remove(slot.segment()) {
                // Known no more, it would stay in /dev/shm unseen by the limits.
                tracing::warn!("{name}: forgotten, but its segment stays: {e}");
            }
        }
    }

    /// A mirror with no endpoint whose value its origin host still has: its publisher runs
    /// there, or the host keeps the gone publisher's value (see the module comment).
    fn unused_mirror_held_at_origin(&self, name: &SlotName, e: &SlotEntry, now: Instant) -> bool {
        let Some(origin) = &e.origin else {
            return false;
        };
        e.no_endpoint_left(now)
            && (e.writer_state() == Some(WriterState::Alive)
                || self
                    .remote
                    .get(name)
                    .is_some_and(|c| c.kept && &c.host == origin))
    }

    /// Forgets what the module comment says; returns the names forgotten. Called by the
    /// periodic sweep: the times are measured from the first sweep that saw a slot unused.
    pub fn reclaim_unused(&mut self, now: Instant) -> Vec<SlotName> {
        let mirrors_held_at_origin: BTreeSet<SlotName> = self
            .slots
            .iter()
            .filter(|(name, e)| self.unused_mirror_held_at_origin(name, e, now))
            .map(|(n, _)| n.clone())
            .collect();
        let superseded: BTreeSet<SlotName> = self
            .slots
            .iter()
            .filter(|(name, e)| {
                e.keeps_gone_value()
                    && e.no_endpoint_left(now)
                    && self
                        .remote
                        .get(*name)
                        .is_some_and(|c| !c.kept && c.writer_alive)
            })
            .map(|(n, _)| n.clone())
            .collect();
        let unused: BTreeSet<SlotName> = self
            .slots
            .iter()
            .filter(|(name, e)| e.unused(now) && !superseded.contains(name))
            .map(|(n, _)| n.clone())
            .chain(mirrors_held_at_origin.iter().cloned())
            .collect();
        self.unused_since.retain(|n, _| unused.contains(n));
        for name in &unused {
            self.unused_since.entry(name.clone()).or_insert(now);
        }
        // Unused since when, then (for slots seen unused at the same sweep: adopted at a
        // restart) since their last write; and the bytes of its segment.
        let mut public: Vec<(Instant, u64, &SlotName, u64)> = Vec::new();
        let mut forget: Vec<SlotName> = Vec::new();
        for (name, since) in &self.unused_since {
            if mirrors_held_at_origin.contains(name) {
                if now.duration_since(*since) >= MIRROR_UNUSED_FOR {
                    forget.push(name.clone());
                }
            } else if !name.is_private() {
                let slot = self.slots.get(name).and_then(|e| e.slot.as_ref());
                let written = slot
                    .and_then(|s| s.last_write())
                    .map_or(0, |w| w.write_time_ns);
                let bytes = slot.map_or(0, |s| s.segment_size() as u64);
                public.push((*since, written, name, bytes));
            } else if now.duration_since(*since) >= PRIVATE_UNUSED_FOR {
                forget.push(name.clone());
            }
        }
        public.sort();
        // The oldest go until what stays is within both bounds.
        let mut bytes: u64 = public.iter().map(|p| p.3).sum();
        let mut over = 0;
        while public.len() - over > self.keep_unused.slots || bytes > self.keep_unused.bytes {
            bytes -= public[over].3;
            over += 1;
        }
        forget.extend(public[..over].iter().map(|(_, _, n, _)| (*n).clone()));
        if let Some(first) = superseded.first() {
            tracing::info!(
                "forgot {} kept value(s) of gone publishers that a publisher on another host has \
                 replaced since, e.g. {first}",
                superseded.len()
            );
        }
        forget.extend(superseded.iter().cloned());
        for name in &forget {
            self.forget_slot(name);
        }
        let (mirrors, gone): (Vec<&SlotName>, Vec<&SlotName>) = forget
            .iter()
            .filter(|n| !superseded.contains(*n))
            .partition(|n| mirrors_held_at_origin.contains(*n));
        if let Some(first) = gone.first() {
            tracing::info!(
                "forgot {} unused slot(s) of gone publishers (keeping at most {} public ones of \
                 {} MiB in all, --keep-unused and --keep-unused-mib), e.g. {first}",
                gone.len(),
                self.keep_unused.slots,
                self.keep_unused.bytes >> 20,
            );
        }
        if let Some(first) = mirrors.first() {
            tracing::info!(
                "forgot {} mirror(s) nobody here subscribes to any more, e.g. {first}: their \
                 values are no longer asked for",
                mirrors.len(),
            );
        }
        forget
    }
}
