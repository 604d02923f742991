//! `stats`: the registry's counters (slots, endpoints, connections, processes, from its `List`)
//! and the network counters every registry with `--net` publishes in
//! `/baton/registry/<host>/net`, decoded through the slot's stored schema (so this module needs
//! no registry type, and reads the statistics of remote hosts that are mirrored here too).

use std::collections::BTreeSet;

use bus::protocol::EndpointKind;
use bus::Domain;
use serde::Serialize;

use super::table::{self, Align, Table};

/// Prefix of the registries' own slots (the directory, the statistics), and suffix of the
/// statistics slots.
pub(super) const PREFIX: &str = "/baton/registry/";
const SUFFIX: &str = "/net";

/// One registry's network statistics slot.
#[derive(Debug, Serialize)]
pub struct NetSlot {
    pub slot: String,
    /// Host that publishes it (from the name).
    pub host: String,
    /// `true` when the slot is a mirror of another host's statistics.
    pub mirrored: bool,
    /// Whether the registry that wrote the statistics still runs: those of a registry gone (or
    /// of an earlier run under another host name) are its last, not current.
    pub writer_alive: bool,
    pub age_s: Option<f64>,
    /// The decoded `NetStats` value (datagrams, bytes, drops by cause, peers...).
    pub value: serde_json::Value,
}

/// A peer as one registry sees it.
#[derive(Debug, Serialize)]
pub struct Peer {
    pub host: String,
    pub address: String,
    pub last_heard_ms: u64,
}

impl NetSlot {
    /// The drop causes counted so far, as `cause count` (those never counted left out).
    pub fn drops(&self) -> Vec<String> {
        self.value["dropped"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(cause, n)| {
                n.as_u64()
                    .filter(|n| *n > 0)
                    .map(|n| format!("{cause} {n}"))
            })
            .collect()
    }

    pub fn peers(&self) -> Vec<Peer> {
        let Some(peers) = self.value["peers"].as_array() else {
            return Vec::new();
        };
        peers
            .iter()
            .map(|p| Peer {
                host: p["host"].as_str().unwrap_or("?").to_owned(),
                address: p["address"].as_str().unwrap_or("?").to_owned(),
                last_heard_ms: p["last_heard_ms"].as_u64().unwrap_or(0),
            })
            .collect()
    }
}

/// Every readable `/baton/registry/*/net` slot of `domain` that holds a value.
pub fn read(domain: &Domain) -> Vec<NetSlot> {
    let Ok((slots, _)) = super::list(domain, Some("/baton/registry/*/net")) else {
        return Vec::new();
    };
    slots
        .into_iter()
        .filter_map(|s| {
            let host = s
                .name
                .strip_prefix(PREFIX)?
                .strip_suffix(SUFFIX)?
                .to_owned();
            let name = super::slot_name(&s.name).ok()?;
            let reading = super::read_here(domain, &name).ok()??;
            Some(NetSlot {
                slot: s.name,
                host,
                mirrored: s.mirrored,
                writer_alive: s.writer_alive,
                age_s: s.age_s,
                value: reading.value,
            })
        })
        .collect()
}

/// Counts from the registry's listing.
#[derive(Debug, Serialize, Default)]
pub struct RegistryCounts {
    /// Slots that exist (a segment each).
    pub slots: usize,
    /// Names only subscribed to so far: subscriptions wait there for a publication.
    pub awaited: usize,
    pub publications: usize,
    /// Subscriptions bound to their slot.
    pub subscriptions: usize,
    /// Subscriptions waiting for a publication (not in `subscriptions`).
    pub pending: usize,
    pub connections: usize,
    /// Distinct processes with endpoints.
    pub processes: usize,
}

/// What `stats` prints.
#[derive(Debug, Serialize)]
pub struct Stats {
    pub registry: Option<RegistryCounts>,
    pub registry_error: Option<String>,
    pub net: Vec<NetSlot>,
}

pub fn gather(domain: &Domain) -> Stats {
    let (registry, registry_error) = match super::registry::listing(domain) {
        Ok(slots) => {
            let existing = slots.iter().filter(|s| s.segment.is_some()).count();
            let mut c = RegistryCounts {
                slots: existing,
                awaited: slots.len() - existing,
                ..RegistryCounts::default()
            };
            let mut pids = BTreeSet::new();
            for s in &slots {
                for e in &s.endpoints {
                    pids.insert(e.pid);
                    match e.kind {
                        EndpointKind::Publication => c.publications += 1,
                        EndpointKind::Subscription if e.bound => c.subscriptions += 1,
                        EndpointKind::Subscription => c.pending += 1,
                    }
                }
                c.connections += s.connections().len();
            }
            c.processes = pids.len();
            (Some(c), None)
        }
        Err(e) => (None, Some(e.to_string())),
    };
    Stats {
        registry,
        registry_error,
        net: read(domain),
    }
}

/// The human form of `stats`.
pub fn render(s: &Stats) -> String {
    let mut out = String::new();
    match (&s.registry, &s.registry_error) {
        (Some(c), _) => out.push_str(&format!(
            "registry: {} slots (+{} names awaited), {} publications, {} subscriptions \
             bound (+{} waiting for a publication), {} connections, {} processes\n",
            c.slots,
            c.awaited,
            c.publications,
            c.subscriptions,
            c.pending,
            c.connections,
            c.processes
        )),
        (None, Some(e)) => out.push_str(&format!("registry: {e}\n")),
        (None, None) => {}
    }
    if s.net.is_empty() {
        out.push_str(
            "network: no /baton/registry/*/net slot (the registry runs without --net, or has \
             not published its statistics yet)\n",
        );
        return out;
    }
    let mut t = Table::new(&[
        ("HOST", Align::Left),
        ("AUTH", Align::Left),
        ("PEERS", Align::Right),
        ("SENT", Align::Right),
        ("SENT B", Align::Right),
        ("RECEIVED", Align::Right),
        ("RECV B", Align::Right),
        ("REFLECTED", Align::Right),
        ("MIRRORED", Align::Right),
        ("DROPPED", Align::Right),
        ("ERRORS", Align::Right),
        ("CONFLICTS", Align::Right),
        ("AGE", Align::Right),
    ]);
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    for slot in &s.net {
        let v = &slot.value;
        let dropped: u64 = v["dropped"]
            .as_object()
            .map_or(0, |m| m.values().map(n).sum());
        t.row(vec![
            format!(
                "{}{}{}",
                slot.host,
                if slot.mirrored { " (mirror)" } else { "" },
                if slot.writer_alive { "" } else { " (gone)" }
            ),
            if v["authenticated"] == true {
                "key"
            } else {
                "none"
            }
            .into(),
            slot.peers().len().to_string(),
            n(&v["datagrams_sent"]).to_string(),
            table::bytes(n(&v["bytes_sent"]) as f64),
            n(&v["datagrams_received"]).to_string(),
            table::bytes(n(&v["bytes_received"]) as f64),
            n(&v["values_reflected"]).to_string(),
            n(&v["values_mirrored"]).to_string(),
            dropped.to_string(),
            n(&v["send_errors"]).to_string(),
            n(&v["conflicts"]).to_string(),
            table::age(slot.age_s),
        ]);
    }
    out.push_str(&t.render());
    for slot in &s.net {
        let drops = slot.drops();
        if !drops.is_empty() {
            out.push_str(&format!("{} dropped: {}\n", slot.host, drops.join(", ")));
        }
        for p in slot.peers() {
            out.push_str(&if slot.writer_alive {
                format!(
                    "{} hears {} at {} (last {} ms ago)\n",
                    slot.host, p.host, p.address, p.last_heard_ms
                )
            } else {
                format!(
                    "{} (its registry gone, as it last wrote) heard {} at {}\n",
                    slot.host, p.host, p.address
                )
            });
        }
    }
    out
}
