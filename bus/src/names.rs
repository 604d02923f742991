//! Names on the bus: domains, slot names, and how both map onto kernel objects.
//!
//! A domain isolates one bus on a machine; every shared-memory segment and socket name carries
//! it, so tests and robots never see each other's slots. A slot name is either public (a pathname
//! such as `/robot/controller/teleop`) or private (generated, starting with `%`). The mapping to a
//! POSIX shared-memory name is injective: `/` becomes `~`, which a public name cannot contain.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::NameError;

/// Environment variable naming the domain when `--domain` is not given.
pub const DOMAIN_ENV: &str = "BUS_DOMAIN";
/// Domain used when neither `--domain` nor `BUS_DOMAIN` is set.
pub const DEFAULT_DOMAIN: &str = "default";
/// Longest public slot name, in bytes.
pub const MAX_NAME_LEN: usize = 200;
/// Longest domain name, in bytes.
pub const MAX_DOMAIN_LEN: usize = 32;
/// Where Linux keeps POSIX shared memory.
pub const SHM_DIR: &str = "/dev/shm";

/// A validated bus domain name: 1 to 32 of `A-Z a-z 0-9 _ -`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Domain(String);

/// What every Baton segment's file name in `/dev/shm` starts with, before its domain.
const SEGMENT_FILE_PREFIX: &str = "baton.";

impl Domain {
    pub fn new(name: &str) -> Result<Domain, NameError> {
        let ok = !name.is_empty()
            && name.len() <= MAX_DOMAIN_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok {
            Ok(Domain(name.to_owned()))
        } else {
            Err(NameError::Domain {
                name: name.to_owned(),
            })
        }
    }

    /// A `--domain` argument checked as the command line is parsed (clap's `value_parser`): a
    /// bad name is a command-line error like any other (every binary's usage status).
    pub fn parse_arg(name: &str) -> Result<Domain, String> {
        Domain::new(name).map_err(|e| {
            // Most often `BUS_DOMAIN=` left empty (a unit's `Environment=`): clap shows the
            // value, not where it came from.
            if name.is_empty() {
                format!("{e} (is {DOMAIN_ENV} set to nothing? unset it for the domain '{DEFAULT_DOMAIN}')")
            } else {
                e.to_string()
            }
        })
    }

    /// The domain from `BUS_DOMAIN`, or `default`; a bad name (often set to nothing, by a
    /// unit's `Environment=`) is an error that names the variable.
    pub fn from_env() -> Result<Domain, NameError> {
        Domain::from_env_value(std::env::var(DOMAIN_ENV).ok().as_deref())
    }

    fn from_env_value(value: Option<&str>) -> Result<Domain, NameError> {
        match value {
            Some(name) => Domain::new(name).map_err(|_| NameError::DomainFromEnv {
                name: name.to_owned(),
            }),
            None => Domain::new(DEFAULT_DOMAIN),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Name of the registry's abstract Unix socket (no file to clean up, scoped to the
    /// network namespace like the registry itself).
    pub fn registry_socket(&self) -> String {
        format!("baton.{}.registry", self.0)
    }

    /// File-name prefix (in `/dev/shm`) shared by every segment of this domain.
    pub fn segment_prefix(&self) -> String {
        format!("{SEGMENT_FILE_PREFIX}{}", self.0)
    }

    /// POSIX shared-memory name (with the leading `/` that `shm_open` wants) of a slot.
    pub fn segment_name(&self, slot: &SlotName) -> String {
        format!("/{}{}", self.segment_prefix(), slot.in_segment_name())
    }

    /// The domain a file in `/dev/shm` is a segment of, if it is one: `segment_prefix`, then a
    /// slot's first mark (`~` for a public name, `%` for a private one).
    pub fn of_segment_file(file_name: &str) -> Option<Domain> {
        let rest = file_name.strip_prefix(SEGMENT_FILE_PREFIX)?;
        let end = rest.find(['~', '%'])?;
        Domain::new(&rest[..end]).ok()
    }

    /// The slot a file in `/dev/shm` belongs to, if it belongs to this domain.
    pub fn slot_of_segment_file(&self, file_name: &str) -> Option<SlotName> {
        let rest = file_name.strip_prefix(&self.segment_prefix())?;
        match rest.as_bytes().first() {
            // By the characters only: a segment named under an older, looser rule (`/a//b`) is
            // still this domain's, to list, adopt and clean.
            Some(b'~') => SlotName::from_segment_chars(&rest.replace('~', "/")),
            Some(b'%') => SlotName::parse_private(rest),
            _ => None,
        }
    }

    /// Paths of every segment of this domain currently in `/dev/shm`.
    pub fn segment_files(&self) -> std::io::Result<Vec<(SlotName, std::path::PathBuf)>> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(SHM_DIR)? {
            let entry = entry?;
            let file_name = entry.file_name();
            if let Some(slot) = file_name
                .to_str()
                .and_then(|f| self.slot_of_segment_file(f))
            {
                found.push((slot, entry.path()));
            }
        }
        found.sort();
        Ok(found)
    }

    /// Removes every segment of this domain. For tests and for `bus-inspect clean`; running
    /// processes keep their mappings, but nobody new can join those slots.
    pub fn remove_all_segments(&self) -> std::io::Result<usize> {
        let files = self.segment_files()?;
        for (_, path) in &files {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(files.len())
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The name of a slot: public (`/a/b`) or private (`%<pid>-<n>-<nonce>`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotName(String);

impl SlotName {
    /// How the name stands in its segment's name, after the domain's prefix: `/` written `~`
    /// (which a public name cannot hold), a private name as it is.
    pub fn in_segment_name(&self) -> String {
        self.0.replace('/', "~")
    }

    /// A public name as found in a segment file's name: the characters of the rule, and its
    /// length, but not its parts (an older build allowed empty, `.` and `..` parts).
    fn from_segment_chars(name: &str) -> Option<SlotName> {
        let ok = name.starts_with('/')
            && name.len() > 1
            && name.len() <= MAX_NAME_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/'));
        ok.then(|| SlotName(name.to_owned()))
    }

    /// A public name: starts with `/`, at most 200 bytes of letters, digits and `_ - . /`, its
    /// parts between slashes neither empty nor `.` or `..` (names that read like paths name one
    /// slot each: `/a//b`, `/a/b/` and `/a/./b` would look like `/a/b`).
    pub fn public(name: &str) -> Result<SlotName, NameError> {
        SlotName::from_segment_chars(name)
            .filter(|_| {
                name[1..]
                    .split('/')
                    .all(|part| !part.is_empty() && part != "." && part != "..")
            })
            .ok_or_else(|| NameError::Slot {
                name: name.to_owned(),
            })
    }

    /// A fresh private name, unique on this machine: pid, a per-process counter and the clock.
    pub fn private() -> SlotName {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        SlotName(format!("%{}-{}-{:x}", std::process::id(), n, nonce))
    }

    fn parse_private(name: &str) -> Option<SlotName> {
        let body = name.strip_prefix('%')?;
        let ok = !body.is_empty()
            && body.len() <= 64
            && body
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b.is_ascii_digit() || b == b'-');
        ok.then(|| SlotName(name.to_owned()))
    }

    /// Parses either form: what a registry or tool receives from elsewhere.
    pub fn parse(name: &str) -> Result<SlotName, NameError> {
        if name.starts_with('%') {
            SlotName::parse_private(name).ok_or_else(|| NameError::Slot {
                name: name.to_owned(),
            })
        } else {
            SlotName::public(name)
        }
    }

    pub fn is_private(&self) -> bool {
        self.0.starts_with('%')
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SlotName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for SlotName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SlotName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SlotName, D::Error> {
        let s = String::deserialize(d)?;
        SlotName::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_domain_from_the_environment_names_the_variable() {
        assert_eq!(
            Domain::from_env_value(None).unwrap().as_str(),
            DEFAULT_DOMAIN
        );
        assert_eq!(Domain::from_env_value(Some("lab")).unwrap().as_str(), "lab");
        for bad in ["", "a b"] {
            let e = Domain::from_env_value(Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains("in BUS_DOMAIN")
                    && e.contains("unset BUS_DOMAIN for the domain 'default'"),
                "{e}"
            );
        }
    }

    #[test]
    fn public_names_follow_the_rule() {
        assert!(SlotName::public("/robot/controller/teleop").is_ok());
        assert!(SlotName::public("/a_b-c.d/9").is_ok());
        assert!(SlotName::public("/a/.hidden/..b").is_ok());
        for bad in [
            "", "/", "robot", "/a b", "/a~b", "/é", "/a%b", "/a//b", "/a/b/", "/../etc", "/a/./b",
            "/a/..",
        ] {
            assert!(SlotName::public(bad).is_err(), "{bad:?} accepted");
        }
        assert!(SlotName::public(&format!("/{}", "a".repeat(199))).is_ok());
        assert!(SlotName::public(&format!("/{}", "a".repeat(200))).is_err());
    }

    #[test]
    fn the_domain_of_a_segment_file_is_read_from_its_name() {
        let of = |f: &str| Domain::of_segment_file(f).map(|d| d.as_str().to_owned());
        assert_eq!(of("baton.lab~robot~manager").as_deref(), Some("lab"));
        assert_eq!(of("baton.lab%1f2e").as_deref(), Some("lab"));
        assert_eq!(of("baton.lab.registry"), None);
        assert_eq!(of("sem.other"), None);
    }

    /// Segments named under the older, looser rule (`/a//b` was a valid name) are still found
    /// as this domain's, so that they are listed, adopted and cleaned.
    #[test]
    fn segments_of_names_an_older_rule_allowed_are_still_found() {
        let d = Domain::new("d").unwrap();
        let found = d.slot_of_segment_file("baton.d~a~~b").expect("found");
        assert_eq!(found.as_str(), "/a//b");
        assert!(d.slot_of_segment_file("baton.d~a b").is_none());
    }

    #[test]
    fn segment_names_round_trip_and_do_not_collide() {
        let d = Domain::new("t1").unwrap();
        let public = SlotName::public("/robot/x").unwrap();
        let private = SlotName::private();
        for slot in [public, private] {
            let seg = d.segment_name(&slot);
            assert_eq!(d.slot_of_segment_file(&seg[1..]), Some(slot.clone()));
        }
        // Another domain whose name extends this one's never matches.
        let other = Domain::new("t1-b").unwrap();
        let seg = other.segment_name(&SlotName::public("/x").unwrap());
        assert_eq!(d.slot_of_segment_file(&seg[1..]), None);
    }

    #[test]
    fn domains_are_checked() {
        assert!(Domain::new("ci-42_x").is_ok());
        for bad in ["", "a.b", "a/b", &"x".repeat(33)] {
            assert!(Domain::new(bad).is_err());
        }
    }
}
