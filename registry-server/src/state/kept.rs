//! A slot's file kept in memory while the slot is made larger: a publication asking for more
//! room than a slot nobody maps has replaces that slot, and a larger file that does not fit (a
//! full /dev/shm) would otherwise take the old slot, and the value it kept for subscribers to
//! come, with it. When room is short, the old file is kept in memory and put back as it was,
//! byte for byte, under its name.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use bus::slot::Slot;
use nix::unistd::Gid;

/// Whether a slot of `capacity` bytes might not fit in /dev/shm once `old` is removed: only
/// then is `old`'s file kept (in this process's memory) while the larger one is made. With room
/// to spare it is not copied: a large slot would cost as much again for nothing. A tenth more
/// than `room_needed` for the estimate.
pub(super) fn may_not_fit(capacity: u64, old: &Slot) -> bool {
    let Some(free) = free_in_shm() else {
        return true;
    };
    let needed = room_needed(capacity);
    free.saturating_add(old.segment_size() as u64) < needed.saturating_add(needed / 10)
}

/// The bytes of /dev/shm this process may still fill; `None` if that cannot be asked.
pub(super) fn free_in_shm() -> Option<u64> {
    let fs = nix::sys::statvfs::statvfs(bus::names::SHM_DIR).ok()?;
    // Both u64 on Linux.
    Some(fs.blocks_available().saturating_mul(fs.fragment_size()))
}

/// About the bytes a slot of `capacity` takes: four buffers of the capacity (and a line
/// more each: the figure was made when each buffer had a header line) and a header's page.
pub(super) fn room_needed(capacity: u64) -> u64 {
    capacity
        .saturating_add(64)
        .saturating_mul(4)
        .saturating_add(8192)
}

/// The bytes of `slot`'s file, read through its name: `None` when the name no longer stands
/// for the file mapped (replaced, removed: nothing of it to keep) or it cannot be read.
pub(super) fn file_of(segment: &str, slot: &Slot) -> Option<Vec<u8>> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path(segment))
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || (meta.dev(), meta.ino()) != slot.file() {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Makes the file `segment` again from `bytes` (`file_of`), with the group and mode the
/// registry gives its segments, and maps it.
pub(super) fn put_back(segment: &str, bytes: &[u8], group: Option<Gid>) -> Result<Slot, String> {
    let path = path(segment);
    let written = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o660)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        if group.is_some() {
            nix::unistd::fchown(&file, None, group)?;
        }
        // The umask may have taken the group's bits at creation.
        nix::sys::stat::fchmod(&file, nix::sys::stat::Mode::from_bits_truncate(0o660))?;
        file.write_all(bytes)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        return Err(e.to_string());
    }
    Slot::open(segment, true).map_err(|e| {
        // Not a slot after all (its copy damaged under it): nothing of it to leave behind.
        let _ = std::fs::remove_file(&path);
        e.to_string()
    })
}

fn path(segment: &str) -> String {
    format!("{}{segment}", bus::names::SHM_DIR)
}
