//! Process identity: a pid alone is reused by the kernel, so a process is its pid plus its start
//! time (clock ticks since boot, field 22 of `/proc/<pid>/stat`).

/// A number from the system's randomness (through `RandomState`'s keys), mixed with the pid:
/// for ids that processes the registry cannot tell apart (another pid namespace) must not
/// share, and for a restarted process to tell its own from its predecessor's.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u32(std::process::id());
    random.finish()
}

/// Start time of `pid`, or `None` if no such process exists.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces or ')': skip past the
    // last ')'. Field 3 (state) is then the first, so starttime (22) is the 20th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `pid` that started at `start` still runs (and is not a zombie). Only a
/// process that is not there counts as dead: when `/proc` cannot be read for another reason (out
/// of file descriptors, say) the answer is "alive", so that a registry under pressure never
/// removes the endpoints of running processes.
pub fn is_alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat,
        Err(e) => {
            return e.kind() != std::io::ErrorKind::NotFound
                && e.raw_os_error() != Some(libc::ESRCH)
        }
    };
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    let mut fields = stat[close + 1..].split_whitespace();
    let state = fields.next();
    let started = fields.nth(18).and_then(|s| s.parse::<u64>().ok());
    state != Some("Z") && state != Some("X") && started == Some(start)
}

/// The pids of every process in this PID namespace's `/proc` (none if it cannot be read), in
/// no particular order. Some may have exited by the time they are looked at.
pub fn pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// This process's own start time.
pub fn own_start_time() -> u64 {
    start_time(std::process::id()).unwrap_or(0)
}

/// This process's program name, for listings.
pub fn own_program() -> String {
    std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "?".into())
}

/// The name of user `uid` (from the password database), if it has one.
pub fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(uid.into())
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// The name of user `uid`, or its number when it has none.
pub fn user_or_number(uid: u32) -> String {
    user_name(uid).unwrap_or_else(|| uid.to_string())
}

/// The name of group `gid`, or its number when it has none.
pub fn group_or_number(gid: u32) -> String {
    group_name(gid).unwrap_or_else(|| gid.to_string())
}

/// The name of group `gid` (from the group database), if it has one.
pub fn group_name(gid: u32) -> Option<String> {
    nix::unistd::Group::from_gid(gid.into())
        .ok()
        .flatten()
        .map(|g| g.name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_process_is_alive_and_a_wrong_start_time_is_not() {
        let pid = std::process::id();
        let start = super::start_time(pid).expect("own stat");
        assert!(super::is_alive(pid, start));
        assert!(!super::is_alive(pid, start + 1));
        assert!(!super::is_alive(u32::MAX - 1, start));
    }
}
