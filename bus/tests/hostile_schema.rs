//! A hostile schema stored in a segment costs memory in proportion to its size, not more: every
//! process that opens the slot decodes it. Measured with an allocator that records the largest
//! single allocation made while one schema decodes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Recording;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Recording {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (above).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Recording = Recording;

/// A megabyte of schema: 70 tuples nested, each claiming as many items as bytes are left.
fn nested_tuples_claiming_everything() -> Vec<u8> {
    const SIZE: usize = 1 << 20;
    const TUPLE: u8 = 21;
    let mut bytes = b"BSC1".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes()); // type name: one byte
    bytes.push(b'x');
    bytes.extend_from_slice(&[0, 0]); // serde encoding, not plain data
    for _ in 0..70 {
        bytes.push(TUPLE);
        let left = SIZE - bytes.len() - 4;
        bytes.extend_from_slice(&(left as u32).to_le_bytes());
    }
    bytes.resize(SIZE, 0);
    bytes
}

#[test]
fn a_hostile_schema_allocates_no_more_than_its_size() {
    let bytes = nested_tuples_claiming_everything();
    LARGEST.store(0, Ordering::Relaxed);
    let err = bus::schema::Schema::from_bytes(&bytes).expect_err("too deep");
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(err.to_string().contains("deep"), "{err}");
    assert!(
        largest <= bytes.len(),
        "one allocation of {largest} bytes for a schema of {} bytes",
        bytes.len()
    );
}
