//! Reading a name that only another computer publishes. A computer mirrors only the names its
//! processes subscribe to, so `get`, `watch`, `info`, `hz` or `bw` of such a name finds no slot
//! here; the registry is then asked to mirror it for this tool (`Request::Follow`): it asks the
//! publishing host for the schema, makes the mirror with it, and the publishing host sends the
//! current value. This is the one way `bus-inspect` takes part in the bus when reading: the tool
//! counts as a subscriber of the mirror while `Following` lives, and the registry forgets the
//! mirror a few seconds after (as after any last subscriber).

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use bus::protocol::{Frame, Refusal, Reply, Request};
use bus::slot::Slot;
use bus::{Domain, SlotName};
use serde::Serialize;

use super::slots::{read_newer, Reading};
use super::{open, Error, Result};

/// How long `get`, `watch`, `info`, `hz` and `bw` wait for the mirror of another computer's
/// name, and then for its first value: the schema's and the value's way through both
/// registries takes a few announcement ticks (50 ms each).
pub const REMOTE_WAIT: Duration = Duration::from_secs(5);

/// A name mirrored here for this tool; the mirror stays while this lives.
pub struct Following {
    connection: UnixStream,
}

impl Following {
    /// Whether the registry still holds this tool's subscription: its connection is open (it
    /// closes when the registry exits). What the registry sent since is read and dropped.
    fn is_open(&self) -> bool {
        use nix::sys::socket::{recv, MsgFlags};
        use std::os::fd::AsRawFd;
        let mut sink = [0u8; 256];
        loop {
            match recv(
                self.connection.as_raw_fd(),
                &mut sink,
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(0) => return false,
                Ok(_) => continue,
                Err(nix::errno::Errno::EAGAIN) => return true,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return false,
            }
        }
    }
}

/// Why no mirror was made.
#[derive(Debug)]
pub enum NotFollowed {
    /// No registry answers (or it refuses this user, or is of a release without `Follow`).
    NoRegistry,
    /// Neither this host nor any other the registry hears has the name.
    Nowhere,
    /// The registry cannot mirror it (its reason: subscribers here wait for it with another
    /// type than the one its host publishes).
    Refused(String),
    /// A host publishes it, but no mirror came within the wait.
    NoAnswer(Duration),
}

impl std::fmt::Display for NotFollowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotFollowed::NoRegistry => f.write_str("no registry answers"),
            NotFollowed::Nowhere => f.write_str("no host announces it"),
            NotFollowed::Refused(reason) => write!(f, "it cannot be mirrored here: {reason}"),
            NotFollowed::NoAnswer(wait) => write!(
                f,
                "it is published on another computer, but the registry here could not mirror \
                 it within {} s (its log says why, such as no room in shared memory; \
                 `bus-inspect stats` shows the network counters)",
                wait.as_secs_f64()
            ),
        }
    }
}

/// Keeps a name mirrored here while a command such as `watch` lasts: follows it while its slot
/// here is missing or a mirror (one made for another subscriber goes when that subscriber
/// does), and again after the registry restarted (which ends this tool's subscription).
pub struct MirrorHold {
    name: SlotName,
    following: Option<Following>,
    /// When to look again, and the pause after that (it grows to `HOLD_CHECK_MAX` while no
    /// host has the name: one local request every 2 s costs the registry nothing worth
    /// saving, and a publisher that appears on another computer shows in a watch within it).
    next_check: Option<Instant>,
    pause: Duration,
    /// A failure to follow was said (once).
    said: bool,
}

/// How often `MirrorHold::keep` looks again, at first and at most.
const HOLD_CHECK_EVERY: Duration = Duration::from_secs(1);
const HOLD_CHECK_MAX: Duration = Duration::from_secs(2);

impl MirrorHold {
    pub fn new(name: &SlotName) -> MirrorHold {
        MirrorHold {
            name: name.clone(),
            following: None,
            next_check: None,
            pause: HOLD_CHECK_EVERY,
            said: false,
        }
    }

    /// Follows the name if it needs to (see the type), waiting at most until `deadline`; looks
    /// at most every `HOLD_CHECK_EVERY` (less often while no host has the name). `true` when it
    /// followed the name now: the mirror may not hold its first value yet.
    pub fn keep(
        &mut self,
        domain: &Domain,
        slot: Option<&Slot>,
        deadline: Option<Instant>,
    ) -> bool {
        let now = Instant::now();
        if self.next_check.is_some_and(|t| now < t) {
            return false;
        }
        self.next_check = Some(now + self.pause);
        if slot.is_some_and(|s| s.origin().is_empty() && s.is_current()) {
            // Published on this computer: nothing to hold. (One whose file went, the registry
            // having forgotten its value since another computer publishes the name, is
            // followed there now.)
            self.following = None;
            return false;
        }
        if self.following.as_ref().is_some_and(Following::is_open) {
            return false;
        }
        let wait = REMOTE_WAIT.min(bus::futex::time_left(deadline));
        match follow(domain, &self.name, wait) {
            Ok(following) => {
                self.following = Some(following);
                self.pause = HOLD_CHECK_EVERY;
                return true;
            }
            Err(NotFollowed::Nowhere | NotFollowed::NoRegistry) => {
                self.pause = (self.pause * 2).min(HOLD_CHECK_MAX);
            }
            Err(e) if !self.said => {
                self.said = true;
                eprintln!("bus-inspect: {}: {e}", self.name);
            }
            Err(_) => {}
        }
        false
    }
}

/// Asks the registry of `domain` to mirror `name` for this tool, and waits at most `wait` for
/// the mirror's slot to exist here.
pub fn follow(domain: &Domain, name: &SlotName, wait: Duration) -> Result<Following, NotFollowed> {
    let deadline = Instant::now() + wait;
    let mut connection = bus::protocol::connect(domain).map_err(|_| NotFollowed::NoRegistry)?;
    let hello = Request::Hello {
        program: bus::process::own_program(),
    };
    let follow = Request::Follow {
        endpoint: 1,
        name: name.clone(),
    };
    let sent = bus::protocol::write_frame(&mut connection, 1, &hello)
        .and_then(|()| bus::protocol::write_frame(&mut connection, 2, &follow));
    if sent.is_err() {
        return Err(NotFollowed::NoRegistry);
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(NotFollowed::NoAnswer(wait));
        }
        if connection.set_read_timeout(Some(left)).is_err() {
            return Err(NotFollowed::NoRegistry);
        }
        let frame: Frame<Reply> = match bus::protocol::read_frame(&mut connection) {
            Ok(Some(frame)) => frame,
            Err(e) if is_timeout(&e) => return Err(NotFollowed::NoAnswer(wait)),
            // Closed: a registry that does not know `Follow` drops the connection.
            Ok(None) | Err(_) => return Err(NotFollowed::NoRegistry),
        };
        match frame.body {
            Reply::Registered {
                segment: Some(_), ..
            }
            | Reply::Bound { .. } => return Ok(Following { connection }),
            Reply::Refused { refusal, .. } => {
                return Err(match refusal {
                    Refusal::TypeMismatch { slot_type, .. } => {
                        NotFollowed::Refused(format!("{name} is published as {slot_type}"))
                    }
                    _ => NotFollowed::Nowhere,
                })
            }
            Reply::Error { .. } => return Err(NotFollowed::NoRegistry),
            // `Welcome`, and `Registered` without a segment: the mirror is on its way.
            _ => {}
        }
    }
}

/// The newest value of `name`, from its slot here or, when only another computer publishes it,
/// through a mirror made for this read (`open_to_read`); `Ok(None)` when nothing was written
/// yet (or no value came from the other computer in time).
pub fn get(domain: &Domain, name: &SlotName) -> Result<Option<Reading>> {
    let (Some(slot), _following) = open_to_read(domain, name)? else {
        return Err(Error::NoSlot {
            name: name.to_string(),
            domain: domain.to_string(),
        });
    };
    read_newer(&slot, 0)
}

/// `name`'s slot for a read (`get`, `info`), and the subscription to hold while reading when
/// the slot is a mirror made for it:
/// - a slot here is read as it is, but a mirror made a moment ago (for another reader here,
///   say) and still empty is followed, so that it stays, and its first value waited for;
/// - with no slot here, the registry is asked to mirror the name from the computer that
///   publishes it, and the mirror's first value is waited for;
/// - `None` when no computer has the name (or no registry answers); an error saying why a
///   name another computer publishes cannot be mirrored here.
///
/// Waits at most `REMOTE_WAIT` for the mirror and as long again for its first value.
pub fn open_to_read(domain: &Domain, name: &SlotName) -> Result<(Option<Slot>, Option<Following>)> {
    match open(domain, name) {
        Ok(slot) if !slot.origin().is_empty() && slot.latest_sequence() == 0 => {
            let following = follow(domain, name, REMOTE_WAIT).ok();
            wait_for_first_value(&slot);
            Ok((Some(slot), following))
        }
        Ok(slot) => Ok((Some(slot), None)),
        Err(Error::NoSlot { .. }) => {
            let following = match follow(domain, name, REMOTE_WAIT) {
                Ok(following) => following,
                Err(NotFollowed::NoRegistry | NotFollowed::Nowhere) => return Ok((None, None)),
                Err(e) => return Err(Error::Refused(format!("{name}: {e}"))),
            };
            let slot = open(domain, name)?;
            wait_for_first_value(&slot);
            Ok((Some(slot), Some(following)))
        }
        Err(e) => Err(e),
    }
}

/// Waits until a mirror made for this tool holds a value (its first is on its way from the
/// publishing host), at most `REMOTE_WAIT`.
pub fn wait_for_first_value(slot: &Slot) {
    let start = Instant::now();
    while slot.latest_sequence() == 0 && start.elapsed() < REMOTE_WAIT {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A name another computer publishes that has no slot here (nothing here subscribes to it), as
/// this computer's registry directory lists it: `list --remote`.
#[derive(Debug, Serialize)]
pub struct RemoteName {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    /// The computer that publishes it.
    pub origin: String,
    /// Whether its publisher runs (`false`: that computer keeps a gone publisher's value).
    pub writer_alive: bool,
    /// Always `false`: no slot of it on this computer (`get` mirrors it for the read).
    pub here: bool,
}

/// The registry's directory (`/baton/registry/directory`) as last written; `None` while no
/// registry has written one.
pub fn directory(domain: &Domain) -> Result<Option<bus::directory::Directory>> {
    let name = SlotName::public(bus::directory::DIRECTORY_SLOT)?;
    let slot = match open(domain, &name) {
        Ok(slot) => slot,
        Err(Error::NoSlot { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    if slot.read(0, &mut bytes)?.is_none() {
        return Ok(None);
    }
    bus::codec::decode(&bytes)
        .map(Some)
        .map_err(|e| Error::Refused(format!("the registry's directory does not decode: {e}")))
}

/// The names other computers publish that have no slot here, matching `pattern` like `list`,
/// from the registry's directory (`/baton/registry/directory`); empty while no registry
/// publishes one.
pub fn remote_names(domain: &Domain, pattern: Option<&str>) -> Result<Vec<RemoteName>> {
    let Some(directory) = directory(domain)? else {
        return Ok(Vec::new());
    };
    let mut names = Vec::new();
    for entry in directory.entries {
        let Some(origin) = entry.origin_host else {
            continue;
        };
        if pattern.is_some_and(|p| !super::matches(p, &entry.name)) {
            continue;
        }
        let here =
            SlotName::public(&entry.name).is_ok_and(|n| super::segment_file(domain, &n).exists());
        if !here {
            names.push(RemoteName {
                name: entry.name,
                type_name: entry.type_name,
                origin,
                writer_alive: entry.publisher_alive,
                here: false,
            });
        }
    }
    Ok(names)
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}
