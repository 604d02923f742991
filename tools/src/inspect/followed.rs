//! A slot followed by name across its re-creation: the registry re-creates a slot (larger) when
//! a publication needs more room and nobody maps it, and a tool that kept the old mapping would
//! read a file nobody writes any more. `Followed` re-opens the name when it comes to mean
//! another segment file.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use bus::slot::Slot;
use bus::{Domain, SlotName};

use super::{Error, Result};

pub struct Followed {
    name: SlotName,
    slot: Option<Slot>,
    /// Device and inode of the file `slot` maps.
    identity: Option<(u64, u64)>,
    /// A new file under the name that did not open yet, and since when: a file seen while the
    /// registry makes it (sized, its header not written yet: the magic is written last) reads
    /// as corrupt for a moment, so its error counts only once it lasts.
    not_yet: Option<((u64, u64), Instant)>,
}

/// How long a new segment may fail to open before its error counts.
const CREATION_GRACE: Duration = Duration::from_secs(1);

impl Followed {
    /// Opens `name` if its slot exists (and follows it from then on either way). A slot being
    /// made as it is looked at is waited for (at most `CREATION_GRACE`).
    pub fn new(domain: &Domain, name: &SlotName) -> Result<Followed> {
        let mut followed = Followed {
            name: name.clone(),
            slot: None,
            identity: None,
            not_yet: None,
        };
        while !followed.refresh(domain)? && followed.not_yet.is_some() {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(followed)
    }

    pub fn name(&self) -> &SlotName {
        &self.name
    }

    pub fn slot(&self) -> Option<&Slot> {
        self.slot.as_ref()
    }

    /// Re-checks what the name means; `true` when a slot other than the one held is there now
    /// (it appeared, or was re-created). A slot whose file vanished stays mapped until another
    /// takes its name; a new file that does not open yet is looked at again at the next call.
    pub fn refresh(&mut self, domain: &Domain) -> Result<bool> {
        let Some(file) = identity(domain, &self.name) else {
            // A new file that went away before it opened is waited for no longer (`new` would
            // wait for its grace to end, which a file gone never ends).
            self.not_yet = None;
            return Ok(false);
        };
        if Some(file) == self.identity {
            return Ok(false);
        }
        match super::open(domain, &self.name) {
            Ok(slot) => {
                // The file opened, which may be newer than the one looked at above.
                self.identity = Some(slot.file());
                self.slot = Some(slot);
                self.not_yet = None;
                Ok(true)
            }
            Err(Error::NoSlot { .. }) => {
                self.not_yet = None;
                Ok(false)
            }
            Err(e @ Error::Bus(bus::BusError::Segment(_))) => {
                let now = Instant::now();
                let first = match self.not_yet {
                    Some((seen, since)) if seen == file => since,
                    _ => now,
                };
                if now.duration_since(first) >= CREATION_GRACE {
                    self.not_yet = None;
                    return Err(e);
                }
                self.not_yet = Some((file, first));
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// Device and inode of the segment file that `name` names now, if it exists.
fn identity(domain: &Domain, name: &SlotName) -> Option<(u64, u64)> {
    std::fs::metadata(super::segment_file(domain, name))
        .ok()
        .map(|m| (m.dev(), m.ino()))
}
