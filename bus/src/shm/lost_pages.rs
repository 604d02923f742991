//! Pages that vanish under a mapping. Any process that may write a segment (the bus group) can
//! shrink its file (`truncate`, `ftruncate`) while others map it, and the kernel then sends
//! SIGBUS to every process at its next touch of a page past the new end: the registry, an
//! arbiter and every reader of that slot would die of one mistaken command. A corrupt or
//! hostile segment must give an error, never end a process.
//!
//! So the first mapping a process makes installs a SIGBUS handler. A fault inside a bus mapping
//! (the kernel's BUS_ADRERR: a touch past the end of the file) gets a private zeroed page put
//! in place of the lost one, the mapping is marked damaged and the access completes: the slot
//! protocol reads zeroes as "no value" or as a corrupt header, and the registry, which checks
//! its slots, makes the slot anew and tells its users (subscribers see `BusError::Replaced`,
//! the publication goes on in the new slot). A fault
//! anywhere else goes on to the handler that was there before (Rust's stack-overflow handler,
//! or the default action), exactly as without Baton. A SIGBUS a process sent (kill, sigqueue)
//! faults nothing and is ignored: passed on, it would switch this protection off.
//!
//! The handler finds the mapping in a table of address ranges that it reads without locks or
//! allocation (only atomics, then `mmap`, a plain system call): chunks of entries allocated on
//! first use and never freed, an entry claimed by a compare-and-swap of its start address.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;

const CHUNK_LEN: usize = 1024;
/// At most `CHUNKS * CHUNK_LEN` mappings are guarded at once (half a million; a registry of
/// 10,000 slots maps each once, plus the network layer's). Beyond that a mapping is unguarded,
/// as every mapping was before this module.
const CHUNKS: usize = 512;

/// One guarded range: `[start, end)`. Free while `start` is 0.
#[derive(Debug)]
struct Entry {
    start: AtomicUsize,
    end: AtomicUsize,
    damaged: AtomicBool,
}

type Chunk = [Entry; CHUNK_LEN];

static TABLE: [AtomicPtr<Chunk>; CHUNKS] = [const { AtomicPtr::new(ptr::null_mut()) }; CHUNKS];
/// Where a search for a free entry starts: at or below the lowest free entry, often.
static FREE_HINT: AtomicUsize = AtomicUsize::new(0);
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(4096);
/// The SIGBUS action found when the handler was installed, to pass other faults on to.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// A range of addresses guarded while this lives (`None` inside: the table was full).
#[derive(Debug)]
pub(super) struct Guard {
    /// The entry claimed, and its index in the table.
    entry: Option<(&'static Entry, usize)>,
}

impl Guard {
    /// Guards `[start, start + len)`, a mapping just made and not yet used.
    pub(super) fn new(start: usize, len: usize) -> Guard {
        install_once();
        let total = CHUNKS * CHUNK_LEN;
        let from = FREE_HINT.load(Ordering::Relaxed).min(total - 1);
        for i in (from..total).chain(0..from) {
            let Some(entry) = entry_at(i, true) else {
                break;
            };
            // AcqRel: the claim orders after the previous holder's release of `end` (Release
            // in `release`), so its old `end` can never be read with our `start`.
            if entry
                .start
                .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                entry.damaged.store(false, Ordering::Relaxed);
                // Release: a handler that reads this `end` reads the `start` stored before it.
                entry.end.store(start + len, Ordering::Release);
                FREE_HINT.store(i + 1, Ordering::Relaxed);
                return Guard {
                    entry: Some((entry, i)),
                };
            }
        }
        Guard { entry: None }
    }

    /// Whether a page of the range was lost (the file shrank under it) and replaced by zeroes.
    pub(super) fn is_damaged(&self) -> bool {
        self.entry
            .is_some_and(|(e, _)| e.damaged.load(Ordering::Relaxed))
    }

    /// Stops guarding: to be called before the range is unmapped, so that a mapping made
    /// later at the same addresses is never matched with this entry.
    pub(super) fn release(&mut self) {
        let Some((entry, index)) = self.entry.take() else {
            return;
        };
        entry.end.store(0, Ordering::Release);
        entry.start.store(0, Ordering::Release);
        FREE_HINT.fetch_min(index, Ordering::Relaxed);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.release();
    }
}

/// The entry at `index`, its chunk allocated if `allocate` (never in the handler).
fn entry_at(index: usize, allocate: bool) -> Option<&'static Entry> {
    let slot = TABLE.get(index / CHUNK_LEN)?;
    let mut chunk = slot.load(Ordering::Acquire);
    if chunk.is_null() {
        if !allocate {
            return None;
        }
        chunk = allocate_chunk(slot);
    }
    // SAFETY: a non-null chunk pointer was stored once, from a leaked `Box`, and is never freed
    // or replaced: it is valid for the rest of the process.
    Some(unsafe { &(*chunk)[index % CHUNK_LEN] })
}

/// Allocates the chunk of `slot` (or takes the one another thread stored first). Out of line,
/// and built on the heap: the handler runs on a small signal stack, and a chunk built on the
/// stack (24 KiB) gave `entry_at` a frame too big for it.
#[inline(never)]
fn allocate_chunk(slot: &AtomicPtr<Chunk>) -> *mut Chunk {
    let entries: Box<[Entry]> = (0..CHUNK_LEN)
        .map(|_| Entry {
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            damaged: AtomicBool::new(false),
        })
        .collect();
    let Ok(fresh) = Box::<Chunk>::try_from(entries) else {
        unreachable!("CHUNK_LEN entries were collected")
    };
    let fresh = Box::into_raw(fresh);
    // AcqRel: publishes the chunk's initialised entries to every later Acquire load.
    match slot.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => fresh,
        Err(theirs) => {
            // SAFETY: `fresh` came from `Box::into_raw` just above and was never shared.
            drop(unsafe { Box::from_raw(fresh) });
            theirs
        }
    }
}

/// The guarded entry holding `addr`, read with loads only (signal context).
fn find(addr: usize) -> Option<&'static Entry> {
    for i in 0..CHUNKS * CHUNK_LEN {
        let entry = entry_at(i, false)?;
        let start = entry.start.load(Ordering::Acquire);
        if start == 0 || addr < start {
            continue;
        }
        let end = entry.end.load(Ordering::Acquire);
        // The same claim for both loads: an entry released and claimed again by another
        // mapping between them would pair this start with that end.
        if addr < end && entry.start.load(Ordering::Acquire) == start {
            return Some(entry);
        }
    }
    None
}

fn install_once() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE_SIZE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: a zeroed `sigaction` is a valid value of the plain C struct (no handler, empty
        // mask, no flags); it is filled in before use.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: as above.
        let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are to valid `sigaction` values that live across the call;
        // `on_sigbus` has the three-argument signature SA_SIGINFO asks for. The mask is emptied
        // first (sigemptyset on a valid set).
        let installed = unsafe {
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, &mut previous)
        };
        if installed == 0 {
            let _ = PREVIOUS.set(previous);
        } else {
            tracing::warn!(
                "cannot install the SIGBUS handler: a segment shrunk under this process will end \
                 it"
            );
        }
    });
}

/// The SIGBUS handler: see the module comment. Only loads, `mmap` and (for other faults) the
/// previous handler or `sigaction` run here, all safe in a signal handler.
extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for a handler installed with SA_SIGINFO.
    let code = unsafe { (*info).si_code };
    // Only the kernel's report of a touch past the end of a mapped file (BUS_ADRERR) can be a
    // lost page. A SIGBUS another process sent (kill, sigqueue: a code of 0 or less) faults
    // nothing, and its si_addr is whatever the sender put there: taken for a fault, it would
    // put zeroes over a live page of a mapping, or of memory mapped where one was.
    // Nor is it passed on: the handler before this one (Rust's stack-overflow handler) would
    // put the default action back, and the next page lost under this process would end it.
    // A sent SIGBUS is ignored.
    if code <= 0 {
        return;
    }
    // SAFETY: as above; for a fault (code > 0), si_addr is the faulting address.
    let addr = unsafe { (*info).si_addr() } as usize;
    if let Some(entry) = (code == libc::BUS_ADRERR).then(|| find(addr)).flatten() {
        let page = PAGE_SIZE.load(Ordering::Relaxed);
        let at = addr & !(page - 1);
        // SAFETY: `at` is the page holding `addr`, inside a live bus mapping (its entry is
        // claimed while the `Mapping` lives, and the faulting thread is using it). Nothing
        // else lives at that address, and every access to bus memory is atomic or a copy that
        // tolerates any bytes: replacing the lost page by a private zeroed one breaks no Rust
        // reference's invariant.
        let mapped = unsafe {
            libc::mmap(
                at as *mut c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if mapped != libc::MAP_FAILED {
            entry.damaged.store(true, Ordering::Relaxed);
            return;
        }
    }
    pass_on(signal, info, context);
}

/// A fault that is not a bus mapping's: what would have happened without this module.
fn pass_on(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let previous = PREVIOUS.get();
    let handler = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
        let flags = previous.map_or(0, |p| p.sa_flags);
        if flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the previous action was installed with SA_SIGINFO, so its handler has
            // this signature; it is called with the arguments the kernel gave us.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                unsafe { std::mem::transmute(handler) };
            f(signal, info, context);
        } else {
            // SAFETY: without SA_SIGINFO the handler takes the signal number only.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            f(signal);
        }
        return;
    }
    // The default action: restored, and the faulting access, run again on return, ends the
    // process with SIGBUS as it would have.
    // SAFETY: a zeroed sigaction with SIG_DFL (0) is the default action; sigaction is
    // async-signal-safe.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &default, ptr::null_mut());
    }
}
