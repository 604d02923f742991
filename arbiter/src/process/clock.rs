//! The arbiter's two clocks. Block stamps and the stamps it publishes are on the wall clock
//! (the only clock computers share); a block's expiry is counted down on the monotonic clock
//! from when the arbiter read it (`algorithm::ReadAt`), so that the wall clock set back after
//! the read (NTP or GPS correcting it at boot, `date -s`) cannot keep a hung controller's
//! resources past its time to live, nor setting it forward expire every block at once.
//!
//! Test switch: `BATON_TEST_WALL_CLOCK_OFFSET_FILE` names a file holding a signed number of
//! seconds that this process adds to every wall-clock read, read again at each read, so that a
//! test can set the arbiter's clock back or forward while it runs (the machine's own clock is
//! not the test's to set). Unset, nothing is read.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::algorithm::ReadAt;
use crate::protocol::now_ns;

pub const OFFSET_FILE_ENV: &str = "BATON_TEST_WALL_CLOCK_OFFSET_FILE";

/// Nanoseconds on the monotonic clock expiries are counted by. It starts at one second, so
/// that the expiry of a block that expired before the arbiter started (0 at the earliest,
/// `ReadAt::on_clock`) is in its past from the first cycle on.
pub fn steady_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let elapsed = ORIGIN.get_or_init(Instant::now).elapsed();
    (elapsed + Duration::from_secs(1)).as_nanos() as u64
}

/// Nanoseconds since the Unix epoch, as this process's wall clock reads.
pub fn wall_ns() -> u64 {
    let now = now_ns();
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
