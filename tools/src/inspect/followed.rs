//! A slot followed by name across its re-creation: the registry re-creates a slot (larger) when
//! a publication needs more room and nobody maps it, and a tool that kept the old mapping would
//! read a file nobody writes any more. `Followed` re-opens the name when it comes to mean
//! another segment file.

use std::os::unix::fs::MetadataExt;

use bus::slot::Slot;
use bus::{Domain, SlotName};

use super::{Error, Result};

pub struct Followed {
    name: SlotName,
    slot: Option<Slot>,
    /// Device and inode of the file `slot` maps.
    identity: Option<(u64, u64)>,
}

impl Followed {
    /// Opens `name` if its slot exists (and follows it from then on either way).
    pub fn new(domain: &Domain, name: &SlotName) -> Result<Followed> {
        let mut followed = Followed {
            name: name.clone(),
            slot: None,
            identity: None,
        };
        followed.refresh(domain)?;
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
    /// takes its name.
    pub fn refresh(&mut self, domain: &Domain) -> Result<bool> {
        let identity = identity(domain, &self.name);
        if identity.is_none() || identity == self.identity {
            return Ok(false);
        }
        // A file seen as it is being made (sized, its header not written yet: the magic is
        // written last) reads as corrupt for a moment: look again before saying so.
        let mut tries = 0;
        loop {
            match super::open(domain, &self.name) {
                Ok(slot) => {
                    self.slot = Some(slot);
                    self.identity = identity;
                    return Ok(true);
                }
                Err(Error::NoSlot { .. }) => return Ok(false),
                Err(e) if tries >= CREATION_TRIES => return Err(e),
                Err(_) => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
        }
    }
}

/// Looks at a new segment that does not open this many times, 5 ms apart, before its error
/// counts: long enough for the registry to finish making it.
const CREATION_TRIES: u32 = 40;

/// Device and inode of the segment file that `name` names now, if it exists.
fn identity(domain: &Domain, name: &SlotName) -> Option<(u64, u64)> {
    std::fs::metadata(super::segment_file(domain, name))
        .ok()
        .map(|m| (m.dev(), m.ino()))
}
