//! The arbiter's configuration file (TOML):
//!
//! ```toml
//! name = "arm"                  # the arbiter and its resource group
//! heartbeat_ms = 100            # command re-stamped at least this often (0: never); default 100
//! [[resources]]
//! name = "shoulder"
//! kind = "position"             # position (default) | velocity | switch
//! min = -1.5                    # limits, finite; left out: unbounded (switch: 0..1)
//! max = 1.5
//! safe = "hold"                 # "hold" (position only) | "zero" | "off" | a number;
//!                               # default: hold for position, zero for velocity and switch;
//!                               # a number (0 too) must lie within the limits
//! ```

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use crate::algorithm::{Kind, ResourceSpec, SafeCommand};
use crate::protocol::{is_valid_name, Limits, NAME_RULE};

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    name: String,
    heartbeat_ms: Option<u64>,
    resources: Vec<RawResource>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResource {
    name: String,
    #[serde(default)]
    kind: Kind,
    min: Option<f64>,
    max: Option<f64>,
    safe: Option<RawSafe>,
}

/// `safe`: a number or a word. Not `#[serde(untagged)]`, whose error for anything else names
/// this type ("did not match any variant of untagged enum RawSafe") instead of the choices.
#[derive(Debug)]
enum RawSafe {
    Value(f64),
    Word(String),
}

impl<'de> Deserialize<'de> for RawSafe {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawSafe, D::Error> {
        struct Choices;
        impl serde::de::Visitor<'_> for Choices {
            type Value = RawSafe;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(r#""hold", "zero", "off" or a number"#)
            }
            fn visit_f64<E>(self, v: f64) -> Result<RawSafe, E> {
                Ok(RawSafe::Value(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<RawSafe, E> {
                Ok(RawSafe::Value(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> Result<RawSafe, E> {
                Ok(RawSafe::Value(v as f64))
            }
            fn visit_str<E>(self, v: &str) -> Result<RawSafe, E> {
                Ok(RawSafe::Word(v.to_owned()))
            }
        }
        d.deserialize_any(Choices)
    }
}

/// A validated arbiter configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ArbiterConfig {
    pub name: String,
    /// The coherent command is rewritten (re-stamped) at least this often, so that a driver
    /// can tell a live arbiter from a hung one by its age; `None` (`heartbeat_ms = 0`): only
    /// when it changes.
    pub heartbeat: Option<Duration>,
    pub resources: Vec<ResourceSpec>,
    /// Valid settings that may not mean what they seem (`safe = "zero"` on a position
    /// resource moves it when released): logged when the arbiter starts, shown by `--check`.
    pub cautions: Vec<String>,
}

/// `heartbeat_ms` when the file does not say.
pub const DEFAULT_HEARTBEAT_MS: u64 = 100;

impl ArbiterConfig {
    pub fn load(path: &Path) -> Result<ArbiterConfig, ConfigError> {
        let text = daemon::read_config(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.display().to_string(),
            message,
        })
    }

    /// One line saying what the file sets (`arbiter --check`).
    pub fn summary(&self) -> String {
        let resources: Vec<String> = self
            .resources
            .iter()
            .map(|r| {
                let kind = r.kind.name();
                let safe = match r.safe {
                    SafeCommand::Hold => "hold".to_owned(),
                    SafeCommand::Value(v) => readable(v),
                };
                format!(
                    "{} ({kind}, {}, safe {safe})",
                    r.name,
                    limits_text(&r.limits)
                )
            })
            .collect();
        format!(
            "arbiter {:?}, heartbeat {}, resources: {}",
            self.name,
            self.heartbeat
                .map_or("none".to_owned(), |h| format!("{} ms", h.as_millis())),
            resources.join(", ")
        )
    }

    pub fn parse(text: &str) -> Result<ArbiterConfig, String> {
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| daemon::config_error_text(&e.to_string()))?;
        if !is_valid_name(&raw.name) {
            return Err(format!("arbiter name {:?}: {NAME_RULE}", raw.name));
        }
        if raw.resources.is_empty() {
            return Err("an arbiter needs at least one [[resources]] entry".into());
        }
        let heartbeat = match raw.heartbeat_ms.unwrap_or(DEFAULT_HEARTBEAT_MS) {
            0 => None,
            ms @ 10..=60_000 => Some(Duration::from_millis(ms)),
            ms => {
                return Err(format!(
                    "heartbeat_ms = {ms}: give 10 to 60000 milliseconds, or 0 for none"
                ))
            }
        };
        let mut resources: Vec<ResourceSpec> = Vec::new();
        let mut cautions = Vec::new();
        for r in raw.resources {
            if !is_valid_name(&r.name) {
                return Err(format!("resource name {:?}: {NAME_RULE}", r.name));
            }
            if resources.iter().any(|x| x.name == r.name) {
                return Err(format!("resource {:?} is listed twice", r.name));
            }
            let (dmin, dmax) = match r.kind {
                Kind::Switch => (0.0, 1.0),
                _ => (f64::NEG_INFINITY, f64::INFINITY),
            };
            let limits = Limits {
                min: r.min.unwrap_or(dmin),
                max: r.max.unwrap_or(dmax),
            };
            // Infinite limits written out would let an infinity through to the hardware (a
            // min of +inf clamps every command to +inf); leaving one out means no limit.
            if r.min.is_some_and(|v| !v.is_finite()) || r.max.is_some_and(|v| !v.is_finite()) {
                let written: Vec<String> = [("min", r.min), ("max", r.max)]
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
                    .collect();
                return Err(format!(
                    "resource {:?}: min and max must be finite numbers (or left out for no \
                     limit), got {}",
                    r.name,
                    written.join(" and ")
                ));
            }
            if limits.min > limits.max {
                return Err(format!(
                    "resource {:?}: min {} is above max {}",
                    r.name, limits.min, limits.max
                ));
            }
            if r.kind == Kind::Switch && (limits.min < 0.0 || limits.max > 1.0) {
                return Err(format!(
                    "resource {:?}: a switch is commanded 0 (off) to 1 (on); its min {} and \
                     max {} must lie within 0..1",
                    r.name, limits.min, limits.max
                ));
            }
            let safe = match (r.safe, r.kind) {
                (None, Kind::Position) => SafeCommand::Hold,
                (None, _) => SafeCommand::Value(0.0),
                (Some(RawSafe::Value(v)), _) if v.is_finite() => SafeCommand::Value(v),
                (Some(RawSafe::Value(v)), _) => {
                    return Err(format!(
                        "resource {:?}: safe = {v}; a safe command must be a finite number",
                        r.name
                    ))
                }
                (Some(RawSafe::Word(w)), Kind::Position) if w == "hold" => SafeCommand::Hold,
                // Holding a velocity (or an output) keeps the robot moving once released.
                (Some(RawSafe::Word(w)), kind) if w == "hold" => {
                    return Err(format!(
                        "resource {:?}: safe = \"hold\" holds a position; a {} resource would \
                         keep its last command once released (use \"zero\", \"off\" or a number)",
                        r.name,
                        kind.name()
                    ))
                }
                (Some(RawSafe::Word(w)), kind) if w == "zero" || w == "off" => {
                    if kind == Kind::Position {
                        cautions.push(format!(
                            "resource {:?}: safe = {w:?} drives this position to 0 whenever \
                             nobody owns it (it moves); \"hold\" keeps it where it is",
                            r.name
                        ));
                    }
                    SafeCommand::Value(0.0)
                }
                (Some(RawSafe::Word(w)), _) => {
                    return Err(format!(
                    "resource {:?}: safe = {w:?}; expected \"hold\", \"zero\", \"off\" or a number",
                    r.name
                ))
                }
            };
            // A safe command outside the limits would be clamped into them: a released wheel
            // whose limits exclude 0 would keep turning, a switch whose min is 1 stay on.
            if let SafeCommand::Value(v) = safe {
                if v < limits.min || v > limits.max {
                    return Err(format!(
                        "resource {:?}: its safe command {v} (what it gets when nobody owns it) \
                         lies outside its limits {}; it would be clamped to a command that \
                         does not stop it: widen the limits to include {v}, or give `safe` a \
                         number within them",
                        r.name,
                        limits_text(&limits)
                    ));
                }
            }
            resources.push(ResourceSpec {
                name: r.name,
                kind: r.kind,
                limits,
                safe,
            });
        }
        Ok(ArbiterConfig {
            name: raw.name,
            heartbeat,
            resources,
            cautions,
        })
    }
}

/// Limits as `--check` and the log say them: `-1.5..1.5`, `1..unbounded`.
pub(crate) fn limits_text(limits: &Limits) -> String {
    let bound = |v: f64| {
        if v.is_finite() {
            readable(v)
        } else {
            "unbounded".to_owned()
        }
    };
    format!("{}..{}", bound(limits.min), bound(limits.max))
}

/// `v` as the file may have said it: in full (`-1.5`, `2000`), but with an exponent where
/// the full form would run to dozens of digits (`1e308` printed 309 characters).
fn readable(v: f64) -> String {
    if v != 0.0 && !(1e-6..1e15).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_gives_huge_and_tiny_bounds_with_an_exponent() {
        let c = ArbiterConfig::parse(
            "name = \"arm\"\n[[resources]]\nname = \"s\"\nmin = -1e308\nmax = 1.5\n\
             safe = 0.0000001\n[[resources]]\nname = \"t\"\nmin = -2000\nmax = 1e300\n",
        )
        .unwrap();
        let s = c.summary();
        assert!(s.contains("s (position, -1e308..1.5, safe 1e-7)"), "{s}");
        assert!(s.contains("t (position, -2000..1e300, safe hold)"), "{s}");
        // A refusal says the limits in the same words ("1..inf" before).
        let err = ArbiterConfig::parse(
            "name = \"drive\"\n[[resources]]\nname = \"w\"\nkind = \"velocity\"\nmin = 1\n",
        )
        .unwrap_err();
        assert!(err.contains("outside its limits 1..unbounded"), "{err}");
    }

    #[test]
    fn defaults_and_errors() {
        let c = ArbiterConfig::parse(
            "name = \"drive\"\n[[resources]]\nname = \"left\"\nkind = \"velocity\"\nmin = -1\nmax = 1\n\
             [[resources]]\nname = \"lamp\"\nkind = \"switch\"\n[[resources]]\nname = \"pan\"\n",
        )
        .unwrap();
        assert_eq!(c.resources[0].safe, SafeCommand::Value(0.0));
        assert_eq!(c.resources[1].limits, Limits { min: 0.0, max: 1.0 });
        assert_eq!(c.resources[2].safe, SafeCommand::Hold);
        for (bad, needle) in [
            ("name = \"a\"\nresources = []", "at least one"),
            ("name = \"a\"\ncolour = 1\nresources = []", "unknown field"),
            (
                "name = \"a b\"\n[[resources]]\nname = \"x\"",
                "arbiter name",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\n[[resources]]\nname = \"x\"",
                "twice",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nmin = 2\nmax = 1",
                "above max",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nkind = \"switch\"\nmax = 5",
                "within 0..1",
            ),
            ("name = \"a\"\n[[resources]]\nname = \"..\"", "not . or .."),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nsafe = \"park\"",
                "expected \"hold\"",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nmin = nan",
                "must be finite numbers",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nmin = inf",
                "must be finite numbers",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nmax = -inf",
                "must be finite numbers",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nsafe = inf",
                "finite number",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nsafe = true",
                "expected \"hold\", \"zero\", \"off\" or a number",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nsafe = [1]",
                "expected \"hold\", \"zero\", \"off\" or a number",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nkind = \"velocity\"\nsafe = \"hold\"",
                "holds a position",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nkind = \"velocity\"\nmin = 0.2\nmax = 1",
                "safe command 0 (what it gets when nobody owns it) lies outside its limits 0.2..1",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nkind = \"switch\"\nmin = 1",
                "safe command 0",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nmin = -1\nmax = 1\nsafe = 2",
                "safe command 2",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nmin = 1\nmax = 2\nsafe = \"zero\"",
                "safe command 0",
            ),
            (
                "name = \"a\"\nheartbeat_ms = 5\n[[resources]]\nname = \"x\"",
                "give 10 to 60000 milliseconds",
            ),
            (
                "name = \"a\"\n[[resources]]\nname = \"x\"\nkind = \"torque\"",
                "unknown variant",
            ),
        ] {
            let err = ArbiterConfig::parse(bad).unwrap_err();
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_heartbeat_defaults_to_100_ms_and_0_turns_it_off() {
        let one = "[[resources]]\nname = \"x\"\n";
        let d = ArbiterConfig::parse(&format!("name = \"a\"\n{one}")).unwrap();
        assert_eq!(
            d.heartbeat,
            Some(Duration::from_millis(DEFAULT_HEARTBEAT_MS))
        );
        let off = ArbiterConfig::parse(&format!("name = \"a\"\nheartbeat_ms = 0\n{one}")).unwrap();
        assert_eq!(off.heartbeat, None);
    }
}
