//! Mapping POSIX shared-memory segments: the one module that calls `shm_open` and `mmap`.
//!
//! Why not the `shared_memory` crate: it creates segments with mode 0600 (the registry must give
//! a configurable group read/write access) and unlinks a segment when its owner drops, while a
//! Baton slot must outlive the registry that created it (a restarted registry adopts it).
//! `nix` gives the same calls with the control we need.

use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use nix::fcntl::{posix_fallocate, OFlag};
use nix::sys::mman::{mmap, munmap, shm_open, shm_unlink, MapFlags, ProtFlags};
use nix::sys::stat::{fchmod, fstat, Mode};
use nix::unistd::{fchown, ftruncate, Gid};

use crate::error::SegmentError;

mod copy;
mod lost_pages;

use lost_pages::Guard;

/// A shared mapping of a whole segment. The memory stays mapped until this is dropped, so any
/// reference derived from `base()` is valid for the lifetime of the `Mapping`.
#[derive(Debug)]
pub struct Mapping {
    base: NonNull<u8>,
    len: usize,
    writable: bool,
    /// Device and inode of the file mapped: which file a name stands for can change (a
    /// segment removed and created again), the mapping cannot.
    file: (u64, u64),
    /// Keeps a process alive when the file shrinks under the mapping (`lost_pages`).
    guard: Guard,
}

// SAFETY: the mapping is plain shared memory; every access to it goes through atomics or
// byte copies that tolerate concurrent writers (the slot protocol), so sharing the handle
// between threads is as safe as sharing it between processes.
unsafe impl Send for Mapping {}
// SAFETY: as above; besides the immutable base/len, `Mapping`'s only state is its guard's entry,
// whose fields are atomics (`lost_pages`).
unsafe impl Sync for Mapping {}

/// What `Mapping::write_through_file` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteThrough {
    Written,
    /// The name no longer stands for the file mapped (removed, or another file): nothing to
    /// tell through it.
    NotThisFile,
    /// The file is too short for the bytes (cut, not grown back yet), or could not be opened
    /// or written now: worth another try later.
    NotNow,
}

/// What a segment's name stands for now (`Mapping::file_now`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileNow {
    /// The file mapped, `size` bytes long now.
    Mapped { size: u64 },
    /// No file has the name any more.
    Removed,
    /// Another file has the name (removed and created again).
    Other,
    /// It could not be looked at (no file descriptor left, no permission).
    Unknown,
}

fn io_err(segment: &str, what: &str, e: nix::Error) -> SegmentError {
    SegmentError::Io {
        segment: segment.to_owned(),
        message: format!("{what}: {e}"),
    }
}

/// A segment this user may not open: whose it is, and how to be let in (the same advice as
/// the registry's refusal of a connection).
fn not_permitted(name: &str) -> SegmentError {
    use std::os::unix::fs::MetadataExt;
    let user = nix::unistd::geteuid().as_raw();
    let user = crate::process::user_name(user).unwrap_or_else(|| format!("uid {user}"));
    let message = match std::fs::metadata(format!("{}{name}", crate::names::SHM_DIR)) {
        Ok(meta) => {
            let owner = crate::process::user_name(meta.uid())
                .unwrap_or_else(|| format!("uid {}", meta.uid()));
            let group = crate::process::group_or_number(meta.gid());
            format!(
                "this user ({user}) may not open it: it is mode {:04o}, owner {owner}, group \
                 {group}; add the user to that group (usermod -aG {group} {user}) and start \
                 the process again, or run it as {owner}",
                meta.mode() & 0o7777
            )
        }
        Err(_) => format!("this user ({user}) may not open it (permission denied)"),
    };
    SegmentError::Io {
        segment: name.to_owned(),
        message,
    }
}

/// Opens an existing segment that must be a regular file. `O_NONBLOCK` because anyone who can
/// write `/dev/shm` can put a FIFO under a segment's name, and opening a FIFO for reading
/// waits for a writer: a tool meant to find and clean up such a file would hang on it. (The
/// flag changes nothing for a regular file, whose memory is only ever mapped.)
fn open_existing(name: &str, flags: OFlag) -> Result<OwnedFd, SegmentError> {
    let fd = shm_open(name, flags | OFlag::O_NONBLOCK, Mode::empty()).map_err(|e| match e {
        nix::Error::EACCES => not_permitted(name),
        // glibc's shm_open never follows a link: ELOOP says one is there.
        nix::Error::ELOOP => SegmentError::Io {
            segment: name.to_owned(),
            message: "a symbolic link in place of the segment (segments are never opened \
                      through one); remove it"
                .to_owned(),
        },
        e => io_err(name, "shm_open", e),
    })?;
    let stat = fstat(&fd).map_err(|e| io_err(name, "fstat", e))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(SegmentError::Io {
            segment: name.to_owned(),
            message: "not a regular file (a FIFO, device or directory put in its place); \
                      remove it"
                .to_owned(),
        });
    }
    Ok(fd)
}

impl Mapping {
    /// Creates a new segment (fails if it exists), sized `len`, mode 0660 whatever the umask,
    /// owned by `group` when given, and maps it read-write. The memory reads as zeroes.
    pub fn create(name: &str, len: usize, group: Option<Gid>) -> Result<Mapping, SegmentError> {
        let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR;
        let mode = Mode::from_bits_truncate(0o660);
        let fd = shm_open(name, flags, mode).map_err(|e| io_err(name, "shm_open(create)", e))?;
        let set_up = || -> Result<(), SegmentError> {
            if group.is_some() {
                fchown(&fd, None, group).map_err(|e| io_err(name, "fchown", e))?;
            }
            // The umask may have removed group bits at creation; set them explicitly.
            fchmod(&fd, mode).map_err(|e| io_err(name, "fchmod", e))?;
            ftruncate(&fd, len as i64).map_err(|e| io_err(name, "ftruncate", e))?;
            // Reserve the pages now: a sparse segment on a full /dev/shm would be created
            // without complaint, and the first write to an unbacked page would kill the writer
            // (and the registry, for its own slots) with SIGBUS. Here it is an error (ENOSPC).
            // A filesystem that cannot reserve (EOPNOTSUPP; tmpfs can) keeps the sparse file.
            match posix_fallocate(&fd, 0, len as i64) {
                Ok(()) | Err(nix::Error::EOPNOTSUPP) => Ok(()),
                Err(e) => Err(io_err(name, "posix_fallocate (is /dev/shm full?)", e)),
            }
        };
        if let Err(e) = set_up() {
            let _ = shm_unlink(name);
            return Err(e);
        }
        Self::map(name, fd, true)
    }

    /// Maps an existing segment at its current size.
    pub fn open(name: &str, writable: bool) -> Result<Mapping, SegmentError> {
        let flags = if writable {
            OFlag::O_RDWR
        } else {
            OFlag::O_RDONLY
        };
        let fd = open_existing(name, flags)?;
        Self::map(name, fd, writable)
    }

    /// Whether pages of this mapping were lost: its file was shrunk under it, and a touch past
    /// the new end found a private zeroed page put there instead (`lost_pages`). The memory no
    /// longer is shared with anyone.
    pub fn is_damaged(&self) -> bool {
        self.guard.is_damaged()
    }

    /// Writes `bytes` at `off` of the file `name` names, through the file rather than this
    /// mapping, if that file is the one mapped here and holds those bytes: what a process whose
    /// pages were lost (private zeroes now) can still tell the others.
    pub fn write_through_file(&self, name: &str, off: usize, bytes: &[u8]) -> WriteThrough {
        let fd = match shm_open(name, OFlag::O_RDWR | OFlag::O_NONBLOCK, Mode::empty()) {
            Ok(fd) => fd,
            Err(nix::Error::ENOENT | nix::Error::ELOOP) => return WriteThrough::NotThisFile,
            Err(_) => return WriteThrough::NotNow,
        };
        let Ok(st) = fstat(&fd) else {
            return WriteThrough::NotNow;
        };
        if (st.st_dev, st.st_ino) != self.file {
            return WriteThrough::NotThisFile;
        }
        let fits = off
            .checked_add(bytes.len())
            .is_some_and(|end| end as u64 <= st.st_size.max(0) as u64);
        if fits && nix::sys::uio::pwrite(&fd, bytes, off as i64).is_ok_and(|n| n == bytes.len()) {
            WriteThrough::Written
        } else {
            WriteThrough::NotNow
        }
    }

    /// Whether `name` still names the file this maps (it does not once the segment was removed,
    /// or removed and created again). When that cannot be looked at (no file descriptor left,
    /// no permission), it is taken to: only a file seen gone or different counts as another.
    pub fn is_named(&self, name: &str) -> bool {
        !matches!(self.file_now(name), FileNow::Removed | FileNow::Other)
    }

    /// What `name` stands for now, compared with the file mapped here.
    pub fn file_now(&self, name: &str) -> FileNow {
        match shm_open(name, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty())
            .and_then(|fd| fstat(&fd))
        {
            Ok(st) if (st.st_dev, st.st_ino) == self.file => FileNow::Mapped {
                size: st.st_size.max(0) as u64,
            },
            Ok(_) => FileNow::Other,
            // A symbolic link put in its place (segments are opened without following links).
            Err(nix::Error::ELOOP) => FileNow::Other,
            Err(nix::Error::ENOENT) => FileNow::Removed,
            Err(_) => FileNow::Unknown,
        }
    }

    /// Maps all of `fd` (its size, and which file it is, from one `fstat`).
    fn map(name: &str, fd: OwnedFd, writable: bool) -> Result<Mapping, SegmentError> {
        let stat = fstat(&fd).map_err(|e| io_err(name, "fstat", e))?;
        let len = stat.st_size.max(0) as usize;
        let nz_len = NonZeroUsize::new(len).ok_or_else(|| SegmentError::TooShort {
            segment: name.to_owned(),
            size: 0,
            header: crate::slot::HEADER_SIZE as u64,
        })?;
        let prot = if writable {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        // SAFETY: we map a fresh region chosen by the kernel (addr None), so no existing Rust
        // object is aliased; `fd` is a valid shared-memory descriptor of `len` bytes, as
        // measured by fstat just now. Other processes may write the memory at any time (so it
        // is only ever accessed atomically, see `impl Mapping` below) and may shrink the file
        // after the fstat: a touch past its new end raises SIGBUS, which `lost_pages` answers
        // for this range from the moment the guard below is made (no access comes before).
        let base = unsafe { mmap(None, nz_len, prot, MapFlags::MAP_SHARED, &fd, 0) }
            .map_err(|e| io_err(name, "mmap", e))?;
        // The mapping keeps the segment alive; the descriptor is no longer needed.
        drop(fd);
        Ok(Mapping {
            base: base.cast(),
            len,
            writable,
            file: (stat.st_dev, stat.st_ino),
            guard: Guard::new(base.as_ptr() as usize, len),
        })
    }

    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Device and inode of the file mapped.
    pub fn file(&self) -> (u64, u64) {
        self.file
    }
}

/// An Acquire load of a mapped word, written as a Relaxed load and an Acquire fence: the same
/// synchronisation (the fence pairs with the Release store the load read from), and the only
/// form of load the Rust docs allow on read-only memory, which tools map.
pub fn load_acquire64(word: &AtomicU64) -> u64 {
    let value = word.load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    value
}

/// `load_acquire64` for a 32-bit word.
pub fn load_acquire32(word: &AtomicU32) -> u32 {
    let value = word.load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    value
}

/// Typed access to the mapped memory. All shared slot memory is accessed through these, i.e.
/// atomically, because another process may write it at any moment.
///
/// On a read-only mapping (tools map slots so) the only atomic access Rust allows is a Relaxed
/// load of a word (`core::sync::atomic`, "Atomic accesses to read-only memory"): a store, a
/// read-modify-write and even a SeqCst load may fault or worse. So the accessors that hand out
/// the atomics themselves, for writers, panic on a read-only mapping, and readers use the
/// `load*` methods and `copy_out`, which make only Relaxed loads (an Acquire load is a Relaxed
/// load and a fence).
impl Mapping {
    /// The 32-bit atomic at byte offset `off`, for stores, read-modify-writes and SeqCst loads.
    /// Panics on a read-only mapping, and if `off` is out of bounds or misaligned (offsets are
    /// the slot layout's constants or validated against the mapping's size).
    pub fn word32(&self, off: usize) -> &AtomicU32 {
        self.assert_writable("word32", off);
        self.word32_for_loads(off)
    }

    /// `word32` for a 64-bit word.
    pub fn word64(&self, off: usize) -> &AtomicU64 {
        &self.words(off, 1)[0]
    }

    /// `n` consecutive 64-bit atomics starting at byte offset `off`, as `word64`.
    pub fn words(&self, off: usize, n: usize) -> &[AtomicU64] {
        self.assert_writable("words", off);
        self.words_for_loads(off, n)
    }

    /// A Relaxed load of the 32-bit word at `off` (any mapping).
    pub fn load32(&self, off: usize) -> u32 {
        self.word32_for_loads(off).load(Ordering::Relaxed)
    }

    /// A Relaxed load of the 64-bit word at `off` (any mapping).
    pub fn load64(&self, off: usize) -> u64 {
        self.words_for_loads(off, 1)[0].load(Ordering::Relaxed)
    }

    /// An Acquire load of the 32-bit word at `off` (any mapping; see `load_acquire32`).
    pub fn load_acquire32(&self, off: usize) -> u32 {
        load_acquire32(self.word32_for_loads(off))
    }

    /// An Acquire load of the 64-bit word at `off` (any mapping; see `load_acquire64`).
    pub fn load_acquire64(&self, off: usize) -> u64 {
        load_acquire64(&self.words_for_loads(off, 1)[0])
    }

    fn assert_writable(&self, what: &str, off: usize) {
        assert!(
            self.writable,
            "{what} at {off}: this mapping is read-only (Slot::open or Mapping::open with \
             writable = false), and only loads are allowed on it"
        );
    }

    /// The word at `off`, only for Relaxed loads unless the mapping is writable (see the
    /// `impl`'s comment).
    fn word32_for_loads(&self, off: usize) -> &AtomicU32 {
        assert!(
            off % 4 == 0 && off.checked_add(4).is_some_and(|end| end <= self.len),
            "word32 at {off} of {}",
            self.len
        );
        // SAFETY: in bounds (checked without overflow) and 4-aligned (the mapping is
        // page-aligned); mapped for the lifetime of `self`; all access to this memory is
        // atomic, so no non-atomic alias exists; on a read-only mapping the callers only load
        // it Relaxed (`load32`, `load_acquire32`), the access Rust allows there.
        unsafe { &*(self.base.as_ptr().add(off) as *const AtomicU32) }
    }

    /// `n` words from `off`, only for Relaxed loads unless the mapping is writable.
    fn words_for_loads(&self, off: usize, n: usize) -> &[AtomicU64] {
        let end = n.checked_mul(8).and_then(|b| b.checked_add(off));
        assert!(
            off % 8 == 0 && end.is_some_and(|e| e <= self.len),
            "words at {off}+{n} of {}",
            self.len
        );
        // SAFETY: as in `word32_for_loads`: checked in bounds, 8-aligned, mapped while `self`
        // lives, only accessed atomically, and only loaded Relaxed on a read-only mapping
        // (`load64`, `load_acquire64`, and the copies out: `copy::load_words` and the tail's
        // Relaxed load).
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off) as *const AtomicU64, n) }
    }

    /// Copies `src` in at `off`; the last word is zero-padded. Racing readers detect the race
    /// through the slot's `latest` word, loaded again after the copy, never through these bytes
    /// (`copy`).
    pub fn copy_in(&self, off: usize, src: &[u8]) {
        let words = self.words(off, src.len().div_ceil(8));
        let whole = src.len() / 8;
        // SAFETY: `src` holds at least `8 * whole` bytes and is private memory, not the mapping.
        unsafe { copy::store_words(src.as_ptr(), &words[..whole]) };
        let tail = &src[8 * whole..];
        if let (false, Some(last)) = (tail.is_empty(), words.last()) {
            let mut b = [0u8; 8];
            b[..tail.len()].copy_from_slice(tail);
            last.store(u64::from_ne_bytes(b), Ordering::Relaxed);
        }
    }

    /// Appends `n` bytes from `off` to `dst`, as `copy_out`, into room that is only reserved: a
    /// decoded byte buffer is not zeroed first (`codec::byte_strings`).
    pub fn append_out(&self, off: usize, n: usize, dst: &mut Vec<u8>) {
        let words = self.words_for_loads(off, n.div_ceil(8));
        dst.reserve(n);
        let room = &mut dst.spare_capacity_mut()[..n];
        let whole = n / 8;
        // SAFETY: `room` holds `n >= 8 * whole` bytes of `dst`'s own allocation, not the mapping.
        unsafe { copy::load_words(&words[..whole], room.as_mut_ptr().cast()) };
        let tail = &mut room[8 * whole..];
        if let (false, Some(last)) = (tail.is_empty(), words.last()) {
            for (d, b) in tail
                .iter_mut()
                .zip(last.load(Ordering::Relaxed).to_ne_bytes())
            {
                d.write(b);
            }
        }
        // SAFETY: the `n` bytes after `dst`'s length were reserved and each written above: the
        // first `8 * whole` by the word copy, the tail (fewer than 8) from the last word.
        unsafe { dst.set_len(dst.len() + n) };
    }

    /// Copies `dst.len()` bytes out from `off`.
    pub fn copy_out(&self, off: usize, dst: &mut [u8]) {
        let words = self.words_for_loads(off, dst.len().div_ceil(8));
        let whole = dst.len() / 8;
        // SAFETY: `dst` holds at least `8 * whole` bytes and is private memory, not the mapping.
        unsafe { copy::load_words(&words[..whole], dst.as_mut_ptr()) };
        let tail = &mut dst[8 * whole..];
        if let (false, Some(last)) = (tail.is_empty(), words.last()) {
            let b = last.load(Ordering::Relaxed).to_ne_bytes();
            let n = tail.len();
            tail.copy_from_slice(&b[..n]);
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        self.guard.release();
        // SAFETY: base/len are exactly what mmap returned, and nothing derived from the mapping
        // outlives `self` (callers borrow from `&self`).
        let _ = unsafe { munmap(self.base.cast(), self.len) };
    }
}

/// Gives `group` read/write access to an existing segment (mode 0660, as `Mapping::create`
/// makes it): a registry restarted with another `--group` adopts segments made for the old one.
/// Returns whether anything changed.
pub fn set_group(name: &str, group: Gid) -> Result<bool, SegmentError> {
    let fd = open_existing(name, OFlag::O_RDONLY)?;
    let stat = fstat(&fd).map_err(|e| io_err(name, "fstat", e))?;
    if stat.st_gid == group.as_raw() && stat.st_mode & 0o777 == 0o660 {
        return Ok(false);
    }
    fchown(&fd, None, Some(group)).map_err(|e| io_err(name, "fchown", e))?;
    fchmod(&fd, Mode::from_bits_truncate(0o660)).map_err(|e| io_err(name, "fchmod", e))?;
    Ok(true)
}

/// Removes a segment's name; processes that map it keep their memory.
pub fn unlink(name: &str) -> Result<(), SegmentError> {
    shm_unlink(name).map_err(|e| io_err(name, "shm_unlink", e))
}
