//! The arbiter process: follows the manager's controller list, pulls every listed controller's
//! memory block, runs the algorithm (`algorithm::allocate`) whenever the manager config, a
//! controller block or the resource state changes (or a block reaches its expiry), and publishes
//! its own memory block when anything changed and the coherent command when the decision did
//! (owners, setpoints, outcomes; re-stamped every heartbeat between). It sleeps in one
//! `wait_any` over all of those slots: it never polls.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bus::{Bus, BusError, Publication};

use crate::algorithm::{allocate, Allocation, Decision, ResourceSpec};
use crate::config::ArbiterConfig;
use crate::protocol::{
    arbiter_slot, command_slot, ArbiterBlock, Outcome, ResourceCommand, ResourceFeedback,
};

mod watched;

use crate::clock::{read_now, steady_ns, wall_ns};
use watched::Watched;

/// Longest sleep when no block is due to expire; a wake-up then only re-runs the cycle.
const IDLE_WAIT: Duration = Duration::from_secs(3600);
/// How close to a block's expiry a wake-up reads every block first (see the main loop).
const EXPIRY_MARGIN_NS: u64 = 1_000_000;
/// Controller blocks grow with the number of commands; this bounds a block at 64 KiB. An
/// arbiter's own slots are at least this big, more when its resources need it
/// (`feedback_capacity`).
pub const BLOCK_CAPACITY: usize = 64 * 1024;

/// Bytes the arbiter's memory block can take at most, in the bus's fixed-width encoding
/// (strings and maps carry an 8-byte length): every resource owned by a controller of the
/// longest name a slot allows, and an outcome for each controller it can follow. Its slot is
/// made this big (at least `BLOCK_CAPACITY`), so that no cycle ever fails to publish.
fn feedback_capacity(config: &ArbiterConfig) -> usize {
    let owner = 1 + 8 + bus::names::MAX_NAME_LEN;
    let per_resource = |r: &ResourceSpec| {
        let name = 8 + r.name.len();
        // resources: name, state, limits, owner, command; owners: name, owner.
        (name + 9 + 16 + owner + 9) + (name + owner)
    };
    // outcomes: name, variant; sessions: name, session.
    let outcomes =
        MAX_CONTROLLERS * ((8 + bus::names::MAX_NAME_LEN + 4) + (8 + bus::names::MAX_NAME_LEN + 8));
    // name, cycle, stamp, and the lengths of the four maps.
    let fixed = 8 + config.name.len() + 8 + 8 + 4 * 8;
    let bound = fixed + config.resources.iter().map(per_resource).sum::<usize>() + outcomes;
    bound.max(BLOCK_CAPACITY)
}

/// Bytes the coherent command can take at most (see `feedback_capacity`).
fn command_capacity(config: &ArbiterConfig) -> usize {
    let setpoints: usize = config.resources.iter().map(|r| 8 + r.name.len() + 8).sum();
    // arbiter (length + name), cycle, stamp, heartbeat, map length, setpoints.
    (8 + config.name.len() + 8 + 8 + 8 + 8 + setpoints).max(BLOCK_CAPACITY)
}

/// Most controllers one arbiter follows: one wait covers `WAITV_MAX` words, four of them the
/// manager's slot, the resource state's, the word that wakes it on binding and the one that
/// wakes it to stop (`StopRequest`). The robot manager refuses a longer list.
pub const MAX_CONTROLLERS: usize = bus::futex::WAITV_MAX - 4;

/// Most arbiters a robot controller follows: its group waits on the manager's slot and one
/// per arbiter, at most `WAITV_MAX - 1`. The robot manager refuses a longer list.
pub const MAX_ARBITERS: usize = bus::futex::WAITV_MAX - 2;

/// Runs the arbiter until an error, or until `stop` is requested: woken at once, it then sends
/// every resource its safe command, publishes that cycle and returns. `health` is marked busy
/// during each cycle (for the systemd watchdog); `on_cycle` is called after each published
/// cycle.
///
/// A cycle is on the latency path from a controller's write to the coherent command, so it
/// re-parses only the blocks that changed, decides by position (`algorithm::allocate`, no
/// names, no per-controller allocation), and writes the command before it names anything for
/// the memory block and the log.
pub fn run(
    bus: &Bus,
    config: &ArbiterConfig,
    health: &daemon::Health,
    stop: &StopRequest,
    mut on_cycle: impl FnMut(&ArbiterBlock),
) -> Result<(), BusError> {
    let name = config.name.as_str();
    let mut block_pub: Publication<ArbiterBlock> = bus
        .publication(&arbiter_slot(name))?
        .capacity(feedback_capacity(config))
        .create()?;
    let mut command_pub: Publication<ResourceCommand> = bus
        .publication(&command_slot(name))?
        .capacity(command_capacity(config))
        .create()?;
    let mut command = CommandValue::new(name, &config.resources, config.heartbeat);
    let mut watched = Watched::new(bus, name, &[], stop, None)?;
    let mut previous: Option<Allocation> = None;
    // This cycle's result; its storage is the one from two cycles back (swapped below).
    let mut allocation = Allocation::default();
    let mut previous_decision: Option<Decision> = None;
    let mut state: BTreeMap<String, f64> = BTreeMap::new();
    // The memory block's `sessions`, kept between cycles (`Watched::sessions_into`).
    let mut sessions: BTreeMap<String, u64> = BTreeMap::new();
    // The driver whose state was read last (its writer): another one is a driver restarted,
    // whose resources are held where it measures them (`forget_holds`). A mirror's writer is
    // told apart by its origin's publisher, its pid being its registry's.
    let mut driver: Option<bus::WriterId> = None;
    let mut cycle = 0u64;
    // Set on start and whenever the watched list is rebuilt: the allocation's positions then
    // name other controllers, so the cycle publishes even if the allocation compares equal.
    let mut renamed = true;
    // Whether the manager's order lists this arbiter, as last followed (for the log).
    let mut in_service_before: Option<bool> = None;
    // Set once `stop` is seen: the cycle then follows no controller (every resource gets its
    // safe command), publishes, and returns.
    let mut stopping = false;
    let mut replaced_checked = Instant::now();
    loop {
        if !stopping && stop.is_requested() {
            // No new subscriptions (that would wait for the registry): the controllers
            // followed count as absent from this cycle on.
            stopping = true;
            renamed = true;
        }
        let next_expiry = previous.as_ref().and_then(|d| d.next_expiry_ns);
        let mut timeout = next_expiry.map_or(IDLE_WAIT, |t| {
            // Wake just after the expiry instant so that the block counts as expired.
            Duration::from_nanos(t.saturating_sub(steady_ns())) + Duration::from_millis(1)
        });
        if let Some(due) = command.heartbeat_due_in() {
            timeout = timeout.min(due);
        }
        let mut changed = if renamed {
            watched.group.update_all()?
        } else {
            watched.group.wait_any(timeout)?
        };
        // A block due to expire now may only be unread: `wait_any` pulls the member whose
        // write woke it, and the blocks written while this process was off its CPU (starved,
        // or stopped, after the wake for longer than their time to live) come with later
        // calls. Every member is read before one counts as expired: a live controller's block,
        // refreshed all along, was taken for run out, and its resources went to a
        // lower-priority controller for a cycle. (Within `EXPIRY_MARGIN_NS` of the expiry, so
        // that the instant the cycle decides at, read a moment later, is covered as well.)
        if !renamed
            && next_expiry.is_some_and(|t| steady_ns().saturating_add(EXPIRY_MARGIN_NS) >= t)
        {
            changed.extend(watched.group.update_all()?);
            changed.sort_unstable();
            changed.dedup();
        }
        health.begin();
        if watched.group.any_replaced(&changed) {
            // The registry made slots followed here anew (it restarted on corrupted or
            // removed segments): the same controllers, through new subscriptions (those of
            // `watched` follow slots no longer in use).
            tracing::warn!("{name}: slots it follows were made anew; subscribing again");
            let listed: Vec<String> = watched
                .controller_names()
                .into_iter()
                .map(str::to_owned)
                .collect();
            (watched, changed) = Watched::follow(bus, name, &listed, stop, None)?;
            renamed = true;
        }
        if !renamed && changed.is_empty() && next_expiry.is_none_or(|t| steady_ns() < t) {
            // Nothing to decide (no slot changed, no block expired): the heartbeat is due.
            // The same command, stamped now, tells a driver this arbiter still runs.
            command.restamp_if_due(&mut command_pub)?;
            check_replaced(&mut replaced_checked, &command_pub, &block_pub)?;
            health.end();
            continue;
        }
        if !stopping && changed.contains(&watched.manager.index()) {
            // The rebuilt group reads the manager's slot afresh: if the manager wrote again
            // since the value just followed, that newer list is consumed here and no later
            // wake-up reports it, so follow it until the list read is the list watched.
            // A name listed twice keeps its first place only. An arbiter the manager does not
            // list is out of service: the controllers are told their commands for it do not
            // count, so it follows no controller and sends every resource its safe command.
            while let Some(order) = watched.group.get(watched.manager).value() {
                let in_service = order.arbiters.iter().any(|a| a == name);
                let listed = if in_service {
                    distinct(&order.controllers)
                } else {
                    Vec::new()
                };
                if in_service_before != Some(in_service) {
                    if !in_service {
                        tracing::warn!(
                            "{name}: the robot manager does not list this arbiter: following \
                             no controller, every resource gets its safe command"
                        );
                    } else if in_service_before.is_some() {
                        tracing::info!("{name}: listed by the robot manager again");
                    }
                    in_service_before = Some(in_service);
                }
                if listed == watched.controller_names() {
                    break;
                }
                tracing::info!("{name}: controllers in priority order: {listed:?}");
                (watched, _) = Watched::follow(bus, name, &listed, stop, Some(watched))?;
                renamed = true;
            }
        }
        // One read of each clock per cycle (each read waits for the pending loads: see
        // `Health::now_ms`): the blocks just pulled count as read now, and the cycle decides at
        // this instant.
        let now = read_now();
        let new_blocks = watched.parse(config, &changed, renamed, now);
        if stopping {
            // Follows no controller, as out of service: no outcome for anyone (an `expired`
            // would say a controller's block ran out, which it did not).
            watched.alive.fill(false);
            watched.requests.fill(None);
        }
        // A rebuilt group has read the state afresh: take it even if the old group's wake-up
        // did not name it.
        let state_changed = renamed || changed.contains(&watched.state.index());
        if let Some(e) = watched.group.take_error(watched.state.index()) {
            tracing::warn!("{name}: resource state: {e}");
        }
        if let Some(e) = watched.group.take_error(watched.manager.index()) {
            tracing::warn!("{name}: manager config: {e}");
        }
        if state_changed {
            let sub = watched.group.get(watched.state);
            let meta = sub
                .meta()
                .filter(|m| m.writer == bus::WriterState::Alive && m.writer_pid != 0);
            let running = meta.as_ref().map(|m| m.writer_id);
            if let (Some(now), Some(before)) = (running, driver) {
                if now != before {
                    let which = match meta.as_ref().and_then(|m| m.origin.as_deref()) {
                        Some(host) => format!("on host '{host}' (a driver restarted there)"),
                        None => format!(
                            "process (pid {})",
                            meta.as_ref().map_or(0, |m| m.writer_pid)
                        ),
                    };
                    tracing::info!(
                        "{name}: the resource state comes from another driver {which}: \
                         resources sent their safe command are held where it measures them"
                    );
                    state.clear();
                    if let Some(p) = previous.as_mut() {
                        p.forget_holds();
                    }
                }
            }
            driver = running.or(driver);
            if let Some(s) = sub.value() {
                state.clone_from(&s.values);
            }
        }
        allocate(
            &config.resources,
            &watched.requests,
            &watched.alive,
            &state,
            previous.as_ref(),
            now.clock_ns,
            &mut allocation,
        );
        // A refresh of a controller's block moves only the next expiry, or nothing (a block
        // that arrives expired). The memory block is published all the same: it tells a
        // controller that the arbiter read its block (one (re)started with the commands of the
        // process before it learns its outcome only from a block that gives its own session:
        // a second run whose blocks arrive expired, like the first's, said "not seen yet" for
        // ever). The command is not: a driver has nothing new to execute, and the
        // heartbeat re-stamps it meanwhile.
        let result_changed = renamed
            || !previous
                .as_ref()
                .is_some_and(|p| p.same_result(&allocation));
        let decided_changed = result_changed
            || previous.as_ref().map(|p| p.next_expiry_ns) != Some(allocation.next_expiry_ns);
        if decided_changed || state_changed || new_blocks {
            cycle += 1;
            let stamp_ns = now.wall_ns;
            if result_changed {
                command.write(&mut command_pub, &allocation, cycle, stamp_ns)?;
            }
            let decision = allocation.to_decision(&config.resources, &watched.controller_names());
            if result_changed {
                // Why a controller is followed no more, when one is.
                let unfollowed = if stopping {
                    "the arbiter is stopping"
                } else if in_service_before == Some(false) {
                    "the robot manager does not list this arbiter"
                } else {
                    "not in the manager's order"
                };
                let gone = |c: &str| watched.gone_writer(c);
                log_changes(
                    name,
                    previous_decision.as_ref(),
                    &decision,
                    unfollowed,
                    gone,
                );
                warn_held_outside_limits(
                    name,
                    config,
                    previous_decision.as_ref(),
                    &decision,
                    &state,
                );
            }
            watched.sessions_into(&decision.outcomes, &mut sessions);
            let block = memory_block(config, cycle, stamp_ns, &decision, sessions, &state);
            block_pub.write(&block)?;
            on_cycle(&block);
            // Taken back for the next cycle rather than built anew.
            sessions = block.sessions;
            previous_decision = Some(decision);
        }
        // A cycle that wrote no command may find the heartbeat due (a refresh wakes the
        // arbiter without changing the decision): re-stamped here rather than on the next
        // wake-up, which the wait's timeout, already past, would make at once.
        command.restamp_if_due(&mut command_pub)?;
        match &mut previous {
            Some(p) => std::mem::swap(p, &mut allocation),
            None => previous = Some(std::mem::take(&mut allocation)),
        }
        renamed = false;
        check_replaced(&mut replaced_checked, &command_pub, &block_pub)?;
        health.end();
        if stopping {
            tracing::info!("{name}: every resource has its safe command; stopped");
            return Ok(());
        }
    }
}

/// A request to stop, from another thread (the signal thread): the arbiter's loop wakes at
/// once, sends every resource its safe command, publishes that and returns.
#[derive(Default)]
pub struct StopRequest {
    requested: AtomicBool,
    waker: bus::GroupWaker,
}

impl StopRequest {
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        self.waker.wake();
    }

    fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

/// How often the arbiter checks that its slots are still the ones everybody uses.
const CHECK_REPLACED_EVERY: Duration = Duration::from_millis(100);

/// Whether the registry made the command's or the memory block's slot anew under this process
/// (their segments were damaged) and the publication could not go on in the new slot (it could
/// not be mapped): drivers and controllers no longer see what it writes, so it ends, to be
/// restarted onto the new slots. (A publication that could goes on by itself: `bus`'s
/// `client/successor.rs`.) Checked at most every
/// `CHECK_REPLACED_EVERY`, after the cycle's writes (off the latency path: two locks).
fn check_replaced(
    checked: &mut Instant,
    command: &Publication<ResourceCommand>,
    block: &Publication<ArbiterBlock>,
) -> Result<(), BusError> {
    if checked.elapsed() < CHECK_REPLACED_EVERY {
        return Ok(());
    }
    *checked = Instant::now();
    for error in [command.bind_error(), block.bind_error()] {
        if let Some(e @ BusError::Replaced { .. }) = error {
            return Err(e);
        }
    }
    Ok(())
}

/// The coherent command, kept between cycles so that a cycle only stores new setpoints into it
/// (its resource names are the config's, fixed for the arbiter's life).
struct CommandValue {
    value: ResourceCommand,
    /// The config's resource names, in its order.
    names: Vec<String>,
    /// For each entry of `value.setpoints` in its (sorted) order, the resource's position in
    /// the config, while `value.setpoints` has every resource.
    order: Vec<usize>,
    /// The config's heartbeat: the command is re-stamped at least this often.
    heartbeat: Option<Duration>,
    /// When the command was last written.
    written: Instant,
}

impl CommandValue {
    fn new(arbiter: &str, resources: &[ResourceSpec], heartbeat: Option<Duration>) -> CommandValue {
        let names: Vec<String> = resources.iter().map(|r| r.name.clone()).collect();
        let mut sorted: Vec<usize> = (0..names.len()).collect();
        sorted.sort_by_key(|&r| &names[r]);
        CommandValue {
            value: ResourceCommand {
                arbiter: arbiter.to_owned(),
                cycle: 0,
                stamp_ns: 0,
                heartbeat_ms: heartbeat.map_or(0, |h| h.as_millis() as u64),
                setpoints: BTreeMap::new(),
            },
            names,
            order: sorted,
            heartbeat,
            written: Instant::now(),
        }
    }

    /// How long until the heartbeat is due (`None`: the arbiter has none).
    fn heartbeat_due_in(&self) -> Option<Duration> {
        self.heartbeat
            .map(|h| h.saturating_sub(self.written.elapsed()))
    }

    /// Re-stamps the command held if the heartbeat is due: it tells a driver that this arbiter
    /// still runs.
    fn restamp_if_due(
        &mut self,
        publication: &mut Publication<ResourceCommand>,
    ) -> Result<(), BusError> {
        if self.heartbeat_due_in().is_some_and(|due| due.is_zero()) {
            self.restamp(publication, wall_ns())?;
        }
        Ok(())
    }

    fn write(
        &mut self,
        publication: &mut Publication<ResourceCommand>,
        allocation: &Allocation,
        cycle: u64,
        stamp_ns: u64,
    ) -> Result<(), BusError> {
        let every = allocation.setpoints.iter().all(Option::is_some);
        if every && self.value.setpoints.len() == self.names.len() {
            // The usual cycle: the same resources, new values stored in place.
            for (setpoint, r) in self.value.setpoints.values_mut().zip(&self.order) {
                *setpoint = allocation.setpoints[*r].unwrap_or_default();
            }
        } else {
            // A resource to hold whose position is not known yet has no setpoint: the map is
            // rebuilt while that lasts (until the driver first reports).
            self.value.setpoints = self
                .names
                .iter()
                .zip(&allocation.setpoints)
                .filter_map(|(name, setpoint)| setpoint.map(|s| (name.clone(), s)))
                .collect();
        }
        self.value.cycle = cycle;
        self.restamp(publication, stamp_ns)
    }

    /// Writes the command held, stamped `stamp_ns` (the heartbeat, and the end of `write`).
    fn restamp(
        &mut self,
        publication: &mut Publication<ResourceCommand>,
        stamp_ns: u64,
    ) -> Result<(), BusError> {
        self.value.stamp_ns = stamp_ns;
        publication.write(&self.value)?;
        self.written = Instant::now();
        Ok(())
    }
}

/// `names` with each name at its first place only.
fn distinct(names: &[String]) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    names.iter().filter(|n| seen.insert(*n)).cloned().collect()
}

fn memory_block(
    config: &ArbiterConfig,
    cycle: u64,
    stamp_ns: u64,
    decision: &Decision,
    sessions: BTreeMap<String, u64>,
    state: &BTreeMap<String, f64>,
) -> ArbiterBlock {
    let resources = config
        .resources
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                ResourceFeedback {
                    state: state.get(&r.name).copied(),
                    limits: r.limits,
                    owner: decision.owners.get(&r.name).cloned().flatten(),
                    command: decision.setpoints.get(&r.name).copied(),
                },
            )
        })
        .collect();
    ArbiterBlock {
        name: config.name.clone(),
        cycle,
        stamp_ns,
        resources,
        owners: decision.owners.clone(),
        outcomes: decision.outcomes.clone(),
        sessions,
    }
}

/// One log line when a resource to hold gets no setpoint because it was measured outside its
/// limits (a misplaced limit, a driver that reports another unit, a glitched reading): the
/// driver keeps it where it is, unowned, neither moved into them nor sent out of range.
fn warn_held_outside_limits(
    arbiter: &str,
    config: &ArbiterConfig,
    previous: Option<&Decision>,
    decision: &Decision,
    state: &BTreeMap<String, f64>,
) {
    for spec in &config.resources {
        let Some(measured) = state.get(&spec.name).copied().filter(|v| v.is_finite()) else {
            continue;
        };
        let outside = |d: &Decision| {
            d.holding.contains(&spec.name)
                && !d.setpoints.contains_key(&spec.name)
                && spec.limits.clamp(measured) != measured
        };
        if outside(decision) && !previous.is_some_and(outside) {
            tracing::warn!(
                "{arbiter}/{}: measured at {measured}, outside its limits {}, with nobody \
                 owning it: no setpoint sent, the driver keeps it where it is",
                spec.name,
                crate::config::limits_text(&spec.limits)
            );
        }
    }
}

/// One log line per ownership change. `unfollowed`: why a controller without an outcome is
/// followed no more; `gone`: where a controller's writer is gone, if it is (`Some(None)`: on
/// this computer; else an `expired` block ran out of time to live).
fn log_changes(
    arbiter: &str,
    previous: Option<&Decision>,
    decision: &Decision,
    unfollowed: &str,
    gone: impl Fn(&str) -> Option<Option<String>>,
) {
    for (resource, owner) in &decision.owners {
        let before = previous
            .and_then(|p| p.owners.get(resource))
            .cloned()
            .flatten();
        if before.as_ref() != owner.as_ref() {
            // Why the owner before lost it, from its outcome now.
            let why = before.as_deref().map_or(String::new(), |b| {
                match (decision.outcomes.get(b), gone(b)) {
                    (Some(Outcome::Expired), Some(None)) => {
                        format!(" ({b}'s process is gone: its block counts no more)")
                    }
                    (Some(Outcome::Expired), Some(Some(host))) => format!(
                        " ({b}'s writer on host '{host}' is gone: its process ended, or that \
                         computer is cut off)"
                    ),
                    (Some(Outcome::Expired), None) => {
                        format!(" ({b}'s block expired: not refreshed within its time to live)")
                    }
                    (None, _) => format!(" ({b} is no longer followed: {unfollowed})"),
                    (Some(outcome), _) => format!(" ({b}'s outcome now: {})", outcome.as_str()),
                }
            });
            tracing::info!(
                "{arbiter}/{resource}: {} -> {}{why}",
                before.as_deref().unwrap_or("(safe)"),
                owner.as_deref().unwrap_or("(safe)")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Limits, Outcome};

    /// The bound holds for the largest block an arbiter of many long-named resources can
    /// publish: every resource owned by a controller of the longest name, every controller it
    /// follows with an outcome.
    #[test]
    fn the_memory_block_never_outgrows_its_slot() {
        let resources: String = (0..430)
            .map(|i| format!("[[resources]]\nname = \"joint{i:04}{}\"\n", "x".repeat(55)))
            .collect();
        let config =
            ArbiterConfig::parse(&format!("name = \"{}\"\n{resources}", "a".repeat(64))).unwrap();
        let longest = |i: usize| format!("{i:03}{}", "c".repeat(bus::names::MAX_NAME_LEN - 3));
        let block = ArbiterBlock {
            name: config.name.clone(),
            cycle: u64::MAX,
            stamp_ns: u64::MAX,
            resources: config
                .resources
                .iter()
                .map(|r| {
                    let feedback = ResourceFeedback {
                        state: Some(1.0),
                        limits: Limits { min: 0.0, max: 1.0 },
                        owner: Some(longest(0)),
                        command: Some(1.0),
                    };
                    (r.name.clone(), feedback)
                })
                .collect(),
            owners: config
                .resources
                .iter()
                .map(|r| (r.name.clone(), Some(longest(0))))
                .collect(),
            outcomes: (0..MAX_CONTROLLERS)
                .map(|i| (longest(i), Outcome::Partial))
                .collect(),
            sessions: (0..MAX_CONTROLLERS)
                .map(|i| (longest(i), u64::MAX))
                .collect(),
        };
        let mut bytes = Vec::new();
        bus::codec::encode_into(&block, &mut bytes).unwrap();
        assert!(
            bytes.len() > BLOCK_CAPACITY,
            "the case is big enough to matter"
        );
        assert!(
            bytes.len() <= feedback_capacity(&config),
            "{} bytes",
            bytes.len()
        );
        let command = ResourceCommand {
            arbiter: config.name.clone(),
            cycle: 1,
            stamp_ns: 1,
            heartbeat_ms: 100,
            setpoints: config
                .resources
                .iter()
                .map(|r| (r.name.clone(), 1.0))
                .collect(),
        };
        bus::codec::encode_into(&command, &mut bytes).unwrap();
        assert!(
            bytes.len() <= command_capacity(&config),
            "{} bytes",
            bytes.len()
        );
    }
}
