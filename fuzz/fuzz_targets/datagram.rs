//! Feeds arbitrary bytes to the registry's datagram and message decoders, and fragments that
//! decode to the reassembler: none may panic, and reassembly memory stays within its limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry::net::reassembly::{Outcome, Reassembler};
use registry::net::wire;

/// Decodes a message, and each value of a bundle.
fn decode(message: &[u8]) {
    if let Ok(wire::Message::Values(values)) = wire::decode_message(message) {
        assert_eq!(values.iter().count(), values.len());
    }
}

fuzz_target!(|data: &[u8]| {
    decode(data);
    let mut r = Reassembler::new(1 << 16);
    // The input as a sequence of datagrams, each prefixed by a one-byte length.
    let mut rest = data;
    while let Some((&len, tail)) = rest.split_first() {
        let n = (len as usize * 4).min(tail.len());
        let (d, next) = tail.split_at(n);
        rest = next;
        if let Ok(d) = wire::decode_datagram(d, 1 << 20) {
            if let (Outcome::Complete(m), _) = r.add(&d, std::time::Instant::now()) {
                decode(&m);
            }
            assert!(r.held() <= 1 << 16);
        }
    }
});
