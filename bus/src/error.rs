//! Errors of the bus library. Each says what was expected and what was found, so that a
//! binary can print it as its one line and exit.

use thiserror::Error;

/// A domain or slot name that breaks the naming rule.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum NameError {
    #[error("invalid domain name {name:?}: a domain is 1 to 32 of the characters A-Z a-z 0-9 _ -")]
    Domain { name: String },
    #[error(
        "invalid domain name {name:?} in {env}: a domain is 1 to 32 of the characters A-Z a-z \
         0-9 _ -; unset {env} for the domain '{default}'",
        env = crate::names::DOMAIN_ENV,
        default = crate::names::DEFAULT_DOMAIN
    )]
    DomainFromEnv { name: String },
    #[error(
        "invalid slot name {name:?}: a public name starts with '/', is at most 200 bytes, uses \
         only ASCII letters, digits and _ - . /, and has no empty, '.' or '..' part between \
         slashes (no '//', no '/' at the end){}",
        length_note(name)
    )]
    Slot { name: String },
}

/// The length of a name too long, which the rule alone would leave the reader to count.
fn length_note(name: &str) -> String {
    if name.len() > crate::names::MAX_NAME_LEN {
        format!("; this one is {} bytes", name.len())
    } else {
        String::new()
    }
}

/// A shared-memory segment whose header does not describe a valid slot. Every size, length and
/// offset read from shared memory is checked; a check that fails gives one of these.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SegmentError {
    #[error("segment {segment}: wrong magic number {found:#018x} (expected {expected:#018x}); not a Baton slot or corrupt")]
    BadMagic {
        segment: String,
        found: u64,
        expected: u64,
    },
    #[error("segment {segment}: layout version {found}, this build reads version {expected}")]
    BadVersion {
        segment: String,
        found: u32,
        expected: u32,
    },
    #[error(
        "segment {segment}: its header says {what} {found}, which no {segment_size}-byte slot \
         has (the header was overwritten)"
    )]
    BadSize {
        segment: String,
        what: &'static str,
        found: u64,
        segment_size: u64,
    },
    #[error(
        "segment {segment} is {size} bytes, smaller than a slot's header ({header} bytes): not a \
         Baton slot, or cut short"
    )]
    TooShort {
        segment: String,
        size: u64,
        header: u64,
    },
    #[error(
        "cannot make segment {segment}: its {what}, {found} bytes, is above the limit of {max}"
    )]
    TooLarge {
        segment: String,
        what: &'static str,
        found: u64,
        max: u64,
    },
    #[error("segment {segment}: stored {what} is corrupt: {reason}")]
    BadField {
        segment: String,
        what: &'static str,
        reason: String,
    },
    #[error("segment {segment}: {message}")]
    Io { segment: String, message: String },
}

/// Everything that can go wrong using the bus.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum BusError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Segment(#[from] SegmentError),
    #[error("type {type_name} cannot be used on the bus: {reason}")]
    Schema { type_name: String, reason: String },
    #[error(
        "type mismatch on {name}: the slot is typed {}, this endpoint is {requested_type} \
         (schema {requested_hash}){}",
        slot_type_and_schema(slot_type, slot_hash),
        same_name_hint(slot_type, requested_type)
    )]
    TypeMismatch {
        name: String,
        slot_type: String,
        slot_hash: String,
        requested_type: String,
        requested_hash: String,
    },
    #[error("value too large for {name}: {size} bytes encoded, the slot holds at most {capacity}; ask for more with .capacity() when creating the publication")]
    TooLarge {
        name: String,
        size: usize,
        capacity: usize,
    },
    #[error("{name} was created with capacity {capacity} bytes, this publication asks for {requested}; stop the slot's other endpoints so the registry can re-create it, or ask for at most {capacity}")]
    CapacityTooSmall {
        name: String,
        capacity: usize,
        requested: usize,
    },
    #[error(
        "{name} already has a live publisher ({}); a slot has one writer",
        publisher(*.pid)
    )]
    AlreadyPublished { name: String, pid: u32 },
    #[error("no registry-server answers for domain '{domain}' (socket @{socket}): {reason}; start `registry-server --domain {domain}`")]
    RegistryUnreachable {
        domain: String,
        socket: String,
        reason: String,
    },
    /// Connected, but no answer came: starting a registry is not the remedy.
    #[error(
        "a registry-server listens on domain '{domain}' (socket @{socket}) but did not answer \
         within {waited:?}: it is hung, stopped (SIGSTOP) or out of file descriptors; its log \
         says which"
    )]
    RegistryNotAnswering {
        domain: String,
        socket: String,
        waited: std::time::Duration,
    },
    #[error("registry refused {name}: {reason}")]
    Refused { name: String, reason: String },
    /// `wait_bound` timed out with the registry connected: nothing refused, not bound yet.
    #[error("{name} is not bound after {waited:?}: {reason}")]
    NotBoundYet {
        name: String,
        waited: std::time::Duration,
        reason: String,
    },
    #[error("cannot decode the value in {name} as {type_name}: {reason}")]
    Decode {
        name: String,
        type_name: String,
        reason: String,
        /// Sequence number of the value that did not decode (0 when not from a slot read).
        sequence: u64,
    },
    #[error("{name}: slot memory is inconsistent ({reason}); the segment is corrupt")]
    Inconsistent {
        name: String,
        reason: String,
        /// The slot's latest-sequence word when the read failed: the value passed over (a
        /// writer's next write makes the slot consistent again).
        sequence: u64,
    },
    #[error(
        "{name} was replaced by the registry (its segment {segment} was unreadable or removed \
         while this process used it; the name gets a new one, at once or, on a full /dev/shm, \
         when there is room); this endpoint used the old memory, which no other process \
         reads or writes any more. Once the new slot exists a subscription follows it from its \
         next update on (or subscribe again) and a publication goes on in it by itself; an \
         endpoint that this process could not map onto it must be dropped and made again"
    )]
    Replaced { name: String, segment: String },
    #[error("a subscription group waits on at most {max} slots, this one has {members}")]
    GroupTooLarge { members: usize, max: usize },
    /// `.capacity(0)`: every write would be refused as too large.
    #[error("{name}: a capacity of 0 bytes holds no value; ask with .capacity() for the largest encoded value the type will hold")]
    ZeroCapacity { name: String },
    #[error("{context}: {message}")]
    Io { context: String, message: String },
}

impl BusError {
    pub(crate) fn io(context: impl Into<String>, err: impl std::fmt::Display) -> BusError {
        BusError::Io {
            context: context.into(),
            message: err.to_string(),
        }
    }
}

pub type Result<T, E = BusError> = std::result::Result<T, E>;

/// The process that holds a name, as the registry names it: pid 0 is one the registry cannot
/// see (another pid namespace, a container), and this process's own pid means that another of
/// its publications holds the name (`p = bus.publish(..)` makes the new one before the old one
/// is dropped).
pub fn publisher(pid: u32) -> String {
    if pid == 0 {
        "a process the registry cannot name (in another pid namespace)".to_owned()
    } else if pid == std::process::id() {
        format!(
            "this process, pid {pid}: another publication of it holds the name; drop that one \
             before making a new one"
        )
    } else {
        format!("process {pid}")
    }
}

/// `T (schema H)`, or `T (schema H; note)` for a slot's type the registry followed with a note
/// in parentheses (see `same_name_hint`): one pair of parentheses, not two in a row.
fn slot_type_and_schema(slot_type: &str, slot_hash: &str) -> String {
    match registry_note(slot_type) {
        Some((type_name, note)) => format!("{type_name} (schema {slot_hash}; {note})"),
        None => format!("{slot_type} (schema {slot_hash})"),
    }
}

/// How the registry's notes after a slot's type begin (`registry-server`'s registration).
const REGISTRY_NOTES: [&str; 3] = ["not created yet", "published on host", "the last value"];

/// `slot_type` as the type and the registry's note after it, if it has one. Found by its known
/// beginnings: a type's own name may hold " (" (a tuple of tuples, `(f64, (f64, f64))`).
fn registry_note(slot_type: &str) -> Option<(&str, &str)> {
    REGISTRY_NOTES.iter().find_map(|note| {
        let at = slot_type.rfind(&format!(" ({note}"))?;
        let note = slot_type[at..].strip_prefix(" (")?.strip_suffix(')')?;
        Some((&slot_type[..at], note))
    })
}

/// Two schemas under one type name: say what usually causes that. The registry may follow the
/// slot's type name with a note in parentheses (`T (not created yet: ...)`, `T (published on
/// host 'a')`): the slot's type is the same name when it is `requested_type`, alone or followed
/// by such a note.
fn same_name_hint(slot_type: &str, requested_type: &str) -> &'static str {
    let same = registry_note(slot_type).map_or(slot_type, |(t, _)| t) == requested_type;
    if same {
        "; the same name with another schema: the two programs were built from different \
         definitions of the type, or one uses it as plain-old-data and the other as serde"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot's type with the registry's note reads with one pair of parentheses, the schema
    /// first; the hint for one name with two schemas still sees through the note.
    #[test]
    fn a_type_mismatch_names_the_slots_type_its_schema_and_the_note_once() {
        let error = |slot_type: &str| {
            BusError::TypeMismatch {
                name: "/robot/pose".into(),
                slot_type: slot_type.into(),
                slot_hash: "aaaa".into(),
                requested_type: "app::Pose".into(),
                requested_hash: "bbbb".into(),
            }
            .to_string()
        };
        assert_eq!(
            error("app::Twist"),
            "type mismatch on /robot/pose: the slot is typed app::Twist (schema aaaa), this \
             endpoint is app::Pose (schema bbbb)"
        );
        let noted =
            error("app::Pose (not created yet: the type its waiting subscribers asked for)");
        assert!(
            noted.starts_with(
                "type mismatch on /robot/pose: the slot is typed app::Pose (schema aaaa; not \
                 created yet: the type its waiting subscribers asked for), this endpoint is \
                 app::Pose (schema bbbb); the same name with another schema"
            ),
            "{noted}"
        );
        // A type whose own name holds " (" is not taken for a type and a note.
        let tuple = error("(f64, (f64, f64))");
        assert!(
            tuple.contains("the slot is typed (f64, (f64, f64)) (schema aaaa), this"),
            "{tuple}"
        );
        let tuple = error("(f64, (f64, f64)) (published on host 'arm')");
        assert!(
            tuple.contains("typed (f64, (f64, f64)) (schema aaaa; published on host 'arm'), "),
            "{tuple}"
        );
    }
}
