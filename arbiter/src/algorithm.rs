//! The arbitration algorithm of DESIGN.md ("Control arbitration"), as a pure function: given
//! the arbiter's resources, the controllers in priority order with their memory blocks, the
//! resource state and the previous decision, decide owners, setpoints and outcomes. No I/O and
//! no clock, so that tables and property tests pin it down.
//!
//! ```text
//! uncommitted = all resources of this arbiter
//! for controller in priority order:
//!     skip if its block is missing; outcome expired if stamp + ttl < now or its writer is gone
//!     wanted = the resources of this arbiter that the block commands
//!     if wanted is empty: idle
//!     if wanted ⊆ uncommitted:           commit all of wanted     → full
//!     elif status == compromising:       commit wanted ∩ uncommitted → partial (denied if empty)
//!     else:                              commit nothing           → denied
//! every resource still uncommitted gets its safe command
//! ```
//! Once every resource is committed, later controllers that want any are denied (the patents'
//! "stop when uncommitted is empty", with their outcomes still reported).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::protocol::{ControllerBlock, Limits, Outcome, Status};

/// How a resource is driven, which decides its default safe command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A position setpoint; safe command: hold where it is.
    #[default]
    Position,
    /// A velocity setpoint; safe command: zero.
    Velocity,
    /// An on/off output (1 / 0); safe command: off.
    Switch,
}

/// What an uncommitted resource is commanded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SafeCommand {
    /// Hold the position measured when the resource was released (or the last setpoint if no
    /// state was ever reported).
    Hold,
    /// A fixed setpoint (zero velocity, off, a parking position).
    Value(f64),
}

/// One resource of an arbiter.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceSpec {
    pub name: String,
    pub kind: Kind,
    pub limits: Limits,
    pub safe: SafeCommand,
}

/// One controller as the arbiter sees it this cycle.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    pub name: &'a str,
    /// Its memory block; `None` if it never published one (it is then skipped, no outcome).
    pub block: Option<&'a ControllerBlock>,
    /// `false` when the block's writer is gone (process exited or died).
    pub writer_alive: bool,
}

/// The result of one cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// Every resource, with its owner or `None`.
    pub owners: BTreeMap<String, Option<String>>,
    /// Every resource's setpoint: the owner's command clamped to the limits, or the safe command.
    pub setpoints: BTreeMap<String, f64>,
    pub outcomes: BTreeMap<String, Outcome>,
    /// Earliest time (ns since the epoch) at which a live block expires: the arbiter must run
    /// again then even if nothing else changes.
    pub next_expiry_ns: Option<u64>,
}

/// Runs one arbitration cycle. `arbiter` is the arbiter's name (commands are keyed
/// `<arbiter>/<resource>`); `candidates` are in priority order, highest first.
pub fn arbitrate(
    arbiter: &str,
    resources: &[ResourceSpec],
    candidates: &[Candidate<'_>],
    state: &BTreeMap<String, f64>,
    previous: Option<&Decision>,
    now_ns: u64,
) -> Decision {
    let mut decision = Decision::default();
    // Per resource (by index in `resources`): the candidate that owns it and its command. A
    // resource is uncommitted while this is `None`. Indices and one reused `wanted` buffer keep
    // a cycle free of per-controller allocations (it runs on every block change).
    let mut owned: Vec<Option<(usize, f64)>> = vec![None; resources.len()];
    let mut wanted: Vec<(usize, f64)> = Vec::with_capacity(resources.len());
    for (i, candidate) in candidates.iter().enumerate() {
        let Some(block) = candidate.block else {
            continue;
        };
        // Every candidate with a block gets an outcome below, so a second entry of the same
        // name finds the first one's: a name listed twice keeps its higher place only.
        if decision.outcomes.contains_key(candidate.name) {
            continue;
        }
        if !candidate.writer_alive || block.expires_at_ns() < now_ns {
            decision
                .outcomes
                .insert(candidate.name.to_owned(), Outcome::Expired);
            continue;
        }
        decision.next_expiry_ns = Some(
            decision
                .next_expiry_ns
                .map_or(block.expires_at_ns(), |t| t.min(block.expires_at_ns())),
        );
        wanted.clear();
        for (key, value) in &block.commands {
            let resource = key
                .strip_prefix(arbiter)
                .and_then(|rest| rest.strip_prefix('/'));
            if let Some(r) = resource.and_then(|name| resources.iter().position(|r| r.name == name))
            {
                wanted.push((r, *value));
            }
        }
        let outcome = if wanted.is_empty() {
            Outcome::Idle
        } else if wanted.iter().all(|(r, _)| owned[*r].is_none()) {
            for (r, v) in &wanted {
                owned[*r] = Some((i, *v));
            }
            Outcome::Full
        } else if block.status == Status::Compromising {
            let mut got_any = false;
            for (r, v) in &wanted {
                if owned[*r].is_none() {
                    owned[*r] = Some((i, *v));
                    got_any = true;
                }
            }
            if got_any {
                Outcome::Partial
            } else {
                Outcome::Denied
            }
        } else {
            Outcome::Denied
        };
        decision.outcomes.insert(candidate.name.to_owned(), outcome);
    }
    for (spec, owner) in resources.iter().zip(&owned) {
        let (owner, setpoint) = match owner {
            Some((c, value)) => (
                Some(candidates[*c].name.to_owned()),
                spec.limits.clamp(*value),
            ),
            None => (None, safe_setpoint(spec, state, previous)),
        };
        decision.owners.insert(spec.name.clone(), owner);
        decision.setpoints.insert(spec.name.clone(), setpoint);
    }
    decision
}

fn safe_setpoint(
    spec: &ResourceSpec,
    state: &BTreeMap<String, f64>,
    previous: Option<&Decision>,
) -> f64 {
    match spec.safe {
        SafeCommand::Value(v) => spec.limits.clamp(v),
        SafeCommand::Hold => {
            let prev_owner = previous.and_then(|p| p.owners.get(&spec.name));
            let prev_setpoint = previous.and_then(|p| p.setpoints.get(&spec.name)).copied();
            let held_already = matches!(prev_owner, Some(None));
            let target = match (held_already, prev_setpoint, state.get(&spec.name)) {
                // Released earlier: keep holding the latched target.
                (true, Some(p), _) => p,
                // Just released (or first cycle): latch where the resource is now.
                (_, _, Some(measured)) => *measured,
                (_, Some(p), None) => p,
                (_, None, None) => 0.0,
            };
            spec.limits.clamp(target)
        }
    }
}

#[cfg(test)]
mod tests;
