//! This registry's session number: what its peers use to tell its datagrams from those of an
//! earlier run (replay windows, mirrors' ordering). It must grow with every start.
//!
//! The start time in nanoseconds grows, unless the clock went back: a computer without a
//! real-time clock boots with an old time until it synchronises, and its peers would refuse
//! its datagrams as replays of an earlier run until they forget its windows. With a state file
//! the session is also above the last one recorded, so it grows whatever the clock does.

use std::io::Write;
use std::path::Path;

/// The session for a start at `wall_ns`: above the one `file` records (if it exists), which is
/// then replaced by the new one. `Err` says why the file could not be used; the caller then
/// has `wall_ns` only.
pub fn next(wall_ns: u64, file: &Path) -> Result<u64, String> {
    let previous = match std::fs::read_to_string(file) {
        Ok(text) => text.trim().parse::<u64>().map_err(|_| {
            format!(
                "{} does not hold a session number (remove it to start afresh)",
                file.display()
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(format!("reading {}: {e}", file.display())),
    };
    let session = wall_ns.max(previous.saturating_add(1)).max(1);
    record(session, file).map_err(|e| format!("writing {}: {e}", file.display()))?;
    Ok(session)
}

/// Writes `session` to `file` so that a crash never leaves it empty or half written: a
/// temporary file, flushed to disk, renamed over it.
fn record(session: u64, file: &Path) -> std::io::Result<()> {
    // The state directory is made if missing (systemd makes it for the unit), its parent
    // not: a mistyped path is refused, not made from the root down.
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::create_dir(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    let tmp = file.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    writeln!(f, "{session}")?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)?;
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_grow_even_when_the_clock_goes_back() {
        let dir = std::env::temp_dir().join(format!("baton-session-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // A missing state directory is made.
        let file = dir.join("net-session");
        assert_eq!(next(1_000, &file).unwrap(), 1_000, "first start: the clock");
        assert_eq!(next(5_000, &file).unwrap(), 5_000, "the clock went on");
        assert_eq!(next(10, &file).unwrap(), 5_001, "the clock went back");
        assert_eq!(next(10, &file).unwrap(), 5_002);
        std::fs::write(&file, "garbage").unwrap();
        let err = next(10, &file).unwrap_err();
        assert!(err.contains("does not hold a session number"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
        // Its parent is not.
        let err = next(10, &dir.join("no-such").join("net-session")).unwrap_err();
        assert!(err.contains("No such file or directory"), "{err}");
        assert!(!dir.exists());
    }
}
