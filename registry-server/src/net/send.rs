//! Sending: a message cut into datagrams at the chunk size, each with its header and MAC, through
//! the test-only fault injector, to every destination. The datagrams of a multi-datagram
//! message go to the kernel in batches of one system call (UDP segmentation offload, the
//! socket's `UDP_SEGMENT` set to the full datagram size at start-up), never as IP fragments.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::faults::{Action, Faults};
use super::stats::Counters;
use super::warn::Cause;
use super::wire::{self, Header};
use super::{lock, Net, SendState};

impl Net {
    /// Sends one message to each destination, fragmented at the chunk size; returns to how
    /// many every datagram went out (the kernel took them). A message larger than the peers
    /// accept is not sent (values are checked against `--max-value` before, by name): 0.
    /// Announcement parts are cut to the datagram size, whatever `--max-value`: never held to
    /// it, here or at the receiver.
    pub(super) fn send_message(&self, channel: u64, body: &[u8], to: &[SocketAddr]) -> usize {
        if to.is_empty() {
            return 0;
        }
        if body.len() > self.max_message as usize && channel != wire::ANNOUNCE_CHANNEL {
            if self
                .warnings
                .due(Cause::OverMaxValue, &format!("send {channel:#x}"))
            {
                tracing::warn!(
                    "not sending a message of {} bytes on channel {channel:#x}: larger than \
                     --max-value {} allows (said once a minute)",
                    body.len(),
                    self.max_value
                );
            }
            return 0;
        }
        let mut s = lock(&self.send);
        s.message += 1;
        let message = s.message;
        let total = body.len().max(1);
        let padded: &[u8] = if body.is_empty() { &[0] } else { body };
        // Without fault injection, the datagrams of one message to one host leave in batches
        // of one system call each (UDP segmentation offload) when the kernel allows it.
        let batch = s.faults.is_none() && s.gso && padded.len() > self.chunk;
        let mut sent = 0;
        for dest in to {
            // Only this thread counts send errors, under the send lock: none new, all went.
            let errors = self.counters.send_errors.load(Ordering::Relaxed);
            let mut gso = std::mem::take(&mut s.gso_buffer);
            gso.clear();
            let mut in_batch = 0;
            // Whether the fault injection (a test switch) let every datagram go.
            let mut none_injected_lost = true;
            for (i, part) in padded.chunks(self.chunk).enumerate() {
                s.packet += 1;
                let header = Header {
                    flags: if self.key.is_some() {
                        wire::FLAG_MAC
                    } else {
                        0
                    },
                    domain: self.domain_id,
                    sender: self.sender_id,
                    session: self.session,
                    packet: s.packet,
                    channel,
                    message,
                    total: total as u32,
                    offset: (i * self.chunk) as u32,
                    chunk: self.chunk as u32,
                    body_len: part.len() as u32,
                };
                // A batched datagram is built in place at the end of the batch, any other
                // in the datagram buffer.
                if batch {
                    self.append_datagram(&mut gso, &header, part);
                    in_batch += 1;
                    if in_batch == self.gso_batch {
                        self.send_batch(&mut s, &gso, in_batch, *dest);
                        gso.clear();
                        in_batch = 0;
                    }
                } else {
                    let mut d = std::mem::take(&mut s.datagram);
                    d.clear();
                    self.append_datagram(&mut d, &header, part);
                    none_injected_lost &= self.transmit(&mut s, &d, *dest);
                    s.datagram = d;
                }
            }
            if in_batch > 0 {
                self.send_batch(&mut s, &gso, in_batch, *dest);
            }
            s.gso_buffer = gso;
            if self.counters.send_errors.load(Ordering::Relaxed) == errors && none_injected_lost {
                sent += 1;
            }
        }
        sent
    }

    /// Appends one datagram to `out`: its header, `body`, and the MAC over both when keyed.
    fn append_datagram(&self, out: &mut Vec<u8>, header: &Header, body: &[u8]) {
        let start = out.len();
        wire::encode_header(header, out);
        out.extend_from_slice(body);
        if let Some(key) = &self.key {
            let mac = key.mac(&out[start..]);
            out.extend_from_slice(&mac);
        }
    }

    /// Sends `count` datagrams laid end to end in `batch` (each of the full datagram size but
    /// the last) in one system call, the kernel cutting them apart (`UDP_SEGMENT`). If the
    /// kernel or the device refuses batching itself, it is turned off and they go one by one; a
    /// passing failure (no buffer space, an unreachable host) only counts as send errors.
    fn send_batch(&self, s: &mut SendState, batch: &[u8], count: usize, to: SocketAddr) {
        if count == 1 {
            self.send_to(batch, to);
            return;
        }
        match self.data.send_to(batch, to) {
            Ok(n) => {
                Counters::add(&self.counters.sent_datagrams, count as u64);
                Counters::add(&self.counters.sent_bytes, n as u64);
            }
            Err(e) if refuses_batching(&e) => {
                // One alone first: if the path refuses even that (its MTU dropped under the
                // datagram size since start), batching is not to blame and stays on.
                // (Decided on the single send's error: older kernels answer a batch larger
                // than the path with EINVAL.)
                let mut datagrams = batch.chunks(self.datagram_size);
                if let Some(first) = datagrams.next() {
                    if self.send_to(first, to).is_some_and(|e| is_too_long(&e)) {
                        Counters::add(&self.counters.send_errors, count as u64 - 1);
                        return;
                    }
                }
                tracing::warn!(
                    "sending {count} datagrams in one call failed ({e}); sending one by one \
                     from now on"
                );
                s.gso = false;
                for d in datagrams {
                    self.send_to(d, to);
                }
            }
            Err(e) => {
                Counters::add(&self.counters.send_errors, count as u64);
                self.warn_send_error(&e, to);
            }
        }
    }

    /// Sends one datagram through the fault injection, if on; `false` when it dropped it (a
    /// datagram it holds back goes with the next one).
    fn transmit(&self, s: &mut SendState, d: &[u8], to: SocketAddr) -> bool {
        let action = match s.faults.as_mut() {
            Some(f) => f.decide(Instant::now()),
            None => Action::Send,
        };
        match action {
            Action::Drop => {
                if let Some((held, to)) = s.faults.as_mut().and_then(Faults::take_held) {
                    self.send_to(&held, to);
                }
                return false;
            }
            Action::Send => {
                self.send_to(d, to);
            }
            Action::Twice => {
                self.send_to(d, to);
                self.send_to(d, to);
            }
            Action::Hold => {
                if let Some(f) = s.faults.as_mut() {
                    f.hold(d, to);
                }
                return true;
            }
        }
        if let Some((held, to)) = s.faults.as_mut().and_then(Faults::take_held) {
            self.send_to(&held, to);
        }
        true
    }

    /// Sends one datagram, counted; the error when it failed (counted and said already).
    fn send_to(&self, d: &[u8], to: SocketAddr) -> Option<std::io::Error> {
        match self.data.send_to(d, to) {
            Ok(n) => {
                Counters::add(&self.counters.sent_datagrams, 1);
                Counters::add(&self.counters.sent_bytes, n as u64);
                None
            }
            Err(e) => {
                Counters::add(&self.counters.send_errors, 1);
                self.warn_send_error(&e, to);
                Some(e)
            }
        }
    }

    /// A failed send is counted (`send_errors`) and said once a minute per destination: a
    /// route gone or a firewall rule would otherwise show only as a growing counter.
    fn warn_send_error(&self, e: &std::io::Error, to: SocketAddr) {
        if self.warnings.due(Cause::SendError, &to.to_string()) {
            let hint = if is_too_long(e) {
                format!(
                    ": the route's MTU is now below this registry's datagrams of {} bytes (it \
                     measures the route at start); lower --mtu, or restart the registry",
                    self.datagram_size
                )
            } else {
                String::new()
            };
            tracing::warn!(
                "sending to {to} failed: {e}{hint} (counted in send_errors; said once a minute \
                 per destination)"
            );
        }
    }
}

/// Whether a send failed because the datagram is larger than the path takes (EMSGSIZE).
fn is_too_long(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(nix::errno::Errno::EMSGSIZE as i32)
}

/// Whether a failed `UDP_SEGMENT` send says that batching itself cannot work here (a kernel or
/// device without segmentation offload answers EIO, EINVAL or EOPNOTSUPP; a batch too large
/// for it EMSGSIZE), rather than a passing condition that would fail one by one as well.
fn refuses_batching(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    e.raw_os_error().is_some_and(|code| {
        [
            Errno::EIO,
            Errno::EINVAL,
            Errno::EOPNOTSUPP,
            Errno::EMSGSIZE,
        ]
        .iter()
        .any(|errno| *errno as i32 == code)
    })
}
