//! Network statistics: counters updated without locks on the datagram paths, and the serde
//! struct the registry publishes in its own slot `/baton/registry/<host>/net`.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::wire::Drop;

#[derive(Default)]
pub struct Counters {
    pub sent_datagrams: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub received_datagrams: AtomicU64,
    pub received_bytes: AtomicU64,
    pub looped_back: AtomicU64,
    pub values_reflected: AtomicU64,
    pub values_mirrored: AtomicU64,
    pub values_unchanged: AtomicU64,
    pub conflicts: AtomicU64,
    pub send_errors: AtomicU64,
    dropped: [AtomicU64; Drop::ALL.len()],
}

impl Counters {
    pub fn drop(&self, why: Drop) {
        // Relaxed: independent counters, read only for statistics.
        self.dropped[why.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn dropped(&self) -> std::collections::BTreeMap<String, u64> {
        Drop::ALL
            .iter()
            .map(|d| {
                (
                    d.name().to_owned(),
                    self.dropped[d.index()].load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

/// One peer registry as this registry knows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerStats {
    pub host: String,
    pub address: String,
    pub publications: u64,
    pub wants: u64,
    pub last_heard_ms: u64,
}

/// The value of `/baton/registry/<host>/net`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetStats {
    pub host: String,
    pub authenticated: bool,
    pub peers: Vec<PeerStats>,
    pub datagrams_sent: u64,
    pub bytes_sent: u64,
    pub send_errors: u64,
    /// Datagrams (and their bytes) received from other registries: this registry's own,
    /// which multicast loops back to it, are `looped_back` and nothing else.
    pub datagrams_received: u64,
    pub bytes_received: u64,
    /// This registry's own datagrams, looped back by multicast: expected, not drops.
    pub looped_back: u64,
    /// Datagrams (or reassembled values, or values of a bundle) dropped, and local values not
    /// sent (`too_large_to_send`), by cause.
    pub dropped: std::collections::BTreeMap<String, u64>,
    /// Values sent to remote subscribers (each value once per receiving host), counted when
    /// the kernel took all of its datagrams (a failed send counts in `send_errors` only; one
    /// the test switch's fault injection dropped a datagram of, in neither).
    pub values_reflected: u64,
    /// Remote values written into local mirror slots.
    pub values_mirrored: u64,
    /// Remote values that the mirror held already: the periodic refresh (and network
    /// duplicates of the newest value). Not drops: nothing was lost or out of order.
    pub values_unchanged: u64,
    /// Incomplete fragmented values held.
    pub reassemblies_pending: u64,
    /// Memory counted for them against `--reassembly-limit`: their buffers plus a fixed
    /// overhead each (see `reassembly.rs`).
    pub reassembly_bytes: u64,
    /// Publications refused or ignored because another host publishes the same name.
    pub conflicts: u64,
}

impl NetStats {
    pub fn load(c: &Counters) -> NetStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        NetStats {
            host: String::new(),
            authenticated: false,
            peers: Vec::new(),
            datagrams_sent: r(&c.sent_datagrams),
            bytes_sent: r(&c.sent_bytes),
            send_errors: r(&c.send_errors),
            datagrams_received: r(&c.received_datagrams),
            bytes_received: r(&c.received_bytes),
            looped_back: r(&c.looped_back),
            dropped: c.dropped(),
            values_reflected: r(&c.values_reflected),
            values_mirrored: r(&c.values_mirrored),
            values_unchanged: r(&c.values_unchanged),
            reassemblies_pending: 0,
            reassembly_bytes: 0,
            conflicts: r(&c.conflicts),
        }
    }
}
