//! Segments in the registry's way that it did not make: `/dev/shm` is writable by every user,
//! so anyone may put a file under a slot's name before the registry starts. Adopted, such a file
//! would let a user outside the bus's group write a slot (a hard link to a segment of a bus of
//! their own: their arbiter's command driving this robot). The registry adopts a segment only
//! when no user outside the bus's group can write it or share its memory, and says whose a file
//! is when it cannot remove it.

use std::os::unix::fs::MetadataExt;

use nix::unistd::Gid;

/// What `ls -l` would say of the segment's file: owner, group, mode and links.
fn describe(meta: &std::fs::Metadata) -> String {
    format!(
        "owner {}, group {}, mode {:04o}, {} link(s)",
        bus::process::user_or_number(meta.uid()),
        bus::process::group_or_number(meta.gid()),
        meta.mode() & 0o7777,
        meta.nlink()
    )
}

fn metadata(segment: &str) -> Option<std::fs::Metadata> {
    std::fs::symlink_metadata(format!("{}{segment}", bus::names::SHM_DIR)).ok()
}

/// Why the existing segment must not be adopted by a registry giving its slots to `group`, if
/// so. Safe are files of a single name (a segment the registry makes has one link) that belong
/// to this registry's user or to root (the registry sets their group and mode itself), or to
/// another user of the bus: of `group` and closed to others, so that only the bus's users may
/// write them (a user can give a file only to a group of their own).
pub fn unsafe_to_adopt(segment: &str, group: Gid) -> Option<String> {
    let meta = metadata(segment)?;
    if !meta.file_type().is_file() {
        // Not a slot at all; opening it says so.
        return None;
    }
    if meta.nlink() > 1 {
        return Some(format!(
            "it has {} names (hard links; {}): another file shares its memory",
            meta.nlink(),
            describe(&meta)
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() == me || meta.uid() == 0 {
        return None;
    }
    if meta.gid() == group.as_raw() && meta.mode() & 0o007 == 0 {
        return None;
    }
    Some(format!(
        "it belongs to another user, outside the bus's group or open to every user ({}): not \
         made by a registry of this bus",
        describe(&meta)
    ))
}

/// `unsafe_to_adopt` once the segment is open, for the file it maps (`opened`: device and
/// inode): the check above looked at whatever file had the name then, and the open took
/// whatever file had it a moment later. A name whose file was replaced or removed in between
/// is not adopted (the next start looks again); the file opened is checked again.
pub fn unsafe_to_adopt_opened(segment: &str, group: Gid, opened: (u64, u64)) -> Option<String> {
    match metadata(segment) {
        Some(meta) if (meta.dev(), meta.ino()) == opened => unsafe_to_adopt(segment, group),
        Some(_) => Some("its file was replaced while the registry opened it".into()),
        None => Some("its file was removed while the registry opened it".into()),
    }
}

/// What to do about a file in the way of a slot that this registry may not remove (`/dev/shm`
/// lets only a file's owner and root remove it).
fn in_the_way(segment: &str) -> String {
    let path = format!("{}{segment}", bus::names::SHM_DIR);
    match metadata(segment) {
        // Not a slot's at all (unlink refuses a directory, whoever runs it).
        Some(meta) if meta.is_dir() => format!(
            "a directory of that name is in the way ({}): no registry made it; remove it \
             (rmdir '{path}', or rm -r, as its owner or root)",
            describe(&meta)
        ),
        Some(meta) => format!(
            "a file of that name is in the way ({}), which this registry (user {}) may not \
             remove: if no registry of this bus made it, remove it as root (rm '{path}'); \
             otherwise run the registry as its owner or as root",
            describe(&meta),
            bus::process::user_or_number(nix::unistd::geteuid().as_raw())
        ),
        None => format!("a file of that name was in the way ({path})"),
    }
}

/// Removes a segment's name (processes that map it keep their memory); a name already gone is
/// no error. `Err`: why the file stays, whose it is and what to do.
pub fn remove(segment: &str) -> Result<(), String> {
    match bus::shm::unlink(segment) {
        Ok(()) => Ok(()),
        Err(_) if metadata(segment).is_none() => Ok(()),
        Err(e) => {
            let e = match e {
                bus::SegmentError::Io { message, .. } => message,
                other => other.to_string(),
            };
            Err(format!("{e}; {}", in_the_way(segment)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment's name whose file is replaced between the check and the open: the file
    /// opened is not the one checked.
    #[test]
    fn a_file_replaced_after_the_check_is_not_adopted() {
        let segment = format!("/baton.unit-foreign-{}~x", std::process::id());
        let path = format!("{}{segment}", bus::names::SHM_DIR);
        let identity = |p: &str| {
            let m = std::fs::metadata(p).unwrap();
            (m.dev(), m.ino())
        };
        std::fs::write(&path, b"first").unwrap();
        let group = nix::unistd::getegid();
        let opened = identity(&path);
        assert_eq!(unsafe_to_adopt_opened(&segment, group, opened), None);
        // Replaced under the name (a second file made while the first is still open keeps
        // the first's inode busy, so the two differ).
        let held = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"second").unwrap();
        let why = unsafe_to_adopt_opened(&segment, group, opened);
        assert!(why.is_some_and(|w| w.contains("replaced")));
        std::fs::remove_file(&path).unwrap();
        let why = unsafe_to_adopt_opened(&segment, group, opened);
        assert!(why.is_some_and(|w| w.contains("removed")));
        drop(held);
    }

    /// A directory under a slot's name cannot be unlinked by anyone: the advice says to
    /// remove the directory, not that this registry's user may not.
    #[test]
    fn a_directory_in_the_way_is_named_as_one() {
        let segment = format!("/baton.unit-foreign-dir-{}~x", std::process::id());
        let path = format!("{}{segment}", bus::names::SHM_DIR);
        std::fs::create_dir(&path).unwrap();
        let why = remove(&segment).unwrap_err();
        std::fs::remove_dir(&path).unwrap();
        assert!(
            why.contains("a directory of that name is in the way"),
            "{why}"
        );
        assert!(!why.contains("may not remove"), "{why}");
    }
}
