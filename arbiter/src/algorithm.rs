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
//!     if wanted is empty: idle (denied if it only commands resources the arbiter lacks)
//!     if wanted ⊆ uncommitted:           commit all of wanted     → full
//!     elif status == compromising:       commit wanted ∩ uncommitted → partial (denied if empty)
//!     else:                              commit nothing           → denied
//! every resource still uncommitted gets its safe command
//! ```
//! Once every resource is committed, later controllers that want any are denied (the patents'
//! "stop when uncommitted is empty", with their outcomes still reported).
//!
//! A command keyed to this arbiter for a resource it does not have (its config lost that
//! resource while a controller ran) is a resource asked for that can never be granted: it is
//! never free. A non-compromising controller is then denied everything here (it never holds
//! part of what it asked for); a compromising one takes what is free, `partial`.
//!
//! Values: an owner's command is clamped into the resource's limits. A command that is not a
//! finite number (NaN, an infinity: only a faulty writer makes one, the library refuses them)
//! still asks for its resource, so ownership follows the rules above exactly, but it never
//! reaches the hardware: the resource gets its safe command instead. A hold (the position
//! safe command) holds where the resource was measured when it was released; with no
//! measurement yet and no setpoint sent before, there is nowhere known to hold, and the
//! resource gets no setpoint at all (the driver keeps it where it is). So does one measured
//! outside its limits: clamped, the hold would move a resource nobody owns, and sent as it is,
//! it would be a setpoint out of range (the arbiter's log says so). One last sent a limit and
//! measured within a thousandth of its range (and of the limit's size, at least 1) past it (a
//! joint that settled a hair short of the limit it was driven to) is held at that limit.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use crate::clock::ReadAt;
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

impl Kind {
    /// The name a config file gives it (`kind = "..."`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Position => "position",
            Kind::Velocity => "velocity",
            Kind::Switch => "switch",
        }
    }
}

/// What an uncommitted resource is commanded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SafeCommand {
    /// Hold the position measured when the resource was released (or the last setpoint if no
    /// state was reported; no setpoint at all before either is known).
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
    /// Resources' setpoints: the owner's command clamped to the limits, or the safe command;
    /// a resource to hold whose position is not known yet has none.
    pub setpoints: BTreeMap<String, f64>,
    /// Resources sent their safe command: no owner, or an owner whose command is not a number.
    pub holding: BTreeSet<String>,
    pub outcomes: BTreeMap<String, Outcome>,
    /// Earliest time (ns since the epoch) at which a live block expires: the arbiter must run
    /// again then even if nothing else changes.
    pub next_expiry_ns: Option<u64>,
}

/// What one controller's block asks of this arbiter, parsed once per block change: the
/// arbiter process keeps one per controller and re-parses only the blocks that changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub status: Status,
    /// The resources of this arbiter the block commands (indices into the arbiter's
    /// resources) with the commanded values, in the block's key order.
    pub wanted: Vec<(usize, f64)>,
    /// How many commands keyed to this arbiter name a resource it does not have.
    pub unknown: usize,
    /// When the block expires, on the clock of `ReadAt::clock_ns` (the `now_ns` the request is
    /// allocated at).
    pub expires_at_ns: u64,
    /// The block's `session`: which process wrote it.
    pub session: u64,
}

impl Request {
    /// Reads `block` for arbiter `arbiter` (commands are keyed `<arbiter>/<resource>`; keys of
    /// other arbiters are not this arbiter's business, its own unknown resources are counted).
    pub fn parse(
        arbiter: &str,
        resources: &[ResourceSpec],
        block: &ControllerBlock,
        read: ReadAt,
    ) -> Request {
        let mut request = Request {
            status: block.status,
            wanted: Vec::new(),
            unknown: 0,
            expires_at_ns: 0,
            session: block.session,
        };
        request.reparse(arbiter, resources, block, read);
        request
    }

    /// `parse` into this request, reusing its storage (the arbiter re-parses a block on every
    /// change, right after waking up, where an allocation is dear).
    pub fn reparse(
        &mut self,
        arbiter: &str,
        resources: &[ResourceSpec],
        block: &ControllerBlock,
        read: ReadAt,
    ) {
        self.status = block.status;
        self.session = block.session;
        self.expires_at_ns = read.on_clock(block.expires_at_ns(read.wall_ns));
        self.wanted.clear();
        self.unknown = 0;
        for (key, value) in &block.commands {
            let Some(name) = key.strip_prefix(arbiter).and_then(|k| k.strip_prefix('/')) else {
                continue;
            };
            match resources.iter().position(|r| r.name == name) {
                Some(r) => self.wanted.push((r, *value)),
                None => self.unknown += 1,
            }
        }
    }
}

/// The result of one cycle by position: resources in the arbiter's order, controllers in the order
/// of the requests `allocate` was given. No names, so a cycle allocates nothing per controller;
/// `to_decision` names it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allocation {
    /// Per resource: the index of the controller that owns it, or `None` (safe command).
    pub owners: Vec<Option<usize>>,
    /// Per resource: the setpoint sent (`None`: none, a hold with no known position).
    pub setpoints: Vec<Option<f64>>,
    /// Per resource: whether that is its safe command (as in `Decision::holding`).
    pub holding: Vec<bool>,
    /// Per controller: its outcome, `None` when it has no block.
    pub outcomes: Vec<Option<Outcome>>,
    /// Earliest time at which a live block expires, on the clock `allocate`'s `now_ns` is on.
    pub next_expiry_ns: Option<u64>,
}

impl Allocation {
    /// Whether `other` decided the same: owners, setpoints, safe commands and outcomes. The
    /// next expiry instant is left out: it moves each time a live controller refreshes its
    /// block, and changes nothing a driver executes.
    pub fn same_result(&self, other: &Allocation) -> bool {
        self.owners == other.owners
            && self.setpoints == other.setpoints
            && self.holding == other.holding
            && self.outcomes == other.outcomes
    }

    /// Forgets where the resources sent their safe command were held: the next cycle holds
    /// them where they are measured then. For a driver that restarted: a joint may have moved
    /// (sagged, pushed by hand) while none ran, and holding the old position would move a
    /// resource nobody owns.
    pub fn forget_holds(&mut self) {
        for (held, setpoint) in self.holding.iter_mut().zip(&mut self.setpoints) {
            if *held {
                (*held, *setpoint) = (false, None);
            }
        }
    }

    /// The same result with names: `names[i]` is controller `i`'s name.
    pub fn to_decision(&self, resources: &[ResourceSpec], names: &[&str]) -> Decision {
        let mut decision = Decision {
            next_expiry_ns: self.next_expiry_ns,
            ..Decision::default()
        };
        for ((spec, owner), setpoint) in resources.iter().zip(&self.owners).zip(&self.setpoints) {
            let owner = owner.map(|c| names[c].to_owned());
            decision.owners.insert(spec.name.clone(), owner);
            if let Some(setpoint) = setpoint {
                decision.setpoints.insert(spec.name.clone(), *setpoint);
            }
        }
        for (spec, holding) in resources.iter().zip(&self.holding) {
            if *holding {
                decision.holding.insert(spec.name.clone());
            }
        }
        for (name, outcome) in names.iter().zip(&self.outcomes) {
            if let Some(outcome) = outcome {
                decision.outcomes.insert((*name).to_owned(), *outcome);
            }
        }
        decision
    }
}

/// Runs one arbitration cycle. `arbiter` is the arbiter's name (commands are keyed
/// `<arbiter>/<resource>`); `candidates` are in priority order, highest first. A name listed
/// twice keeps its higher place only.
pub fn arbitrate(
    arbiter: &str,
    resources: &[ResourceSpec],
    candidates: &[Candidate<'_>],
    state: &BTreeMap<String, f64>,
    previous: Option<&Decision>,
    now_ns: u64,
) -> Decision {
    let mut seen = std::collections::BTreeSet::new();
    let distinct: Vec<&Candidate> = candidates.iter().filter(|c| seen.insert(c.name)).collect();
    let requests: Vec<Option<Request>> = distinct
        .iter()
        .map(|c| {
            c.block
                .map(|b| Request::parse(arbiter, resources, b, ReadAt::wall(now_ns)))
        })
        .collect();
    let alive: Vec<bool> = distinct.iter().map(|c| c.writer_alive).collect();
    let previous = |r: usize| {
        let spec = &resources[r];
        previous.map(|p| Released {
            held: p.holding.contains(&spec.name),
            setpoint: p.setpoints.get(&spec.name).copied(),
        })
    };
    let mut allocation = Allocation::default();
    allocate_with(
        resources,
        &requests,
        &alive,
        state,
        previous,
        now_ns,
        &mut allocation,
    );
    let names: Vec<&str> = distinct.iter().map(|c| c.name).collect();
    allocation.to_decision(resources, &names)
}

/// Runs one arbitration cycle over parsed requests (the arbiter process's fast path; the
/// algorithm is the same as `arbitrate`'s, which is built on it), into `out` (whose storage is
/// reused). `requests` are distinct controllers in priority order (`None`: no block),
/// `alive[i]` whether controller `i`'s writer lives; `previous` is this arbiter's previous
/// allocation (same resources), for the hold-position safe command.
pub fn allocate(
    resources: &[ResourceSpec],
    requests: &[Option<Request>],
    alive: &[bool],
    state: &BTreeMap<String, f64>,
    previous: Option<&Allocation>,
    now_ns: u64,
    out: &mut Allocation,
) {
    let previous = |r: usize| {
        previous.map(|p| Released {
            held: p.holding[r],
            setpoint: p.setpoints[r],
        })
    };
    allocate_with(resources, requests, alive, state, previous, now_ns, out)
}

/// What the previous cycle did with a resource now sent its safe command: whether it was
/// sent its safe command then too (its hold position latched) and the setpoint it was sent.
struct Released {
    held: bool,
    setpoint: Option<f64>,
}

fn allocate_with(
    resources: &[ResourceSpec],
    requests: &[Option<Request>],
    alive: &[bool],
    state: &BTreeMap<String, f64>,
    previous: impl Fn(usize) -> Option<Released>,
    now_ns: u64,
    out: &mut Allocation,
) {
    out.owners.clear();
    out.owners.resize(resources.len(), None);
    // Holds the owner's raw command while a resource is committed (clamped at the end).
    out.setpoints.clear();
    out.setpoints.resize(resources.len(), None);
    out.outcomes.clear();
    out.outcomes.resize(requests.len(), None);
    out.next_expiry_ns = None;
    for (i, (request, alive)) in requests.iter().zip(alive).enumerate() {
        let Some(request) = request else {
            continue;
        };
        if !alive || request.expires_at_ns < now_ns {
            out.outcomes[i] = Some(Outcome::Expired);
            continue;
        }
        out.next_expiry_ns = Some(
            out.next_expiry_ns
                .map_or(request.expires_at_ns, |t| t.min(request.expires_at_ns)),
        );
        let (owners, commanded) = (&mut out.owners, &mut out.setpoints);
        let wanted = &request.wanted;
        let outcome = if wanted.is_empty() && request.unknown == 0 {
            Outcome::Idle
        } else if request.unknown == 0 && wanted.iter().all(|(r, _)| owners[*r].is_none()) {
            for (r, v) in wanted {
                owners[*r] = Some(i);
                commanded[*r] = Some(*v);
            }
            Outcome::Full
        } else if request.status == Status::Compromising {
            let mut got_any = false;
            for (r, v) in wanted {
                if owners[*r].is_none() {
                    owners[*r] = Some(i);
                    commanded[*r] = Some(*v);
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
        out.outcomes[i] = Some(outcome);
    }
    out.holding.clear();
    out.holding.resize(resources.len(), false);
    for (r, spec) in resources.iter().enumerate() {
        out.setpoints[r] = match (out.owners[r], out.setpoints[r]) {
            (Some(_), Some(v)) if v.is_finite() => Some(spec.limits.clamp(v)),
            _ => {
                out.holding[r] = true;
                safe_setpoint(spec, state, previous(r))
            }
        };
    }
}

/// The safe command of an uncommitted resource (or one whose owner's command is not a number).
fn safe_setpoint(
    spec: &ResourceSpec,
    state: &BTreeMap<String, f64>,
    previous: Option<Released>,
) -> Option<f64> {
    match spec.safe {
        SafeCommand::Value(v) => Some(spec.limits.clamp(v)),
        SafeCommand::Hold => {
            let held_already = previous.as_ref().is_some_and(|p| p.held);
            let prev_setpoint = previous.and_then(|p| p.setpoint);
            // A driver reporting NaN has measured nothing.
            let measured = state.get(&spec.name).copied().filter(|v| v.is_finite());
            let target = match (held_already, prev_setpoint, measured) {
                // Released earlier: keep holding the latched target.
                (true, Some(p), _) => Some(p),
                // Just released (or nothing latched yet): latch where the resource is now.
                (_, _, Some(measured)) => Some(measured),
                // Not measured: where it was sent last, else nowhere known.
                (_, p, None) => p,
            };
            // Outside the limits (a joint out of range, or a glitched reading when released):
            // clamped, the hold would move a resource nobody owns; sent as it is, it would be
            // a setpoint out of range. No setpoint: the driver keeps the resource where it is.
            // But one that settled a hair short of the limit it was last sent (0.4999979 for
            // a command clamped to 0.5) is held at that limit: sent it again, it does not move.
            target.and_then(|t| {
                let clamped = spec.limits.clamp(t);
                let driven_there = prev_setpoint == Some(clamped);
                (clamped == t
                    || (driven_there
                        && (clamped - t).abs() <= hold_tolerance(&spec.limits, clamped)))
                .then_some(clamped)
            })
        }
    }
}

/// How far past `limit` a resource to hold may be measured and still be held there: a
/// thousandth of its range, and of the limit's size (at least 1), so that a range with one end
/// far away (`min = -1e308`) gives no room; none for a range without both ends.
fn hold_tolerance(limits: &Limits, limit: f64) -> f64 {
    let span = limits.max - limits.min;
    if span.is_finite() {
        span.min(limit.abs().max(1.0)) * 1e-3
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests;
