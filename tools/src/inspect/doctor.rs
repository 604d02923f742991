//! `doctor`: health checks of a domain on this computer, and the stale segments that `clean`
//! removes. Everything here reads: `/dev/shm`, the segments (read-only), `/proc` (which
//! processes map a segment, the registry's command line and network routes) and the registry's
//! `Hello`/`List`.
//!
//! A segment is *stale* when nothing can use it any more:
//! - without a running registry: no process maps it and its writer does not run (or its header
//!   is unreadable). A restarted registry would adopt it, but nobody is left to need it.
//! - with a registry that refuses this user: none. Which slots have endpoints only the registry
//!   can say, and a segment this user may not read tells nothing (not even its header).
//! - with a running registry, which maps every slot: only a private slot (named `%<pid>-...`,
//!   reachable by no one but its dead creator) whose writer does not run, for which the registry
//!   lists no endpoint and which no other process maps. Public slots of a running registry are
//!   never stale: a publisher may come back.
//!
//! Processes are matched to segments by device and inode, not by path, so segments of another
//! mount namespace (another "host" of the test lab) with the same name never count.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use bus::slot::WriterState;
use bus::{Domain, SlotName};
use serde::Serialize;

use super::net::{self, Check, Status};

/// A segment `clean` would remove.
#[derive(Debug, Serialize, Clone)]
pub struct Stale {
    pub name: String,
    pub path: PathBuf,
    pub reason: String,
    #[serde(skip)]
    id: (u64, u64),
}

/// What `doctor` found.
#[derive(Debug, Serialize)]
pub struct Report {
    pub domain: String,
    pub checks: Vec<Check>,
    pub stale: Vec<Stale>,
    /// Why no segment could be judged stale (the registry refuses this user), if so: `clean`
    /// then removes nothing and says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_unknown: Option<String>,
}

impl Report {
    /// `true` when a check failed (doctor then exits non-zero).
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
    }
}

/// The pids that map each file, by device and inode.
type Mapped = HashMap<(u64, u64), Vec<u32>>;

/// Device and inode of every file each process maps, except this process; plus the processes
/// whose maps could not be read (other users' processes when not root; as root, processes
/// protected from it, such as another user namespace's), in pid order.
fn mapped_files() -> (Mapped, Vec<u32>) {
    let me = std::process::id();
    let mut mapped = Mapped::new();
    let mut unreadable = Vec::new();
    for pid in bus::process::pids() {
        if pid == me {
            continue;
        }
        let maps = match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            Ok(maps) => maps,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                unreadable.push(pid);
                continue;
            }
            // The process exited meanwhile.
            Err(_) => continue,
        };
        for line in maps.lines().filter(|l| l.contains("/dev/shm/")) {
            // address perms offset dev(major:minor, hex) inode path
            let mut f = line.split_whitespace();
            let (Some(dev), Some(inode)) = (f.nth(3), f.next()) else {
                continue;
            };
            let Some((major, minor)) = dev.split_once(':') else {
                continue;
            };
            let (Ok(major), Ok(minor), Ok(inode)) = (
                u64::from_str_radix(major, 16),
                u64::from_str_radix(minor, 16),
                inode.parse::<u64>(),
            ) else {
                continue;
            };
            let dev = libc::makedev(major as u32, minor as u32);
            let pids = mapped.entry((dev, inode)).or_default();
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
    }
    unreadable.sort_unstable();
    (mapped, unreadable)
}

/// How many unreadable processes `doctor` names before it only counts.
const NAMED_UNREADABLE: usize = 5;

/// What the segments check says of processes whose memory maps it could not read (`pids`, in
/// order; `program` names one): a segment only they map looks unused. Running as root would
/// show other users' processes, so a user is told to; root is told which processes they are.
fn unreadable_maps(pids: &[u32], root: bool, program: impl Fn(u32) -> Option<String>) -> String {
    let n = pids.len();
    if n == 0 {
        return String::new();
    }
    if !root {
        return format!(
            "; the memory maps of {n} process(es) are unreadable (other users' or protected \
             processes): run as root to be sure a segment is unused"
        );
    }
    let mut named: Vec<String> = pids
        .iter()
        .take(NAMED_UNREADABLE)
        .map(|&pid| program(pid).map_or(format!("pid {pid}"), |p| format!("pid {pid} ({p})")))
        .collect();
    if n > NAMED_UNREADABLE {
        named.push(format!("{} more", n - NAMED_UNREADABLE));
    }
    format!(
        "; the memory maps of {n} process(es) are unreadable even as root: {}; a segment only \
         they map would look unused",
        named.join(", ")
    )
}

/// Runs every check on `domain`.
pub fn diagnose(domain: &Domain) -> Report {
    let mut checks = Vec::new();
    let registry = super::registry::answers(domain);
    checks.push(match &registry {
        Ok(pid) => Check::new(
            "registry",
            Status::Ok,
            format!(
                "registry-server pid {pid} answers on @{}{}",
                domain.registry_socket(),
                net::cmdline(*pid).map_or(String::new(), |c| format!(" ({})", c.join(" ")))
            ),
        ),
        Err(none) => Check::new("registry", Status::Fail, none.to_string()),
    });
    let registry_pid = registry.as_ref().ok().copied();
    let refused = registry.as_ref().is_err_and(|e| e.refuses);
    // A registry that listens but does not answer runs all the same: nothing it may still
    // serve is called stale, and `clean` removes nothing.
    let silent = registry.as_ref().is_err_and(|e| e.silent);
    let registry_runs = registry_pid.is_some() || refused || silent;
    let listing = super::registry::listing(domain).ok();
    let with_endpoints: HashSet<SlotName> = listing
        .iter()
        .flatten()
        .filter(|s| !s.endpoints.is_empty())
        .map(|s| s.name.clone())
        .collect();
    let files = domain.segment_files().unwrap_or_default();
    let (mapped, unreadable) = mapped_files();
    let root = nix::unistd::geteuid().is_root();
    let mut stale = Vec::new();
    let mut modes: Vec<String> = Vec::new();
    let mut owners = HashSet::new();
    let mut corrupt = Vec::new();
    // Segments this user may not read and write (not in their group): the bus is closed to it.
    let mut denied = 0;
    for (name, path) in &files {
        // The file under the name, not what a symbolic link there leads to (whose mode and
        // owner are another file's; the bus never opens a segment through a link). One that is
        // not a regular file has no mode or owner of a segment to judge: opening it says what
        // it is (below).
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        let id = (meta.dev(), meta.ino());
        if meta.file_type().is_file() {
            let mode = meta.mode() & 0o777;
            if mode != 0o660 {
                modes.push(format!("{name} has mode {mode:04o}"));
            }
            owners.insert((meta.uid(), meta.gid()));
        }
        // As this process's effective user and groups, the ones named; a file gone meanwhile
        // (a slot reclaimed or made anew) is not refused.
        let rw = nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::W_OK;
        // (Of a link, `eaccess` would judge the file it leads to.)
        if let (true, Err(nix::Error::EACCES | nix::Error::EPERM)) = (
            meta.file_type().is_file(),
            nix::unistd::eaccess(path.as_path(), rw),
        ) {
            // Nothing is known of a segment this user may not read: neither its header nor
            // (as a rule) which processes map it. The permissions row says why.
            denied += 1;
            continue;
        }
        let users: Vec<u32> = mapped
            .get(&id)
            .map(|p| {
                p.iter()
                    .copied()
                    .filter(|p| Some(*p) != registry_pid)
                    .collect()
            })
            .unwrap_or_default();
        let writer = match super::open(domain, name) {
            Ok(slot) => {
                // A whole header over a value that cannot be read (a stored length beyond the
                // capacity, say) is a slot nobody reads either, as `list` says; its header
                // still tells who wrote it, for the stale rows.
                if let Err(e) = slot.read(0, &mut Vec::new()) {
                    corrupt.push(format!("{name}: {e}"));
                }
                Some(slot.writer())
            }
            Err(e) => {
                corrupt.push(format!("{name}: {e}"));
                None
            }
        };
        let writer_runs = writer.is_some_and(|w| w.is_running());
        let what = match writer {
            None => "unreadable header".to_owned(),
            Some(w) if w.state == WriterState::None => "never written".to_owned(),
            Some(w) => format!("writer pid {} gone", w.pid),
        };
        let is_stale = if refused || silent {
            // Which slots have endpoints only the registry can say, and it does not answer
            // this user: nothing counts as stale (the stale row says why).
            false
        } else if registry_runs {
            // A private slot nobody uses, or one whose header the registry could not read (so
            // did not adopt: damaged, or another build's layout), which only a process using
            // its name would have it replace.
            (name.is_private() || writer.is_none())
                && !writer_runs
                && !with_endpoints.contains(name)
                && users.is_empty()
        } else {
            !writer_runs && users.is_empty()
        };
        if is_stale {
            stale.push(Stale {
                name: name.to_string(),
                path: path.clone(),
                reason: if registry_runs && writer.is_none() {
                    format!("{what}: not adopted by the registry, no endpoint")
                } else if registry_runs {
                    format!("private slot, {what}, no endpoint")
                } else if !root && !unreadable.is_empty() {
                    format!("no registry, {what}, mapped by no process this user can see")
                } else {
                    format!("no registry, {what}, mapped by no process")
                },
                id,
            });
        }
    }
    let seg_detail = format!(
        "{} segment(s) in {}{}",
        files.len(),
        bus::names::SHM_DIR,
        unreadable_maps(&unreadable, root, super::program_of)
    );
    checks.push(Check::new(
        "segments",
        // A segment that cannot be read is a slot nobody can use (as `list` exits 1 on it).
        if corrupt.is_empty() {
            Status::Ok
        } else {
            Status::Fail
        },
        if corrupt.is_empty() {
            seg_detail
        } else {
            format!("{seg_detail}; unreadable: {}", corrupt.join("; "))
        },
    ));
    let stale_unknown = if refused {
        Some(
            "the registry refuses this user, so which slots are in use is not known here (run \
             as root or as a member of the registry's --group)"
                .to_owned(),
        )
    } else {
        silent.then(|| {
            "the registry does not answer, so which slots are in use is not known here (its \
             log says why)"
                .to_owned()
        })
    };
    checks.push(if let Some(why) = &stale_unknown {
        Check::new("stale", Status::Skip, format!("cannot tell: {why}"))
    } else if stale.is_empty() {
        Check::new("stale", Status::Ok, "no stale segment".into())
    } else {
        let names: Vec<&str> = stale.iter().map(|s| s.name.as_str()).collect();
        Check::new(
            "stale",
            Status::Warn,
            format!(
                "{} stale segment(s): {}; `bus-inspect --domain {domain} clean` removes them",
                stale.len(),
                names.join(", ")
            ),
        )
    });
    checks.push(permissions(&modes, &owners, registry_pid, denied));
    let others = super::registry::other_domains(domain);
    if !others.is_empty() {
        checks.push(Check::new(
            "other domains",
            Status::Ok,
            format!("segments of other domains here: {}", others.join(", ")),
        ));
    }
    checks.extend(net::checks(domain, registry_pid, refused));
    Report {
        domain: domain.to_string(),
        checks,
        stale,
        stale_unknown,
    }
}

fn permissions(
    modes: &[String],
    owners: &HashSet<(u32, u32)>,
    registry: Option<u32>,
    denied: usize,
) -> Check {
    if denied > 0 {
        let user = bus::process::user_or_number(nix::unistd::geteuid().as_raw());
        return Check::new(
            "permissions",
            Status::Fail,
            format!(
                "this user ({user}) may not read and write {denied} segment(s): add it to the \
                 segments' group (the registry's --group), or run as their owner"
            ),
        );
    }
    if !modes.is_empty() {
        return Check::new(
            "permissions",
            Status::Warn,
            format!(
                "segments should be mode 0660 (owner and group read/write): {}",
                modes.join(", ")
            ),
        );
    }
    let names = |(uid, gid): (u32, u32)| {
        let user = bus::process::user_or_number(uid);
        let group = bus::process::group_or_number(gid);
        format!("{user}:{group}")
    };
    let list: Vec<String> = owners.iter().copied().map(names).collect();
    let wanted = registry.and_then(net::registry_group);
    match (owners.len(), wanted) {
        (0, _) => Check::new("permissions", Status::Ok, "no segment to check".into()),
        (1, Some(gid)) if owners.iter().any(|o| o.1 != gid) => Check::new(
            "permissions",
            Status::Warn,
            format!(
                "segments belong to {}, the registry gives access to group {gid}: processes of \
                 that group cannot open them",
                list.join(", ")
            ),
        ),
        (1, _) => Check::new(
            "permissions",
            Status::Ok,
            format!("mode 0660, owner {}", list.join(", ")),
        ),
        _ => Check::new(
            "permissions",
            Status::Warn,
            format!(
                "segments have different owners ({}): a process may lack access to some",
                list.join(", ")
            ),
        ),
    }
}

/// What `clean` did with one stale segment.
#[derive(Debug, Serialize)]
pub struct Removed {
    pub name: String,
    pub removed: bool,
    pub error: Option<String>,
}

/// Removes the stale segments found by `diagnose`, each only if its file is still the same one
/// (same device and inode), so a segment re-created since is left alone.
pub fn clean(stale: &[Stale]) -> Vec<Removed> {
    stale
        .iter()
        .map(|s| {
            let same = std::fs::metadata(&s.path).is_ok_and(|m| (m.dev(), m.ino()) == s.id);
            let result = if same {
                std::fs::remove_file(&s.path).map_err(|e| {
                    if e.kind() != std::io::ErrorKind::PermissionDenied {
                        return e.to_string();
                    }
                    // /dev/shm is sticky: only a file's owner and root may remove it.
                    let owner = std::fs::metadata(&s.path).map_or("another user".into(), |m| {
                        bus::process::user_or_number(m.uid())
                    });
                    let who = if owner == "root" {
                        owner.clone()
                    } else {
                        format!("{owner} or as root")
                    };
                    format!("{e}: it belongs to {owner}; run clean as {who}")
                })
            } else {
                Err("changed since it was found stale; left alone".into())
            };
            Removed {
                name: s.name.clone(),
                removed: result.is_ok(),
                error: result.err(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::unreadable_maps;

    #[test]
    fn unreadable_processes_are_counted_for_a_user_and_named_for_root() {
        let program = |pid: u32| (pid == 1).then(|| "init".to_owned());
        assert_eq!(unreadable_maps(&[], true, program), "");
        let user = unreadable_maps(&[1, 40], false, program);
        assert!(
            user.contains("2 process(es)") && user.contains("run as root"),
            "{user}"
        );
        let root = unreadable_maps(&[1, 40], true, program);
        assert!(!root.contains("run as root"), "{root}");
        assert!(
            root.contains("even as root: pid 1 (init), pid 40;"),
            "{root}"
        );
        let many: Vec<u32> = (1..=8).collect();
        let root = unreadable_maps(&many, true, program);
        assert!(
            root.contains("pid 5, 3 more;") && !root.contains("pid 6"),
            "{root}"
        );
    }
}
