//! Reading a name that only another computer publishes. A computer mirrors only the names its
//! processes subscribe to, so `get`, `watch` or `info` of such a name finds no slot here; the
//! registry is then asked to mirror it for this tool (`Request::Follow`): it asks the
//! publishing host for the schema, makes the mirror with it, and the publishing host sends the
//! current value.
//! This is the one way `bus-inspect` takes part in the bus when reading: the tool counts as a
//! subscriber of the mirror while `Following` lives, and the registry forgets the mirror a few
//! seconds after (as after any last subscriber).

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use bus::protocol::{Frame, Reply, Request};
use bus::slot::Slot;
use bus::{Domain, SlotName};

use super::slots::{read_newer, Reading};
use super::{open, Error, Result};

/// How long `get`, `watch` and `info` wait for another computer's value of a name: the schema's and
/// the value's way through both registries takes a few announcement ticks (50 ms each).
pub const REMOTE_WAIT: Duration = Duration::from_secs(5);

/// A name mirrored here for this tool; the mirror stays while this lives.
pub struct Following {
    _connection: UnixStream,
}

/// Why no mirror was made.
#[derive(Debug)]
pub enum NotFollowed {
    /// No registry answers (or it refuses this user, or is of a release without `Follow`).
    NoRegistry,
    /// The registry knows no host that publishes the name (its reason).
    Unknown(String),
    /// A host publishes it, but no mirror came within the wait.
    NoAnswer(Duration),
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
            | Reply::Bound { .. } => {
                return Ok(Following {
                    _connection: connection,
                })
            }
            Reply::Refused { refusal, .. } => {
                let reason = match refusal {
                    bus::protocol::Refusal::Failed { reason } => reason,
                    other => format!("{other:?}"),
                };
                return Err(NotFollowed::Unknown(reason));
            }
            Reply::Error { .. } => return Err(NotFollowed::NoRegistry),
            // `Welcome`, and `Registered` without a segment: the mirror is on its way.
            _ => {}
        }
    }
}

/// The newest value of `name`, from its slot here or, when only another computer publishes it,
/// through a mirror made for this read (`follow`); `Ok(None)` when nothing was written yet (or
/// no value came from the other computer within `REMOTE_WAIT`).
pub fn get(domain: &Domain, name: &SlotName) -> Result<Option<Reading>> {
    match open(domain, name) {
        Err(Error::NoSlot { .. }) => {}
        slot => return read_newer(&slot?, 0),
    }
    let start = Instant::now();
    let _following = match follow(domain, name, REMOTE_WAIT) {
        Ok(following) => following,
        Err(NotFollowed::NoAnswer(wait)) => {
            return Err(Error::Refused(format!(
                "{name} is published on another computer, but the registry here could not                  mirror it within {} s (`bus-inspect stats` shows the network counters)",
                wait.as_secs()
            )))
        }
        Err(NotFollowed::NoRegistry | NotFollowed::Unknown(_)) => {
            return Err(Error::NoSlot {
                name: name.to_string(),
                domain: domain.to_string(),
            })
        }
    };
    let slot = open(domain, name)?;
    wait_for_first_value(&slot, start);
    read_newer(&slot, 0)
}

/// Waits until a mirror made for this tool holds a value (its first is on its way from the
/// publishing host), at most until `REMOTE_WAIT` after `start`.
pub fn wait_for_first_value(slot: &Slot, start: Instant) {
    while slot.latest_sequence() == 0 && start.elapsed() < REMOTE_WAIT {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}
