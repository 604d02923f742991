//! The directory slot `/baton/registry/directory` (see `bus::directory`): created at start-up,
//! rewritten by `publish_directory` after anything that may change the set of known public
//! publications or their publishers' liveness (registrations, disconnections, the sweeper, the
//! network layer's reconciliation). Written only when the value differs from the last one.

use bus::directory::{
    is_host_local, Directory, DirectoryEntry, DIRECTORY_CAPACITY, DIRECTORY_SLOT,
};
use bus::schema::Schema;
use bus::slot::WriterState;
use bus::SlotName;

use super::Registry;

/// How large the directory's slot may grow (`publish_directory`): made for `DIRECTORY_CAPACITY`
/// (some 4,000 publications of long names), it takes four times its room in /dev/shm.
const GROWN_AT_MOST: u64 = 64 << 20;

/// The directory slot's name and what was last written to it. The slot itself is the
/// registry's entry's (`SlotEntry::slot`), mapped once: a second mapping here kept the memory
/// of a directory removed from /dev/shm taken, and on a full /dev/shm it could then not be made
/// anew even once everything else was gone.
pub(super) struct Published {
    name: SlotName,
    last: Option<Directory>,
    host: String,
    /// A directory too big for the slot was reported once.
    overflow_logged: bool,
}

impl Published {
    pub(super) fn slot_name(&self) -> &str {
        self.name.as_str()
    }
}

impl Registry {
    /// Creates (or adopts) the directory slot and writes the first directory. `host` is this
    /// computer's name on the bus. A directory that cannot be created for want of room (a
    /// full /dev/shm) is no reason not to serve the bus: it is made at a later check
    /// (`make_anew_again`), as one removed while the registry runs is.
    pub fn create_directory_slot(&mut self, host: &str) -> Result<(), String> {
        let name = SlotName::public(DIRECTORY_SLOT).map_err(|e| e.to_string())?;
        let schema = Schema::of_serde::<Directory>().map_err(|e| e.to_string())?;
        if let Err(e) = self.create_own_slot(&name, &schema, DIRECTORY_CAPACITY as u64) {
            let retried = self
                .slots
                .get(&name)
                .is_some_and(|entry| entry.own.is_some() && entry.slot.is_none());
            if !retried {
                return Err(e);
            }
            tracing::error!(
                "{e}; serving the bus without {DIRECTORY_SLOT}, and trying again at every check"
            );
        }
        self.directory = Some(Published {
            name,
            last: None,
            host: host.to_owned(),
            overflow_logged: false,
        });
        self.publish_directory();
        Ok(())
    }

    /// Writes the directory into its slot made anew.
    pub(super) fn reopen_directory(&mut self) {
        if let Some(p) = self.directory.as_mut() {
            p.last = None;
        }
        self.publish_directory();
    }

    /// Whether the directory lists `name` as the remote claim rather than as the slot here: a
    /// publisher here comes first, then a remote one, then a gone publisher's value kept
    /// here, then one kept elsewhere.
    fn remote_listed(&self, name: &SlotName) -> bool {
        let Some(claim) = self.remote.get(name) else {
            return false;
        };
        let kept_here = self.slots.get(name).is_some_and(|e| e.keeps_gone_value());
        !(self.is_published_here(name) || (claim.kept && kept_here))
    }

    /// Every public publication known here, local and remote, sorted by name.
    pub fn directory(&self, host: &str) -> Directory {
        let mut entries: Vec<DirectoryEntry> = Vec::new();
        for (name, e) in &self.slots {
            if name.is_private() || is_host_local(name.as_str()) {
                continue;
            }
            let Some(slot) = &e.slot else { continue };
            let writer = slot.writer_state();
            // Claimed by a remote host right now: listed below with its claim.
            if self.remote_listed(name) {
                continue;
            }
            // A slot whose writer never registered (an adopted leftover) is nobody's publication.
            if writer == WriterState::None && !e.published_here() {
                continue;
            }
            entries.push(DirectoryEntry {
                name: name.as_str().to_owned(),
                type_name: e.schema.type_name.clone(),
                schema_hash: e.schema.hash.0,
                origin_host: e.origin.clone(),
                publisher_alive: writer == WriterState::Alive,
                publisher_started: e
                    .origin
                    .is_none()
                    .then(|| slot.writer().start_time)
                    .filter(|&t| t != 0),
            });
        }
        for (name, claim) in &self.remote {
            if !self.remote_listed(name) || is_host_local(name.as_str()) {
                continue;
            }
            entries.push(DirectoryEntry {
                name: name.as_str().to_owned(),
                type_name: claim.type_name.clone(),
                schema_hash: claim.schema_hash,
                origin_host: Some(claim.host.clone()),
                publisher_alive: claim.writer_alive,
                publisher_started: None,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Directory {
            host: host.to_owned(),
            entries,
        }
    }

    /// Rewrites the directory slot if the directory changed since it was last written.
    pub fn publish_directory(&mut self) {
        let Some(host) = self.directory.as_ref().map(|p| p.host.clone()) else {
            return;
        };
        let now = self.directory(&host);
        let Some(p) = self.directory.as_mut() else {
            return;
        };
        // Not there while it cannot be made (anew): written when it is (`reopen_directory`).
        let Some(slot) = self.slots.get(&p.name).and_then(|e| e.slot.as_ref()) else {
            return;
        };
        if p.last.as_ref() == Some(&now) {
            return;
        }
        let mut bytes = Vec::new();
        if let Err(e) = bus::codec::encode_into(&now, &mut bytes) {
            tracing::error!("cannot encode the directory: {e}");
            return;
        }
        match slot.write(&bytes) {
            Ok(_) => p.overflow_logged = false,
            // (Not on a /dev/shm without the room: it would be made anew at its old size
            // again, and its subscribers told, at every check.)
            Err(bus::BusError::TooLarge { .. })
                if bytes.len() as u64 <= GROWN_AT_MOST / 2
                    && !super::kept::may_not_fit(
                        (bytes.len() as u64 * 3 / 2).next_power_of_two(),
                        slot,
                    ) =>
            {
                // Outgrown: the sweeper makes the slot anew, this large and half as large again
                // (`replace_if_damaged`), tells its subscribers, and writes the directory there.
                let room = (bytes.len() as u64 * 3 / 2).next_power_of_two();
                let has = slot.capacity();
                if let Some(entry) = self.slots.get_mut(&p.name) {
                    // Said once: until the sweeper makes it, every change comes here again.
                    if entry.own.is_none_or(|asked| asked < room) {
                        tracing::warn!(
                            "the directory of {} entries ({} bytes) outgrows its slot ({} \
                             bytes): making it anew with room for {room}",
                            now.entries.len(),
                            bytes.len(),
                            has
                        );
                        entry.own = Some(room);
                    }
                }
                return;
            }
            Err(e) => {
                if !p.overflow_logged {
                    tracing::error!(
                        "directory of {} entries not published ({} bytes, slot holds {}): {e}",
                        now.entries.len(),
                        bytes.len(),
                        slot.capacity()
                    );
                    p.overflow_logged = true;
                }
                return;
            }
        }
        p.last = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bus::protocol::{EndpointKind, Reply};
    use bus::{Domain, SlotName};

    use super::*;
    use crate::state::tests::{registration, Cleanup};
    use crate::state::{Peer, RemoteClaim};

    #[test]
    fn the_directory_lists_local_and_remote_publications_and_follows_them() {
        let domain = Domain::new(&format!("unit-dir-{}", std::process::id())).unwrap();
        let _ = domain.remove_all_segments();
        let _cleanup = Cleanup(domain.clone());
        let mut reg = Registry::new(domain.clone(), None);
        reg.create_directory_slot("hA").unwrap();
        let me = std::process::id();
        reg.connect(
            1,
            Peer {
                pid: me,
                start_time: bus::process::own_start_time(),
                program: "t".into(),
            },
        );
        let schema = Schema::of_serde::<u64>().unwrap();
        let out = reg.register(
            1,
            1,
            registration("/robot/controller/x", EndpointKind::Publication, &schema),
        );
        assert!(matches!(out[0].2, Reply::Registered { .. }), "{out:?}");
        reg.set_remote_claims(BTreeMap::from([(
            SlotName::public("/robot/controller/far").unwrap(),
            RemoteClaim {
                host: "hB".into(),
                type_name: "T".into(),
                schema_hash: 7,
                writer_alive: true,
                kept: false,
                kept_written_ns: 0,
            },
        )]));
        reg.publish_directory();
        let read = |reg: &Registry| -> Directory {
            let name = SlotName::public(DIRECTORY_SLOT).unwrap();
            let slot = reg.slots[&name].slot.as_ref().unwrap();
            let mut bytes = Vec::new();
            slot.read(0, &mut bytes).unwrap().unwrap();
            bus::codec::decode(&bytes).unwrap()
        };
        let d = read(&reg);
        assert_eq!(d.host, "hA");
        let names: Vec<(&str, Option<&str>, bool)> = d
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e.origin_host.as_deref(), e.publisher_alive))
            .collect();
        assert_eq!(
            names,
            [
                ("/robot/controller/far", Some("hB"), true),
                ("/robot/controller/x", None, true)
            ],
            "the directory does not list itself"
        );
        // The local publisher goes away after writing a value: still listed (its value is
        // kept), not alive.
        let segment = domain.segment_name(&SlotName::public("/robot/controller/x").unwrap());
        let slot = bus::slot::Slot::open(&segment, true).unwrap();
        slot.write(&7u64.to_le_bytes()).unwrap();
        reg.disconnect(1);
        reg.publish_directory();
        let d = read(&reg);
        assert!(d
            .entries
            .iter()
            .any(|e| e.name == "/robot/controller/x" && !e.publisher_alive));
        reg.set_remote_claims(BTreeMap::new());
        reg.publish_directory();
        assert_eq!(read(&reg).entries.len(), 1);
    }

    /// More publications than the directory's slot has room for (some 4,000 of long names):
    /// it stayed as it was, listing none of those that came later, with an error in the log.
    /// Its slot is made anew, larger, and lists them all.
    #[test]
    fn a_directory_that_outgrows_its_slot_is_made_anew_larger() {
        let domain = Domain::new(&format!("unit-dirgrow-{}", std::process::id())).unwrap();
        let _ = domain.remove_all_segments();
        let _cleanup = Cleanup(domain.clone());
        let mut reg = Registry::new(domain.clone(), None);
        reg.create_directory_slot("hA").unwrap();
        let long = "x".repeat(150);
        let claims: BTreeMap<SlotName, RemoteClaim> = (0..5000)
            .map(|i| {
                let name = SlotName::public(&format!("/far/{i}/{long}")).unwrap();
                let claim = RemoteClaim {
                    host: "hB".into(),
                    type_name: format!("robot::types::{long}"),
                    schema_hash: 7,
                    writer_alive: true,
                    kept: false,
                    kept_written_ns: 0,
                };
                (name, claim)
            })
            .collect();
        reg.set_remote_claims(claims);
        reg.publish_directory();
        let name = SlotName::public(DIRECTORY_SLOT).unwrap();
        let listed = |reg: &Registry| -> usize {
            let slot = reg.slots[&name].slot.as_ref().unwrap();
            let mut bytes = Vec::new();
            slot.read(0, &mut bytes).unwrap().unwrap();
            bus::codec::decode::<Directory>(&bytes)
                .unwrap()
                .entries
                .len()
        };
        assert_eq!(listed(&reg), 0, "a directory this large does not fit");
        let (_, made_anew) = reg.replace_damaged(usize::MAX);
        assert!(made_anew);
        let room = reg.slots[&name].slot.as_ref().unwrap().capacity();
        assert!(room > DIRECTORY_CAPACITY, "{room}");
        assert_eq!(listed(&reg), 5000);
    }
}
