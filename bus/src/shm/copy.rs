//! Copying bytes between private memory and mapped words that another process may be writing
//! at the same moment (a slot's payload under its seqlock). Every copy of shared payload goes
//! through `load_words` and `store_words`.
//!
//! Why not `ptr::copy_nonoverlapping`: a plain load racing with another process's store is a
//! data race, undefined behaviour in Rust's memory model, however the seqlock discards what it
//! read. Relaxed atomic loads and stores are no race, but one word at a time they copy at a
//! third less than the machine's block copy (a 1 MiB copy: 44 µs against 31 µs on the
//! development machine), and the compiler may not merge them. On x86-64 the copy is therefore
//! the CPU's string move (`rep movsb`) in an `asm!` block: the compiler cannot look into the
//! block and must treat it as code that could have made exactly these accesses, i.e. relaxed
//! atomic byte loads and stores (`rep movsb` moves bytes, each a single-copy-atomic access for
//! the hardware). Copies under `STRING_MOVE_WORDS`, other architectures and Miri take the word
//! loop.
//!
//! One departure from the model, stated as crossbeam's `seq_lock` states its own: racing
//! atomic accesses that include a write must be of one size, and these are not always. A copy
//! of a long value moves bytes, one of a short value (and a copy's last, partial word) moves
//! words, so a writer lapping a reader with a value of another length, or a reader whose copy
//! starts elsewhere, makes byte accesses race word accesses to the same memory. The hardware
//! makes each of them atomic at its own size, the compiler sees none of the string move's
//! accesses (an `asm!` block), and the seqlock discards every copy a write overlapped: what
//! the reader keeps was raced by nothing.
//!
//! Ordering, which the seqlock needs around the copy (`slot`), holds for both forms:
//! - the compiler: an `asm!` block without `nomem` or `readonly` may read and write any memory
//!   its operands reach, so it is not moved across the fences and atomics around it;
//! - the CPU: a string operation's stores are not reordered with other stores, though they may
//!   be with one another (Intel SDM vol. 3, "Memory-ordering model for string operations on
//!   write-back memory"), so the writer's Release store of the sequence after the copy is seen
//!   after every byte of it; and its loads, like every load on x86-64, are not reordered with
//!   later loads, so the reader's re-check of the sequence after the copy reads no earlier than
//!   the copy did (the Linux kernel's seqlock readers rely on the same: on x86-64 their read
//!   barrier is a compiler barrier and their `memcpy` a string move). Within one copy, bytes
//!   may move in any order: the word loop gives no order between its relaxed words either.

use std::sync::atomic::{AtomicU64, Ordering};

/// From this many words on, a copy is a string move: below it, starting one costs more than
/// the word loop (about 3 ns against 1 to 3 ns up to 64 bytes on the development machine; at
/// 128 bytes 3 against 5 to 8 ns, at 4 KiB 28 against 145 to 179 ns).
#[cfg(all(target_arch = "x86_64", not(miri)))]
const STRING_MOVE_WORDS: usize = 16;

/// Copies the `8 * src.len()` bytes of `src` (shared words) to `dst`.
///
/// # Safety
///
/// `dst` must be valid for writes of `8 * src.len()` bytes (initialised or not) and must not
/// overlap `src`.
pub unsafe fn load_words(src: &[AtomicU64], dst: *mut u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if src.len() >= STRING_MOVE_WORDS {
        // SAFETY: `src` is a live slice, valid for reads of its bytes; the caller gives `dst`
        // for as many writes, not overlapping.
        unsafe { string_move(src.as_ptr().cast(), dst, std::mem::size_of_val(src)) };
        return;
    }
    for (i, word) in src.iter().enumerate() {
        let bytes = word.load(Ordering::Relaxed).to_ne_bytes();
        // SAFETY: word `i` lands at `dst + 8i`, within the `8 * src.len()` bytes the caller
        // gives; `bytes` is a local array.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.add(8 * i), 8) };
    }
}

/// Copies `8 * dst.len()` bytes from `src` into the shared words `dst`.
///
/// # Safety
///
/// `src` must be valid for reads of `8 * dst.len()` bytes and must not overlap `dst`.
pub unsafe fn store_words(src: *const u8, dst: &[AtomicU64]) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if dst.len() >= STRING_MOVE_WORDS {
        // SAFETY: the caller gives `src` for reads of `8 * dst.len()` bytes, not overlapping;
        // `dst` is a live slice of atomics, whose bytes may be written through a shared
        // reference (they are `UnsafeCell`s).
        unsafe { string_move(src, dst.as_ptr() as *mut u8, std::mem::size_of_val(dst)) };
        return;
    }
    for (i, word) in dst.iter().enumerate() {
        let mut bytes = [0u8; 8];
        // SAFETY: bytes `8i .. 8i + 8` of `src` are within the `8 * dst.len()` the caller
        // gives; `bytes` is a local array.
        unsafe { std::ptr::copy_nonoverlapping(src.add(8 * i), bytes.as_mut_ptr(), 8) };
        word.store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
    }
}

/// `rep movsb`: `n` bytes from `src` to `dst`, upwards.
///
/// # Safety
///
/// `src` valid for reads and `dst` for writes of `n` bytes, not overlapping; either may be
/// shared memory another process reads or writes meanwhile (the module comment says why that
/// is no data race).
#[cfg(all(target_arch = "x86_64", not(miri)))]
unsafe fn string_move(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: the pointers are the caller's. The direction flag is clear on entry to an `asm!`
    // block (the Rust reference guarantees it), so the move runs upwards; the block uses no
    // stack and leaves the flags as they were. No `nomem`/`readonly`: the compiler treats the
    // block as any access to memory, and so keeps it between the fences around it.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_go_out_and_back_byte_for_byte() {
        // Word counts on both sides of `STRING_MOVE_WORDS`.
        for n in [0usize, 1, 7, 15, 16, 17, 64, 4096 / 8] {
            let words: Vec<AtomicU64> = (0..n as u64)
                .map(|i| AtomicU64::new(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
                .collect();
            // Out, to an odd address (the private side need not be aligned).
            let mut out = vec![0u8; 8 * n + 1];
            // SAFETY: `out[1..]` holds `8 * n` bytes and is not `words`.
            unsafe { load_words(&words, out[1..].as_mut_ptr()) };
            let expected: Vec<u8> = words
                .iter()
                .flat_map(|w| w.load(Ordering::Relaxed).to_ne_bytes())
                .collect();
            assert_eq!(&out[1..], &expected[..]);
            // And back into other words, from that odd address.
            let back: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
            // SAFETY: as above.
            unsafe { store_words(out[1..].as_ptr(), &back) };
            for (a, b) in words.iter().zip(&back) {
                assert_eq!(a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
            }
        }
    }
}
