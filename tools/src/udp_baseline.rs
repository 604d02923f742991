//! net-bench's raw UDP ping-pong, the baseline of the reflection's round trip: a message of
//! `size` bytes sent as the datagrams the reflection would send it as (none larger than the
//! path allows, so never IP fragments), in batches of one `UDP_SEGMENT` send each and received
//! with `UDP_GRO`, as the registries do; echoed as received (what the kernel coalesced goes back
//! in one send). Every datagram carries
//! its round trip's number, so that a late echo of an earlier one is not taken for this one's,
//! and a round trip whose echo does not come within a second counts as lost.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use nix::sys::socket::{setsockopt, sockopt};

/// Room for a datagram's payload on a 1500-byte Ethernet path (less the IPv4 and UDP headers).
pub const DATAGRAM: usize = 1472;
/// Each datagram's own header: the round trip's number (8 bytes), the datagram's index (4).
const HEADER: usize = 12;
/// Datagrams per `UDP_SEGMENT` send: their total must stay under the largest UDP payload
/// (65,507 bytes).
const PER_SEND: usize = 44;
/// A round trip not answered within this counts as lost.
const LOST_AFTER: Duration = Duration::from_secs(1);

/// The round trips measured, in nanoseconds, and how many were lost.
pub struct Samples {
    pub nanos: Vec<u64>,
    pub lost: u64,
}

/// Batched sends and receives on `socket`, as the registries have them (`registry-server`'s
/// `net`): both or neither.
fn batched(socket: &UdpSocket) -> Result<(), String> {
    setsockopt(socket, sockopt::UdpGsoSegment, &(DATAGRAM as i32))
        .and_then(|()| setsockopt(socket, sockopt::UdpGroSegment, &true))
        .map_err(|e| format!("UDP_SEGMENT / UDP_GRO: {e}"))
}

/// Sends `bytes` (datagrams of `DATAGRAM` bytes laid end to end, the last one shorter) to `to`
/// in as few sends as allowed.
fn send_batches(socket: &UdpSocket, bytes: &[u8], to: &str) -> Result<(), String> {
    for batch in bytes.chunks(PER_SEND * DATAGRAM) {
        socket
            .send_to(batch, to)
            .map_err(|e| format!("send: {e}"))?;
    }
    Ok(())
}

/// Echoes every datagram that comes to `port`, for ever.
pub fn pong(port: u16) -> Result<(), String> {
    let socket = UdpSocket::bind(("0.0.0.0", port)).map_err(|e| e.to_string())?;
    batched(&socket)?;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let (n, from) = socket.recv_from(&mut buf).map_err(|e| e.to_string())?;
        // What the kernel coalesced comes back in batches that fit one send, cut where the
        // datagrams were.
        for batch in buf[..n].chunks(PER_SEND * DATAGRAM) {
            let _ = socket.send_to(batch, from);
        }
    }
}

/// `iterations` round trips of a `size`-byte message to the pong at `to` (`IP:PORT`), the first
/// 50 not counted (warm-up).
pub fn ping(to: &str, size: usize, iterations: usize) -> Result<Samples, String> {
    let socket = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    batched(&socket)?;
    // Datagrams as the message is cut: every one full but the last. A message of one datagram
    // is `size` bytes in all (64 B stays a 64-byte datagram), its header included.
    let room = DATAGRAM - HEADER;
    let count = if size <= DATAGRAM {
        1
    } else {
        size.div_ceil(room)
    };
    let mut message = Vec::new();
    let mut left = size;
    for _ in 0..count {
        let len = if count == 1 {
            size.max(HEADER)
        } else {
            HEADER + left.min(room)
        };
        left = left.saturating_sub(room);
        message.extend(std::iter::repeat_n(7u8, len));
    }
    let starts: Vec<usize> = (0..count).map(|k| k * DATAGRAM).collect();
    let mut buf = vec![0u8; 1 << 16];
    let mut samples = Samples {
        nanos: Vec::with_capacity(iterations),
        lost: 0,
    };
    let mut trip = 0u64;
    while samples.nanos.len() < iterations {
        trip += 1;
        for (k, &at) in starts.iter().enumerate() {
            message[at..at + 8].copy_from_slice(&trip.to_le_bytes());
            message[at + 8..at + 12].copy_from_slice(&(k as u32).to_le_bytes());
        }
        let t = Instant::now();
        send_batches(&socket, &message, to)?;
        let mut echoed = 0;
        while echoed < count {
            let left = LOST_AFTER.saturating_sub(t.elapsed());
            if left.is_zero() {
                break;
            }
            socket
                .set_read_timeout(Some(left))
                .map_err(|e| e.to_string())?;
            let Ok((n, _)) = socket.recv_from(&mut buf) else {
                break;
            };
            // Datagrams coalesced end to end: each of `DATAGRAM` bytes but the message's last.
            echoed += buf[..n]
                .chunks(DATAGRAM)
                .filter(|d| d.len() >= 8 && d[..8] == trip.to_le_bytes())
                .count();
        }
        let elapsed = t.elapsed().as_nanos() as u64;
        if trip > 50 {
            if echoed == count {
                samples.nanos.push(elapsed);
            } else {
                samples.lost += 1;
            }
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The baseline on this computer's loopback: every size comes back whole, in order.
    #[test]
    fn a_message_of_each_size_comes_back() {
        let pong_socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = pong_socket.local_addr().unwrap().port();
        drop(pong_socket);
        std::thread::spawn(move || pong(port));
        std::thread::sleep(Duration::from_millis(50));
        for size in [64, 1024, 65536] {
            let s = ping(&format!("127.0.0.1:{port}"), size, 60).unwrap();
            assert_eq!(s.nanos.len(), 60, "{size}");
            assert_eq!(s.lost, 0, "{size}");
        }
    }
}
