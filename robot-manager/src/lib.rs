//! The robot manager: owns the priority order of robot controllers. It reads a TOML file,
//! publishes the effective order on `/robot/manager`, reloads the file on SIGHUP or when it
//! changes (keeping the previous config if the new one is invalid), and places controllers that
//! appear on the bus without being listed according to the file's `unlisted` policy.
//!
//! ```toml
//! controllers = ["teleop", "autonomy"]   # priority order, highest first
//! arbiters = ["arm", "drive"]
//! unlisted = "last"                      # "ignore" (default) or "last"
//! ```

use std::path::Path;

use arbiter::protocol::{ManagerConfig, Unlisted};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    controllers: Vec<String>,
    arbiters: Vec<String>,
    #[serde(default)]
    unlisted: Unlisted,
}

/// The manager's file, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagerFile {
    pub controllers: Vec<String>,
    pub arbiters: Vec<String>,
    pub unlisted: Unlisted,
}

fn check_names(what: &str, names: &[String]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for n in names {
        let ok = !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !ok {
            return Err(format!(
                "{what} name {n:?}: use 1 to 64 letters, digits, _ - ."
            ));
        }
        if !seen.insert(n) {
            return Err(format!("{what} {n:?} is listed twice"));
        }
    }
    Ok(())
}

impl ManagerFile {
    pub fn parse(text: &str) -> Result<ManagerFile, String> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        check_names("controller", &raw.controllers)?;
        check_names("arbiter", &raw.arbiters)?;
        Ok(ManagerFile {
            controllers: raw.controllers,
            arbiters: raw.arbiters,
            unlisted: raw.unlisted,
        })
    }

    pub fn load(path: &Path) -> Result<ManagerFile, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        ManagerFile::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The config to publish: the listed controllers, then (policy `last`) the discovered ones
    /// the list does not name, in order of appearance.
    pub fn effective(&self, discovered: &[String], revision: u64) -> ManagerConfig {
        let mut controllers = self.controllers.clone();
        if self.unlisted == Unlisted::Last {
            for d in discovered {
                if !controllers.contains(d) {
                    controllers.push(d.clone());
                }
            }
        }
        ManagerConfig {
            controllers,
            arbiters: self.arbiters.clone(),
            unlisted: self.unlisted,
            revision,
        }
    }
}

/// Controller names whose blocks exist in this domain's shared memory, from segment file names.
pub fn controller_of_segment(domain: &bus::Domain, file_name: &str) -> Option<String> {
    let slot = domain.slot_of_segment_file(file_name)?;
    let name = slot.as_str().strip_prefix("/robot/controller/")?;
    (!name.is_empty() && !name.contains('/')).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_validate_and_place() {
        let f = ManagerFile::parse(
            "controllers = [\"a\", \"b\"]\narbiters = [\"arm\"]\nunlisted = \"last\"",
        )
        .unwrap();
        let c = f.effective(&["x".into(), "a".into()], 3);
        assert_eq!(c.controllers, ["a", "b", "x"]);
        assert_eq!(c.revision, 3);
        let f = ManagerFile::parse("controllers = [\"a\"]\narbiters = []").unwrap();
        assert_eq!(f.effective(&["x".into()], 1).controllers, ["a"]);
        for (bad, needle) in [
            (
                "controllers = [\"a\", \"a\"]\narbiters = []",
                "listed twice",
            ),
            (
                "controllers = []\narbiters = []\ncolour = 1",
                "unknown field",
            ),
            ("controllers = [\"a b\"]\narbiters = []", "controller name"),
            (
                "controllers = []\narbiters = []\nunlisted = \"first\"",
                "unknown variant",
            ),
            ("arbiters = []", "missing field"),
        ] {
            let e = ManagerFile::parse(bad).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn controller_segments_are_recognised() {
        let d = bus::Domain::new("m").unwrap();
        assert_eq!(
            controller_of_segment(&d, "baton.m~robot~controller~teleop").as_deref(),
            Some("teleop")
        );
        assert_eq!(controller_of_segment(&d, "baton.m~robot~arbiter~arm"), None);
        assert_eq!(
            controller_of_segment(&d, "baton.other~robot~controller~x"),
            None
        );
    }
}
