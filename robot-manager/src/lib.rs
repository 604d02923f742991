//! The robot manager: owns the priority order of robot controllers. It reads a TOML file,
//! publishes the effective order on `/robot/manager`, reloads the file on SIGHUP or when it
//! changes (keeping the previous config if the new one is invalid), and places controllers that
//! appear on the bus without being listed according to the file's `unlisted` policy. It finds
//! controllers in the registry's directory (`bus::directory`), which also lists those of other
//! computers.
//!
//! ```toml
//! controllers = ["teleop", "autonomy"]   # priority order, highest first
//! arbiters = ["arm", "drive"]
//! unlisted = "last"                      # "ignore" (default) or "last"
//! ```

#![forbid(unsafe_code)]

use std::path::Path;

pub mod config_watch;

use arbiter::process::{MAX_ARBITERS, MAX_CONTROLLERS};
use arbiter::protocol::{ManagerConfig, Unlisted};
use serde::Deserialize;

/// The manager's file, validated by [`ManagerFile::parse`].
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManagerFile {
    pub controllers: Vec<String>,
    pub arbiters: Vec<String>,
    #[serde(default)]
    pub unlisted: Unlisted,
}

fn check_names(what: &str, names: &[String]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for n in names {
        if !arbiter::protocol::is_valid_name(n) {
            return Err(format!(
                "{what} name {n:?}: {}",
                arbiter::protocol::NAME_RULE
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
        let file: ManagerFile =
            toml::from_str(text).map_err(|e| daemon::config_error_text(&e.to_string()))?;
        if file.controllers.len() > MAX_CONTROLLERS {
            return Err(format!(
                "{} controllers listed; an arbiter follows at most {MAX_CONTROLLERS}",
                file.controllers.len()
            ));
        }
        if file.arbiters.len() > MAX_ARBITERS {
            return Err(format!(
                "{} arbiters listed; a robot controller follows at most {MAX_ARBITERS}",
                file.arbiters.len()
            ));
        }
        check_names("controller", &file.controllers)?;
        check_names("arbiter", &file.arbiters)?;
        Ok(file)
    }

    /// What the file does that is valid but takes control away from every application, each
    /// said as a caution (`--check`, and the log when the file is taken): a one-line accident.
    pub fn cautions(&self) -> Vec<String> {
        let mut cautions = Vec::new();
        if self.arbiters.is_empty() {
            cautions.push(
                "no arbiter listed: every arbiter is out of service and sends each of its \
                 resources its safe command"
                    .to_owned(),
            );
        }
        if self.controllers.is_empty() && self.unlisted == Unlisted::Ignore {
            cautions.push(
                "no controller listed, and unlisted ones ignored: no controller gets any \
                 resource"
                    .to_owned(),
            );
        }
        cautions
    }

    /// One line saying what the file sets (`robot-manager --check`).
    pub fn summary(&self) -> String {
        let list = |names: &[String]| {
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        };
        format!(
            "controllers, highest priority first: {}; arbiters: {}; unlisted controllers {}",
            list(&self.controllers),
            list(&self.arbiters),
            match self.unlisted {
                Unlisted::Ignore => "ignored",
                Unlisted::Last => "placed last",
            }
        )
    }

    pub fn load(path: &Path) -> Result<ManagerFile, String> {
        let text = daemon::read_config(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        ManagerFile::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The config to publish: the listed controllers, then (policy `last`) the discovered ones
    /// the list does not name, in order of appearance, as many as an arbiter follows
    /// ([`MAX_CONTROLLERS`]; see [`ManagerFile::unplaced`] for the rest).
    pub fn effective(&self, discovered: &[String], revision: u64) -> ManagerConfig {
        let mut controllers = self.controllers.clone();
        if self.unlisted == Unlisted::Last {
            for d in discovered {
                if controllers.len() == MAX_CONTROLLERS {
                    break;
                }
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

    /// How many discovered controllers policy `last` cannot place: the order is full.
    pub fn unplaced(&self, discovered: &[String]) -> usize {
        if self.unlisted != Unlisted::Last {
            return 0;
        }
        let unlisted = discovered
            .iter()
            .filter(|d| !self.controllers.contains(d))
            .count();
        (self.controllers.len() + unlisted).saturating_sub(MAX_CONTROLLERS)
    }
}

/// Slot names of robot controllers' memory blocks start with this.
pub const CONTROLLER_PREFIX: &str = "/robot/controller/";

/// Names of the running robot controllers the registry's directory lists (on this computer or
/// any other), in order of appearance (see below). A slot under the prefix whose type is not a
/// `ControllerBlock` (`block_hash`, see [`controller_block_hash`]) is no controller, and one
/// whose publisher is gone is left out: an unlisted controller that ended leaves the order.
pub fn controllers_in(directory: &bus::directory::Directory, block_hash: u64) -> Vec<String> {
    let mut found: Vec<(Option<u64>, &str)> = directory
        .with_prefix(CONTROLLER_PREFIX)
        .filter(|e| e.schema_hash == block_hash && e.publisher_alive)
        .filter_map(|e| {
            let name = &e.name[CONTROLLER_PREFIX.len()..];
            (!name.is_empty() && !name.contains('/')).then_some((e.publisher_started, name))
        })
        .collect();
    // In order of appearance as far as the directory tells: the local ones by when their
    // process started, then the remote ones (whose start is not known here); by name within
    // a tie. A manager that starts after the controllers places them as they came.
    found.sort_by_key(|&(started, name)| (started.is_none(), started, name));
    found.into_iter().map(|(_, name)| name.to_owned()).collect()
}

/// The schema hash a controller's memory block has on the bus.
pub fn controller_block_hash() -> Result<u64, String> {
    bus::schema::Schema::of_serde::<arbiter::protocol::ControllerBlock>()
        .map(|s| s.hash().0)
        .map_err(|e| format!("the controller block's schema: {e}"))
}

/// Brings `discovered` (in order of appearance) up to date with the controllers listed now:
/// new ones go last, vanished ones are removed. Returns the names that appeared.
pub fn merge_discovered(discovered: &mut Vec<String>, now: &[String]) -> Vec<String> {
    discovered.retain(|d| now.contains(d));
    let mut appeared = Vec::new();
    for n in now {
        if !discovered.contains(n) {
            discovered.push(n.clone());
            appeared.push(n.clone());
        }
    }
    appeared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_files_bytes_are_quoted_escaped() {
        let e = ManagerFile::parse("\u{0}\u{1}\u{2}garbage").unwrap_err();
        assert!(e.contains("\\u{0}\\u{1}\\u{2}garbage"), "{e}");
        assert!(!e.chars().any(|c| c.is_control() && c != '\n'), "{e:?}");
    }

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
        // The order holds as many as an arbiter follows; policy `last` places no more.
        let names: Vec<String> = (0..130).map(|i| format!("\"c{i}\"")).collect();
        let full = format!(
            "controllers = [{}]\narbiters = []\nunlisted = \"last\"",
            names[..123].join(",")
        );
        let f = ManagerFile::parse(&full).unwrap();
        let discovered = ["x".to_string(), "y".to_string(), "c0".to_string()];
        assert_eq!(f.effective(&discovered, 1).controllers.len(), 124);
        assert_eq!(f.unplaced(&discovered), 1);
        let too_many = format!("controllers = [{}]\narbiters = []", names.join(","));
        let too_many_arbiters = format!("controllers = []\narbiters = [{}]", names.join(","));
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
            (&too_many, "an arbiter follows at most 124"),
            (&too_many_arbiters, "a robot controller follows at most 126"),
        ] {
            let e = ManagerFile::parse(bad).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn controllers_are_found_in_the_directory_and_kept_in_order_of_appearance() {
        use bus::directory::{Directory, DirectoryEntry};
        let block = controller_block_hash().unwrap();
        let entry = |name: &str, origin: Option<&str>| DirectoryEntry {
            name: name.into(),
            type_name: "T".into(),
            schema_hash: block,
            origin_host: origin.map(Into::into),
            publisher_alive: true,
            publisher_started: origin.is_none().then_some(100),
        };
        let d = Directory {
            host: "hA".into(),
            entries: vec![
                entry("/robot/arbiter/arm", None),
                entry("/robot/controller/b", Some("hB")),
                entry("/robot/controller/teleop", None),
                entry("/robot/controller/x/y", None),
                DirectoryEntry {
                    schema_hash: block ^ 1,
                    ..entry("/robot/controller/other-type", None)
                },
                DirectoryEntry {
                    publisher_alive: false,
                    ..entry("/robot/controller/ended", None)
                },
            ],
        };
        assert_eq!(
            controllers_in(&d, block),
            ["teleop", "b"],
            "local ones first"
        );
        // Found at once, local ones come in the order their processes started.
        let mut d2 = d.clone();
        d2.entries.push(DirectoryEntry {
            publisher_started: Some(99),
            ..entry("/robot/controller/zeta", None)
        });
        d2.entries.push(DirectoryEntry {
            publisher_started: Some(101),
            ..entry("/robot/controller/alpha", None)
        });
        assert_eq!(controllers_in(&d2, block), ["zeta", "teleop", "alpha", "b"]);
        let mut discovered = vec!["teleop".to_owned(), "gone".to_owned()];
        let appeared = merge_discovered(&mut discovered, &controllers_in(&d, block));
        assert_eq!(discovered, ["teleop", "b"]);
        assert_eq!(appeared, ["b"]);
    }
}
