//! Sleeping on and waking 32-bit words in shared memory: the one module that calls `futex`.
//!
//! Slot words live in memory shared between processes, so they use shared futexes (no
//! `FUTEX_PRIVATE_FLAG`); a process-local word (the client's "something got bound" counter) uses
//! a private one. `futex_waitv` (Linux 5.16) waits on up to 128 words at once, which is what a
//! subscription group needs. The kernel clocks are read here too: the deadlines of those waits
//! and the write stamps of values.

use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

/// Reads one of the kernel's clocks (through the vDSO: no system call).
fn clock_now(clock: libc::clockid_t) -> libc::timespec {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid local; with a clock every
    // Linux has it cannot fail.
    unsafe { libc::clock_gettime(clock, &mut now) };
    now
}

/// Nanoseconds since the Unix epoch on `CLOCK_REALTIME`: the write stamp of every value.
///
/// Read here rather than through `SystemTime`, whose conversion to a `Duration` since the epoch
/// (checked subtraction, normalisation, a 128-bit multiply) cost 12 to 14 ns on top of the
/// 28 ns clock read on this project's test machine: a third of a small value's write.
pub fn realtime_ns() -> u64 {
    let now = clock_now(libc::CLOCK_REALTIME);
    // A clock set before 1970 reads as 0, as `SystemTime::duration_since` would refuse it.
    u64::try_from(now.tv_sec).map_or(0, |secs| {
        secs.wrapping_mul(1_000_000_000)
            .wrapping_add(now.tv_nsec as u64)
    })
}

/// Most words one `futex_waitv` call can wait on (kernel `FUTEX_WAITV_MAX`).
pub const WAITV_MAX: usize = 128;

const FUTEX2_SIZE_U32: u32 = 0x02;
const FUTEX2_PRIVATE: u32 = 128;

/// Why a wait returned. Callers re-check their condition in every case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Woken, or the word no longer held the expected value, or a signal interrupted us.
    Maybe(Option<usize>),
    TimedOut,
    /// `futex_waitv` itself failed with this errno (ENOSYS before Linux 5.16, EPERM under a
    /// seccomp profile that predates it): waiting again would fail at once, for ever.
    Failed(i32),
}

/// One word to wait on.
pub struct WaitOn<'a> {
    pub word: &'a AtomicU32,
    pub expected: u32,
    pub shared: bool,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The instant `timeout` from now; `None` (wait forever) when that is past what `Instant` can
/// represent, so that `Duration::MAX` means "no timeout" instead of an overflow panic.
pub fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// How long until `deadline`; `Duration::MAX` for none.
pub fn time_left(deadline: Option<Instant>) -> Duration {
    deadline.map_or(Duration::MAX, |d| {
        d.saturating_duration_since(Instant::now())
    })
}

/// Sleeps while `word == expected`, at most until `deadline`.
pub fn wait(word: &AtomicU32, expected: u32, shared: bool, deadline: Option<Instant>) -> Wake {
    let op = if shared {
        libc::FUTEX_WAIT
    } else {
        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG
    };
    let timeout = match deadline {
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Wake::TimedOut;
            }
            timespec(left)
        }
        None => None,
    };
    let ts_ptr = timeout
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit atomic for the whole call; the kernel only reads
    // it. The timeout pointer is null or points to a timespec on our stack.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if rc == -1 && errno() == libc::ETIMEDOUT {
        Wake::TimedOut
    } else {
        Wake::Maybe(None)
    }
}

/// Wakes every waiter on `word`; returns how many the kernel woke (futex queue entries: one per
/// sleeping thread and word; 0 if the call failed).
pub fn wake_all(word: &AtomicU32, shared: bool) -> usize {
    let op = if shared {
        libc::FUTEX_WAKE
    } else {
        libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG
    };
    // SAFETY: `word` is a live aligned atomic; FUTEX_WAKE does not access memory beyond
    // hashing the address.
    let woken = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), op, i32::MAX) };
    usize::try_from(woken).unwrap_or(0)
}

/// `struct __kernel_timespec`, which futex_waitv takes on every architecture: 64-bit seconds
/// and nanoseconds, where `libc::timespec` is 8 bytes on 32-bit targets.
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

#[repr(C)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// Sleeps until any of `words` changes from its expected value, at most until `deadline`.
/// At most `WAITV_MAX` words.
pub fn wait_any(words: &[WaitOn<'_>], deadline: Option<Instant>) -> Wake {
    debug_assert!(!words.is_empty() && words.len() <= WAITV_MAX);
    let list: Vec<FutexWaitv> = words
        .iter()
        .map(|w| FutexWaitv {
            val: u64::from(w.expected),
            uaddr: w.word.as_ptr() as u64,
            flags: FUTEX2_SIZE_U32 | if w.shared { 0 } else { FUTEX2_PRIVATE },
            reserved: 0,
        })
        .collect();
    // futex_waitv takes an absolute CLOCK_MONOTONIC deadline.
    // A deadline too far to express is no deadline.
    let abs = deadline.and_then(|d| {
        let left = d.saturating_duration_since(Instant::now());
        let now = clock_now(libc::CLOCK_MONOTONIC);
        let total = Duration::new(now.tv_sec as u64, now.tv_nsec as u32).checked_add(left)?;
        Some(KernelTimespec {
            tv_sec: i64::try_from(total.as_secs()).ok()?,
            tv_nsec: i64::from(total.subsec_nanos()),
        })
    });
    let ts_ptr = abs
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const KernelTimespec);
    // SAFETY: `list` is a valid array of `list.len()` futex_waitv entries (kernel ABI layout,
    // reserved zero) whose addresses point at live aligned atomics borrowed for this call; the
    // timeout is null or a local `__kernel_timespec`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            list.as_ptr(),
            list.len() as u32,
            0u32,
            ts_ptr,
            libc::CLOCK_MONOTONIC,
        )
    };
    if rc >= 0 {
        return Wake::Maybe(Some(rc as usize));
    }
    match errno() {
        libc::ETIMEDOUT => Wake::TimedOut,
        // A word no longer held its expected value, or a signal came. EFAULT: a word's page
        // is gone (its segment was cut short since the caller last touched it): the kernel
        // does not raise SIGBUS for its own read, the caller's next read of the word does,
        // and `shm::lost_pages` then maps zeroes there; the next wait works (`wait` treats
        // every error the same way).
        libc::EAGAIN | libc::EINTR | libc::EFAULT => Wake::Maybe(None),
        e => Wake::Failed(e),
    }
}

/// `d` as a timespec; `None` past what `time_t` holds (no deadline, then).
fn timespec(d: Duration) -> Option<libc::timespec> {
    Some(libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).ok()?,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    })
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn write_stamps_are_on_the_system_clock() {
        let since_epoch = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        let before = since_epoch(SystemTime::now());
        let stamp = super::realtime_ns();
        let after = since_epoch(SystemTime::now());
        assert!(
            before <= stamp && stamp <= after,
            "{before} <= {stamp} <= {after}"
        );
    }
}
