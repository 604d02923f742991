//! The two clocks of whoever judges the age of what another process wrote (the arbiter a
//! controller's block, a driver the arbiter's command). Stamps are on the wall clock (the only
//! clock computers share); an age is taken from the wall clock when the value is first read,
//! and counted on from there on the monotonic clock (`ReadAt`), so that the wall clock set back
//! after the read (NTP or GPS correcting it at boot, `date -s`) cannot keep a hung writer's
//! value alive, nor setting it forward age every value at once.
//!
//! Test switch: `BATON_TEST_WALL_CLOCK_OFFSET_FILE` names a file holding a signed number of
//! seconds that this process adds to every wall-clock read, read again at each read, so that a
//! test can set a process's clock back or forward while it runs (the machine's own clock is
//! not the test's to set). Unset, nothing is read.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

pub const OFFSET_FILE_ENV: &str = "BATON_TEST_WALL_CLOCK_OFFSET_FILE";

/// Time since boot, suspended time included (CLOCK_BOOTTIME; `Instant` stops while the machine
/// sleeps).
pub fn since_boot() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map_or(Duration::ZERO, Duration::from)
}

/// Nanoseconds on the monotonic clock ages are counted on by: the boot-time clock
/// (`since_boot`), which goes on while the machine is suspended, so that a value read before a
/// suspension is as old after it as the wall clock says. It starts at one second at the
/// process's first read, so that the expiry of a value that expired before the process
/// started (0 at the earliest, `ReadAt::on_clock`) is in its past from the first read on.
pub fn steady_ns() -> u64 {
    static ORIGIN: OnceLock<Duration> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(since_boot);
    (since_boot().saturating_sub(origin) + Duration::from_secs(1)).as_nanos() as u64
}

/// Nanoseconds since the Unix epoch, as this process's wall clock reads.
pub fn wall_ns() -> u64 {
    let now = bus::slot::now_ns();
    match test_offset_s() {
        Some(s) if s >= 0 => now.saturating_add(s.unsigned_abs() * 1_000_000_000),
        Some(s) => now.saturating_sub(s.unsigned_abs() * 1_000_000_000),
        None => now,
    }
}

/// This instant on both clocks.
pub fn read_now() -> ReadAt {
    ReadAt {
        wall_ns: wall_ns(),
        clock_ns: steady_ns(),
    }
}

/// The test switch's offset in seconds; `None` when the switch is off (or its file holds no
/// number).
fn test_offset_s() -> Option<i64> {
    static FILE: OnceLock<Option<PathBuf>> = OnceLock::new();
    let file = FILE.get_or_init(|| {
        let file = std::env::var_os(OFFSET_FILE_ENV).map(PathBuf::from)?;
        tracing::warn!(
            "the wall clock is offset by the seconds in {} (a test switch, {OFFSET_FILE_ENV})",
            file.display()
        );
        Some(file)
    });
    std::fs::read_to_string(file.as_ref()?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The wall-clock instant a value stamped `stamp_ns` and first read at `read_wall_ns` has lived
/// `ttl_ns` by: a stamp later than the read (a faulty writer, or another computer's clock
/// ahead) counts from the read.
pub fn lives_until(stamp_ns: u64, read_wall_ns: u64, ttl_ns: u64) -> u64 {
    stamp_ns.min(read_wall_ns).saturating_add(ttl_ns)
}

/// When the value of `sequence` was first read, as `first` keeps it per sequence: a value read
/// again keeps its first read (its age counts from then), a new one counts as read `now`.
pub fn first_read(first: &mut Option<(u64, ReadAt)>, sequence: Option<u64>, now: ReadAt) -> ReadAt {
    match (*first, sequence) {
        (Some((seen, at)), Some(sequence)) if seen == sequence => at,
        _ => {
            *first = sequence.map(|s| (s, now));
            now
        }
    }
}

/// When a value was read: on the wall clock stamps are on, which tells the value's age, and on
/// the clock its expiry is counted by (`steady_ns` in the processes; the pure
/// `algorithm::arbitrate` counts on the wall clock, both the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadAt {
    pub wall_ns: u64,
    pub clock_ns: u64,
}

impl ReadAt {
    /// A read at `ns` of a clock that is both.
    pub fn wall(ns: u64) -> ReadAt {
        ReadAt {
            wall_ns: ns,
            clock_ns: ns,
        }
    }

    /// The instant `wall_ns` of the wall clock on the counting clock, as the two stood at this
    /// read (0 for an instant further in the past than the counting clock goes).
    pub fn on_clock(&self, wall_ns: u64) -> u64 {
        if wall_ns >= self.wall_ns {
            self.clock_ns.saturating_add(wall_ns - self.wall_ns)
        } else {
            self.clock_ns.saturating_sub(self.wall_ns - wall_ns)
        }
    }
}
