//! What the other registries of the domain announced, and the decisions drawn from it: who
//! publishes which name (the first host heard wins a conflict), who wants which name, and when
//! a silent host is forgotten. No I/O.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bus::SlotName;

use super::announce::Assembly;
use super::wire::{Announce, PubInfo};
use crate::state::RemoteClaim;

pub struct PeerEntry {
    /// What the host announces, as far as heard: see `announce.rs` (its part fields are those
    /// of the last part taken).
    pub announce: Announce,
    assembly: Assembly,
    pub session: u64,
    pub sender: u64,
    /// Where its values and our values for it go: the announcement's source address and its
    /// announced data port.
    pub data_addr: SocketAddr,
    pub last_heard: Instant,
    first_heard: Instant,
    /// It announced to this host by unicast (its `--peer` names this host): this host's
    /// announcements go to it by unicast too, since multicast may not carry them there.
    pub answer_by_unicast: bool,
}

/// What an announcement changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Nothing,
    Changed,
    /// A host not known before (or restarted).
    New,
}

impl Change {
    pub fn is_new(self) -> bool {
        self == Change::New
    }

    pub fn changed(self) -> bool {
        self != Change::Nothing
    }
}

/// Whether two views of a host announce the same (the part fields aside).
fn same_content(a: &Announce, b: &Announce) -> bool {
    a.publications == b.publications && a.wants == b.wants && a.interval_ms == b.interval_ms
}

/// A remote publication as claimed by its host.
pub struct Claim {
    pub claim: RemoteClaim,
    pub info: PubInfo,
}

#[derive(Default)]
pub struct Peers {
    by_host: BTreeMap<String, PeerEntry>,
    host_of_sender: HashMap<u64, String>,
    /// (sender, session) of registries that said they stop (`leave`): an announcement of that
    /// run coming late (reordered) does not bring the host back. At most `MAX_LEFT`: without
    /// a key anyone can send farewells of made-up hosts and sessions.
    left: std::collections::HashSet<(u64, u64)>,
}

/// Most runs remembered as stopped; past it the record starts over (a late announcement of a
/// run forgotten so brings its host back until it is forgotten again, after --forget-ms).
const MAX_LEFT: usize = 4096;

impl Peers {
    /// Forgets `host`, whose registry said it stops (an announcement expecting no next one,
    /// `Net::farewell`) in `session`; returns its sender id if it was known.
    pub fn leave(&mut self, host: &str, session: u64) -> Option<u64> {
        let sender = super::wire::fnv1a(host.as_bytes());
        if self.left.len() >= MAX_LEFT {
            self.left.clear();
        }
        self.left.insert((sender, session));
        let p = self.by_host.remove(host)?;
        self.host_of_sender.remove(&p.sender);
        Some(p.sender)
    }

    /// Whether the run `session` of `sender` said it stops (`leave`).
    pub fn has_left(&self, sender: u64, session: u64) -> bool {
        self.left.contains(&(sender, session))
    }

    /// Takes one part of a host's announcement (see `announce.rs`) heard in `session`.
    pub fn heard(
        &mut self,
        part: Announce,
        session: u64,
        addr: SocketAddr,
        now: Instant,
    ) -> Change {
        let sender = super::wire::fnv1a(part.host.as_bytes());
        match self.by_host.get_mut(&part.host) {
            Some(p) if p.session > session => Change::Nothing,
            Some(p) => {
                let restarted = p.session != session;
                if restarted {
                    // What it announced before stays until the new session's parts say
                    // otherwise, name by name: a restarted registry adopts its slots, so its
                    // publications are mostly the same, and they must not flicker.
                    p.assembly = Assembly::resumed(&p.announce);
                    p.session = session;
                }
                let moved = p.data_addr != addr;
                p.data_addr = addr;
                p.last_heard = now;
                // `None`: nothing new in this part (most are repetitions).
                let content_changed = match p.assembly.take(part) {
                    Some(view) => {
                        let changed = !same_content(&p.announce, &view);
                        p.announce = view;
                        changed
                    }
                    None => false,
                };
                if restarted {
                    Change::New
                } else if content_changed || moved {
                    Change::Changed
                } else {
                    Change::Nothing
                }
            }
            None => {
                let mut assembly = Assembly::default();
                let Some(view) = assembly.take(part) else {
                    return Change::Nothing;
                };
                tracing::info!("discovered host '{}' at {}", view.host, addr.ip());
                self.host_of_sender.insert(sender, view.host.clone());
                self.by_host.insert(
                    view.host.clone(),
                    PeerEntry {
                        announce: view,
                        assembly,
                        session,
                        sender,
                        data_addr: addr,
                        last_heard: now,
                        first_heard: now,
                        answer_by_unicast: false,
                    },
                );
                Change::New
            }
        }
    }

    /// `host` announced to this host by unicast: answered by unicast from now on (said once).
    pub fn heard_by_unicast(&mut self, host: &str) {
        if let Some(p) = self.by_host.get_mut(host) {
            if !std::mem::replace(&mut p.answer_by_unicast, true) {
                tracing::info!(
                    "host '{host}' announces to this host by unicast (its --peer): answering it \
                     by unicast at {}",
                    p.data_addr
                );
            }
        }
    }

    /// The data addresses of the hosts to answer by unicast (`heard_by_unicast`).
    pub fn unicast_answers(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.by_host
            .values()
            .filter(|p| p.answer_by_unicast)
            .map(|p| p.data_addr)
    }

    pub fn host_of(&self, sender: u64) -> Option<&str> {
        self.host_of_sender.get(&sender).map(String::as_str)
    }

    /// Any datagram of `sender` in the session followed now (checked and not a replay) shows
    /// the host alive. A host with many publications announces in many parts; on a lossy link
    /// a given part may seldom get through while its other datagrams do, and the host must not
    /// be forgotten for that.
    pub fn touch(&mut self, sender: u64, session: u64, now: Instant) {
        let Some(host) = self.host_of_sender.get(&sender) else {
            return;
        };
        if let Some(p) = self.by_host.get_mut(host) {
            if p.session == session {
                p.last_heard = now;
            }
        }
    }

    /// The session of the announcements this registry follows from `sender` now.
    pub fn session_of(&self, sender: u64) -> Option<u64> {
        let host = self.host_of_sender.get(&sender)?;
        self.by_host.get(host).map(|p| p.session)
    }

    /// Forgets hosts silent for longer than `after`, or than three of their own announcement
    /// intervals if those are longer (a host configured to announce rarely is not forgotten
    /// between two announcements); returns (host, sender id) of each.
    pub fn expire(&mut self, now: Instant, after: Duration) -> Vec<(String, u64)> {
        let gone: Vec<(String, u64)> = self
            .by_host
            .iter()
            .filter(|(_, p)| {
                let theirs = Duration::from_millis(u64::from(p.announce.interval_ms) * 3);
                now.duration_since(p.last_heard) > after.max(theirs)
            })
            .map(|(h, p)| (h.clone(), p.sender))
            .collect();
        for (host, sender) in &gone {
            self.by_host.remove(host);
            self.host_of_sender.remove(sender);
        }
        gone
    }

    /// Every public name published remotely, with its publisher. When two hosts publish one
    /// name, `keeps` says which keeps it (the same answer on every host, whatever the order in
    /// which each heard them) and `conflict(name, kept, ignored)` is called, unless one of the
    /// two only keeps a gone publisher's value (`PubInfo::kept`): that is no conflict.
    pub fn claims(&self, conflict: &mut dyn FnMut(&str, &str, &str)) -> BTreeMap<SlotName, Claim> {
        // Heard first, then by name: the conflicts are reported in a stable order.
        let mut hosts: Vec<&PeerEntry> = self.by_host.values().collect();
        hosts.sort_by_key(|p| p.first_heard);
        let mut claims: BTreeMap<SlotName, Claim> = BTreeMap::new();
        for p in hosts {
            for info in &p.announce.publications {
                let Ok(name) = SlotName::public(&info.name) else {
                    continue;
                };
                if bus::directory::is_host_local(&info.name) {
                    continue;
                }
                let claim = Claim {
                    claim: RemoteClaim {
                        host: p.announce.host.clone(),
                        type_name: info.type_name.clone(),
                        schema_hash: info.schema_hash,
                        writer_alive: info.writer_alive,
                        kept: info.kept,
                        kept_written_ns: info.kept_written_ns,
                    },
                    info: info.clone(),
                };
                match claims.get_mut(&name) {
                    None => {
                        claims.insert(name, claim);
                    }
                    Some(held) => {
                        let publishers = !claim.claim.kept && !held.claim.kept;
                        let (kept, ignored) = if keeps(&claim.claim, &held.claim) {
                            let ignored = std::mem::replace(held, claim).claim.host;
                            (held.claim.host.clone(), ignored)
                        } else {
                            (held.claim.host.clone(), claim.claim.host)
                        };
                        if publishers {
                            conflict(&info.name, &kept, &ignored);
                        }
                    }
                }
            }
        }
        claims
    }

    /// Hosts that want `name`'s values: (host, data address, session, series of its mirror).
    pub fn wanting(&self, name: &str) -> Vec<(String, SocketAddr, u64, u64)> {
        self.by_host
            .values()
            .filter_map(|p| {
                let want = p
                    .announce
                    .wants
                    .iter()
                    .find(|w| w.name == name && !w.schema)?;
                Some((p.announce.host.clone(), p.data_addr, p.session, want.mirror))
            })
            .collect()
    }

    /// The names whose schema a host asks for (`Want::schema`), with that host and where its
    /// datagrams go.
    pub fn schema_wanting(&self) -> impl Iterator<Item = (&str, &str, SocketAddr)> + '_ {
        self.by_host.values().flat_map(|p| {
            p.announce
                .wants
                .iter()
                .filter(|w| w.schema)
                .map(move |w| (w.name.as_str(), p.announce.host.as_str(), p.data_addr))
        })
    }

    /// What `host` announces it publishes under `name`.
    pub fn publication(&self, host: &str, name: &str) -> Option<&PubInfo> {
        let p = self.by_host.get(host)?;
        p.announce.publications.iter().find(|i| i.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &PeerEntry> {
        self.by_host.values()
    }
}

/// Which of two hosts publishing one name keeps it: a publisher before a gone one's kept value,
/// a live publisher before one that has not written, the newer of two kept values (as their
/// hosts' clocks tell), then the host whose name sorts first. Every registry decides alike, so
/// that two publishers accepted each on its own host before their buses met (a partition
/// healed) do not both go on, and the hosts that follow the name follow the same one. (A name
/// already published elsewhere is refused to a new publisher at once: this decides only the
/// races.)
pub fn keeps(a: &RemoteClaim, b: &RemoteClaim) -> bool {
    use std::cmp::Reverse;
    let rank = |c: &RemoteClaim| (c.kept, !c.writer_alive, Reverse(c.kept_written_ns));
    (rank(a), &a.host) < (rank(b), &b.host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn announce(host: &str, pubs: &[&str], wants: &[&str]) -> Announce {
        Announce {
            host: host.into(),
            data_port: 9,
            interval_ms: 100,
            generation: 1,
            part: 0,
            parts: 1,
            publications: pubs
                .iter()
                .map(|n| PubInfo {
                    name: (*n).into(),
                    type_name: "T".into(),
                    schema_hash: 1,
                    capacity: 8,
                    writer_alive: true,
                    writer_first: 0,
                    series: 0,
                    kept: false,
                    kept_written_ns: 0,
                })
                .collect(),
            wants: wants
                .iter()
                .map(|w| crate::net::wire::Want {
                    name: (*w).into(),
                    mirror: 0,
                    schema: false,
                })
                .collect(),
        }
    }

    /// Farewells of made-up hosts and sessions (anyone can send them without a key) keep a
    /// bounded record; a run that said it stops is known as such while it lasts.
    #[test]
    fn the_record_of_stopped_runs_is_bounded() {
        let mut p = Peers::default();
        for session in 0..(3 * MAX_LEFT as u64) {
            p.leave(&format!("forged-{session}"), session);
            assert!(p.left.len() <= MAX_LEFT);
        }
        p.leave("a", 7);
        let a = crate::net::wire::fnv1a(b"a");
        assert!(p.has_left(a, 7));
        assert!(!p.has_left(a, 8));
    }

    #[test]
    fn first_publisher_wins_and_silent_hosts_are_forgotten() {
        let addr: SocketAddr = "10.0.0.1:9".parse().unwrap();
        let t0 = Instant::now();
        let mut p = Peers::default();
        assert_eq!(
            p.heard(announce("a", &["/x"], &[]), 1, addr, t0),
            Change::New
        );
        let t1 = t0 + Duration::from_millis(10);
        assert_eq!(
            p.heard(announce("b", &["/x"], &["/y"]), 1, addr, t1),
            Change::New
        );
        assert_eq!(
            p.heard(announce("b", &["/x"], &["/y"]), 1, addr, t1),
            Change::Nothing
        );
        let mut conflicts = Vec::new();
        let claims =
            p.claims(&mut |n, a, b| conflicts.push((n.to_owned(), a.to_owned(), b.to_owned())));
        assert_eq!(claims[&SlotName::public("/x").unwrap()].claim.host, "a");
        assert_eq!(conflicts, vec![("/x".into(), "a".into(), "b".into())]);
        assert_eq!(p.wanting("/y").len(), 1);
        // An older session of b is ignored; a newer one is a restart.
        assert_eq!(
            p.heard(announce("b", &[], &[]), 0, addr, t1),
            Change::Nothing
        );
        assert_eq!(p.heard(announce("b", &[], &[]), 2, addr, t1), Change::New);
        let gone = p.expire(t0 + Duration::from_millis(500), Duration::from_millis(400));
        assert_eq!(gone.len(), 2);
        assert!(p.host_of(super::super::wire::fnv1a(b"a")).is_none());
    }

    #[test]
    fn a_kept_value_is_no_conflict_and_yields_to_a_publisher() {
        let addr: SocketAddr = "10.0.0.1:9".parse().unwrap();
        let t0 = Instant::now();
        let mut p = Peers::default();
        // "a" sorts first and was heard first, but only keeps a gone publisher's value.
        let keeping = |host: &str, names: &[&str], written: u64| {
            let mut kept = announce(host, names, &[]);
            for info in &mut kept.publications {
                info.kept = true;
                info.writer_alive = false;
                info.kept_written_ns = written;
            }
            kept
        };
        p.heard(keeping("a", &["/x", "/y", "/z"], 20), 1, addr, t0);
        p.heard(announce("b", &["/x"], &[]), 1, addr, t0);
        // "c" keeps an older value of /y than "a" does, "d" a newer one of /z.
        p.heard(keeping("c", &["/y"], 10), 1, addr, t0);
        p.heard(keeping("d", &["/z"], 30), 1, addr, t0);
        let mut conflicts = Vec::new();
        let claims =
            p.claims(&mut |n, a, b| conflicts.push((n.to_owned(), a.to_owned(), b.to_owned())));
        let x = &claims[&SlotName::public("/x").unwrap()].claim;
        assert_eq!((x.host.as_str(), x.kept), ("b", false));
        let y = &claims[&SlotName::public("/y").unwrap()].claim;
        assert_eq!(
            (y.host.as_str(), y.kept),
            ("a", true),
            "the newer kept value"
        );
        let z = &claims[&SlotName::public("/z").unwrap()].claim;
        assert_eq!(z.host, "d", "the newer kept value, whatever the host names");
        assert!(conflicts.is_empty(), "{conflicts:?}");
    }

    /// A host that asks only for a name's schema is sent no values of it.
    #[test]
    fn a_schema_want_asks_for_the_schema_only() {
        let addr: SocketAddr = "10.0.0.2:9".parse().unwrap();
        let mut p = Peers::default();
        let mut a = announce("b", &[], &["/v"]);
        a.wants.push(crate::net::wire::Want {
            name: "/s".into(),
            mirror: 0,
            schema: true,
        });
        p.heard(a, 1, addr, Instant::now());
        assert_eq!(p.wanting("/v").len(), 1);
        assert!(p.wanting("/s").is_empty());
        let asks: Vec<_> = p.schema_wanting().collect();
        assert_eq!(asks, [("/s", "b", addr)]);
    }

    #[test]
    fn any_datagram_of_the_followed_session_keeps_a_host() {
        let addr: SocketAddr = "10.0.0.1:9".parse().unwrap();
        let t0 = Instant::now();
        let mut p = Peers::default();
        p.heard(announce("lossy", &["/x"], &[]), 5, addr, t0);
        let sender = super::super::wire::fnv1a(b"lossy");
        let forget_after = Duration::from_millis(1000);
        p.touch(sender, 4, t0 + Duration::from_millis(900));
        p.touch(sender, 5, t0 + Duration::from_millis(900));
        assert!(p
            .expire(t0 + Duration::from_millis(1800), forget_after)
            .is_empty());
        p.touch(sender, 4, t0 + Duration::from_millis(2500));
        assert_eq!(
            p.expire(t0 + Duration::from_millis(2500), forget_after)
                .len(),
            1,
            "another session's datagrams do not count"
        );
    }

    #[test]
    fn a_host_announcing_rarely_is_kept_for_three_of_its_intervals() {
        let addr: SocketAddr = "10.0.0.1:9".parse().unwrap();
        let t0 = Instant::now();
        let mut p = Peers::default();
        let mut rare = announce("rare", &["/x"], &[]);
        rare.interval_ms = 4000;
        p.heard(rare, 1, addr, t0);
        let forget_after = Duration::from_millis(1500);
        assert!(p
            .expire(t0 + Duration::from_secs(5), forget_after)
            .is_empty());
        assert_eq!(
            p.expire(t0 + Duration::from_secs(13), forget_after).len(),
            1
        );
    }
}
