//! The arbitration protocol: the values that the robot manager, the control arbiters, the robot
//! controllers and the drivers exchange on the bus. Their JSON forms (as `bus-inspect get --json`
//! prints them) are documented in `docs/arbitration.md`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Slot of the robot manager's configuration.
pub const MANAGER_SLOT: &str = "/robot/manager";

/// What a controller, arbiter or resource name may be: it becomes one segment of a slot name
/// (`/robot/controller/<name>`) or of a command key (`<arbiter>/<resource>`).
pub const NAME_RULE: &str = "use 1 to 64 ASCII letters, digits, _ - . (not . or .. alone)";

/// Whether `name` follows [`NAME_RULE`].
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Slot of a robot controller's memory block.
pub fn controller_slot(controller: &str) -> String {
    format!("/robot/controller/{controller}")
}

/// Slot of an arbiter's memory block (feedback).
pub fn arbiter_slot(arbiter: &str) -> String {
    format!("/robot/arbiter/{arbiter}")
}

/// Slot of an arbiter's coherent command for its resources.
pub fn command_slot(arbiter: &str) -> String {
    format!("/robot/arbiter/{arbiter}/command")
}

/// Slot where the driver (or simulator) of an arbiter's resources publishes their state.
pub fn state_slot(arbiter: &str) -> String {
    format!("/robot/resource/{arbiter}/state")
}

/// What happens to a controller that publishes a block but is not in the manager's list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unlisted {
    /// It gets no resources.
    #[default]
    Ignore,
    /// It is placed after every listed controller, in order of appearance.
    Last,
}

/// `/robot/manager`: the robot controllers in priority order (highest first) and the arbiters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagerConfig {
    /// Effective priority order, highest first: the configured list, then (with
    /// `unlisted = last`) the controllers discovered on the bus that the list does not name.
    pub controllers: Vec<String>,
    pub arbiters: Vec<String>,
    pub unlisted: Unlisted,
    /// Increases with every change the manager publishes.
    pub revision: u64,
}

/// Whether a controller accepts part of what it asked for (patent terms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Takes whatever subset of its wanted resources is still free.
    Compromising,
    /// Takes all of its wanted resources or none.
    NonCompromising,
}

/// `/robot/controller/<name>`: a robot controller's memory block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ControllerBlock {
    pub name: String,
    pub status: Status,
    /// Setpoints keyed by `<arbiter>/<resource>`.
    pub commands: BTreeMap<String, f64>,
    /// When the block was written, nanoseconds since the Unix epoch.
    pub stamp_ns: u64,
    /// The block counts as absent once `stamp_ns + ttl_ms` has passed.
    pub ttl_ms: u64,
    /// Which process writes the block: a number each controller draws at random when it is
    /// made (0 in a block written by hand). Arbiters give it back with each outcome
    /// (`ArbiterBlock::sessions`): a controller restarted under the same name tells the outcome
    /// of its own block from that of the process before it.
    pub session: u64,
}

/// Longest time to live an arbiter honours (the controller library allows no more); a block
/// asking for more is honoured this long.
pub const MAX_TTL_MS: u64 = 3_600_000;

impl ControllerBlock {
    /// Nanoseconds since the epoch after which the block is expired, for an arbiter that read
    /// it at `read_ns`. A stamp later than that (a faulty writer, or another computer's clock
    /// ahead of this one) counts from `read_ns`, and the time to live is at most
    /// `MAX_TTL_MS`: a block never outlives its last write by more than its time to live.
    pub fn expires_at_ns(&self, read_ns: u64) -> u64 {
        let ttl_ns = self.ttl_ms.min(MAX_TTL_MS) * 1_000_000;
        crate::clock::lives_until(self.stamp_ns, read_ns, ttl_ns)
    }
}

/// What an arbiter did with a controller's request this cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Got every resource of this arbiter it asked for.
    Full,
    /// Compromising, got some of them.
    Partial,
    /// Got none of the resources it asked for.
    Denied,
    /// Its block's time to live passed, or its writer is gone: treated as absent.
    Expired,
    /// Asked for none of this arbiter's resources.
    Idle,
}

impl Outcome {
    /// The name as in JSON (`bus-inspect get --json`).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Full => "full",
            Outcome::Partial => "partial",
            Outcome::Denied => "denied",
            Outcome::Expired => "expired",
            Outcome::Idle => "idle",
        }
    }
}

/// Position or velocity bounds of a resource; commands are clamped into them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub min: f64,
    pub max: f64,
}

impl Limits {
    pub fn clamp(&self, v: f64) -> f64 {
        if v.is_nan() {
            return self.min.max(0.0).min(self.max);
        }
        // Not `f64::clamp`, which panics on bounds out of order or NaN: limits read from the
        // bus are another process's word. Within valid limits the two agree.
        v.max(self.min).min(self.max)
    }
}

/// One resource in an arbiter's memory block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResourceFeedback {
    /// Last state the driver reported; `None` before the first report.
    pub state: Option<f64>,
    pub limits: Limits,
    /// Controller that owns the resource this cycle; `None`: it gets its safe command.
    pub owner: Option<String>,
    /// The setpoint sent this cycle; `None` when none was sent (a resource to hold whose
    /// position the driver has not reported yet).
    pub command: Option<f64>,
}

/// `/robot/arbiter/<name>`: an arbiter's memory block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArbiterBlock {
    pub name: String,
    /// Increases with every block the arbiter publishes.
    pub cycle: u64,
    pub stamp_ns: u64,
    pub resources: BTreeMap<String, ResourceFeedback>,
    /// Resource name to owning controller (or `null`).
    pub owners: BTreeMap<String, Option<String>>,
    /// Controller name to its outcome this cycle, for every controller the manager lists whose
    /// block exists.
    pub outcomes: BTreeMap<String, Outcome>,
    /// Controller name to the `session` of the block its outcome is for: the block the arbiter
    /// had read when it decided, which may be older than the one in the slot by then.
    pub sessions: BTreeMap<String, u64>,
}

/// `/robot/arbiter/<name>/command`: the coherent command for the arbiter's resources.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResourceCommand {
    pub arbiter: String,
    pub cycle: u64,
    pub stamp_ns: u64,
    /// How often the arbiter re-stamps this command while nothing changes, milliseconds (its
    /// config's `heartbeat_ms`; 0: never). A command much older than that comes from an
    /// arbiter that hangs.
    pub heartbeat_ms: u64,
    /// Resource name to setpoint (the owner's, clamped, or the safe command). A resource to
    /// hold whose position the driver has not reported yet is absent: the driver keeps it
    /// where it is.
    pub setpoints: BTreeMap<String, f64>,
}

/// `/robot/resource/<arbiter>/state`: what the driver measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceState {
    pub stamp_ns: u64,
    /// Resource name to measured value (position or velocity).
    pub values: BTreeMap<String, f64>,
}

/// Nanoseconds since the Unix epoch on this process's wall clock (with the test switch of
/// `clock`, offset as a test sets it).
pub use crate::clock::wall_ns as now_ns;

#[cfg(test)]
mod tests {
    use super::{Limits, Outcome};

    /// Limits come off the bus (an arbiter block another process wrote): out of order or NaN,
    /// they must give some number, not a panic in every application reading them.
    #[test]
    fn clamping_to_limits_read_from_the_bus_never_panics() {
        let arm = Limits {
            min: -1.5,
            max: 1.5,
        };
        assert_eq!(arm.clamp(2.0), 1.5);
        assert_eq!(arm.clamp(-2.0), -1.5);
        assert_eq!(arm.clamp(0.25), 0.25);
        assert_eq!(arm.clamp(f64::NAN), 0.0);
        for bad in [
            Limits {
                min: 1.0,
                max: -1.0,
            },
            Limits {
                min: f64::NAN,
                max: 1.0,
            },
            Limits {
                min: -1.0,
                max: f64::NAN,
            },
        ] {
            for v in [-2.0, 0.0, 2.0, f64::NAN] {
                bad.clamp(v);
            }
        }
    }

    #[test]
    fn an_outcome_is_named_as_in_json() {
        for o in [
            Outcome::Full,
            Outcome::Partial,
            Outcome::Denied,
            Outcome::Expired,
            Outcome::Idle,
        ] {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
    }
}
