//! Warnings about what the network does wrong, said about once a minute per cause and subject
//! (a source address, a destination, a slot): a misconfiguration (a different key, a value over
//! a limit, a route gone) shows in the log, and a flood of datagrams does not flood it. The
//! counters in the statistics slot say how often; the log says what and where.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::lock;

/// How often one warning is said at most.
pub const EVERY: Duration = Duration::from_secs(60);
/// Most (cause, subject) pairs remembered: a forger can make up source addresses. Past it,
/// those said longer than `EVERY` ago are forgotten, and while it is still full nothing new is
/// said (the counters still count).
const MAX_SUBJECTS: usize = 256;

/// What a warning is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// Another registry uses this host name.
    NameClash,
    /// Datagrams whose MAC does not verify.
    BadMac,
    /// Datagrams with a MAC while this registry has no key.
    MacWithoutKey,
    /// Datagrams without a MAC while this registry has a key.
    Unauthenticated,
    /// Datagrams the kernel refused to send.
    SendError,
    /// Messages larger than `--max-value` allows.
    OverMaxValue,
    /// Messages larger than `--reassembly-limit`.
    OverReassemblyLimit,
    /// Datagrams of this domain in another wire version.
    OtherVersion,
    /// Valid datagrams of an older session than the one followed (a registry restarted with
    /// its clock set back, or replays).
    OlderRun,
    /// The statistics slot made anew that cannot be mapped (while /dev/shm is full, the
    /// registry has not made it yet).
    StatsSlot,
    /// A reflected slot's value that cannot be read (its memory corrupt): not sent.
    UnreadableValue,
    /// A reflected slot made anew (or larger) whose new segment cannot be mapped.
    Remap,
}

#[derive(Default)]
pub struct Warnings {
    said: std::sync::Mutex<HashMap<(Cause, String), Instant>>,
}

impl Warnings {
    /// Whether to say the warning of `cause` about `subject` now (and then not for `EVERY`).
    pub fn due(&self, cause: Cause, subject: &str) -> bool {
        self.due_at(cause, subject, Instant::now())
    }

    fn due_at(&self, cause: Cause, subject: &str, now: Instant) -> bool {
        let mut said = lock(&self.said);
        let key = (cause, subject.to_owned());
        if said
            .get(&key)
            .is_some_and(|at| now.saturating_duration_since(*at) < EVERY)
        {
            return false;
        }
        if !said.contains_key(&key) && said.len() >= MAX_SUBJECTS {
            said.retain(|_, at| now.saturating_duration_since(*at) < EVERY);
            if said.len() >= MAX_SUBJECTS {
                return false;
            }
        }
        said.insert(key, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_and_subject_is_said_once_a_minute_and_the_record_is_bounded() {
        let w = Warnings::default();
        let t0 = Instant::now();
        assert!(w.due_at(Cause::BadMac, "10.0.0.1", t0));
        assert!(!w.due_at(Cause::BadMac, "10.0.0.1", t0 + Duration::from_secs(59)));
        assert!(w.due_at(Cause::BadMac, "10.0.0.2", t0), "another source");
        assert!(
            w.due_at(Cause::Unauthenticated, "10.0.0.1", t0),
            "another cause"
        );
        assert!(w.due_at(Cause::BadMac, "10.0.0.1", t0 + EVERY));
        for i in 0..2 * MAX_SUBJECTS {
            w.due_at(Cause::BadMac, &format!("forged {i}"), t0 + EVERY);
        }
        assert!(lock(&w.said).len() <= MAX_SUBJECTS);
        assert!(!w.due_at(Cause::BadMac, "one more", t0 + EVERY));
        assert!(
            w.due_at(Cause::BadMac, "one more", t0 + 3 * EVERY),
            "old ones go"
        );
    }
}
