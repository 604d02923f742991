//! The arbiter process: follows the manager's controller list, pulls every listed controller's
//! memory block, runs `algorithm::arbitrate` whenever the manager config, a controller block or
//! the resource state changes (or a block reaches its expiry), and publishes the coherent
//! command and its own memory block when anything changed. It sleeps in one `wait_any` over all
//! of those slots: it never polls.

use std::collections::BTreeMap;
use std::time::Duration;

use bus::{Bus, BusError, Member, Publication, Serde, SubscriptionGroup, WriterState};

use crate::algorithm::{arbitrate, Candidate, Decision};
use crate::config::ArbiterConfig;
use crate::protocol::{
    arbiter_slot, command_slot, controller_slot, now_ns, state_slot, ArbiterBlock, ControllerBlock,
    ManagerConfig, ResourceCommand, ResourceFeedback, ResourceState, MANAGER_SLOT,
};

/// Longest sleep when no block is due to expire; a wake-up then only re-runs the cycle.
const IDLE_WAIT: Duration = Duration::from_secs(3600);
/// Controller blocks grow with the number of commands; this bounds a block at 64 KiB.
pub const BLOCK_CAPACITY: usize = 64 * 1024;

/// The slots one arbiter watches, rebuilt when the manager's controller list changes.
struct Watched {
    group: SubscriptionGroup,
    manager: Member<ManagerConfig, Serde>,
    state: Member<ResourceState, Serde>,
    controllers: Vec<(String, Member<ControllerBlock, Serde>)>,
}

impl Watched {
    fn new(bus: &Bus, arbiter: &str, controllers: &[String]) -> Result<Watched, BusError> {
        let mut group = SubscriptionGroup::new();
        let manager = group.add(bus.subscribe::<ManagerConfig>(MANAGER_SLOT)?);
        let state = group.add(bus.subscribe::<ResourceState>(&state_slot(arbiter))?);
        let mut members = Vec::new();
        for name in controllers {
            let sub = bus.subscribe::<ControllerBlock>(&controller_slot(name))?;
            members.push((name.clone(), group.add(sub)));
        }
        Ok(Watched {
            group,
            manager,
            state,
            controllers: members,
        })
    }

    fn controller_names(&self) -> Vec<String> {
        self.controllers.iter().map(|(n, _)| n.clone()).collect()
    }
}

/// Runs the arbiter until an error. `health` is marked busy during each cycle (for the systemd
/// watchdog); `on_cycle` is called after each published cycle.
pub fn run(
    bus: &Bus,
    config: &ArbiterConfig,
    health: &daemon::Health,
    mut on_cycle: impl FnMut(&ArbiterBlock),
) -> Result<(), BusError> {
    let name = config.name.as_str();
    let mut block_pub: Publication<ArbiterBlock> = bus
        .publication(&arbiter_slot(name))?
        .capacity(BLOCK_CAPACITY)
        .create()?;
    let mut command_pub: Publication<ResourceCommand> = bus
        .publication(&command_slot(name))?
        .capacity(BLOCK_CAPACITY)
        .create()?;
    let mut watched = Watched::new(bus, name, &[])?;
    let mut previous: Option<Decision> = None;
    let mut state: BTreeMap<String, f64> = BTreeMap::new();
    let mut cycle = 0u64;
    let mut first = true;
    loop {
        let timeout = previous
            .as_ref()
            .and_then(|d| d.next_expiry_ns)
            .map_or(IDLE_WAIT, |t| {
                // Wake just after the expiry instant so that the block counts as expired.
                Duration::from_nanos(t.saturating_sub(now_ns())) + Duration::from_millis(1)
            });
        let changed = if first {
            watched.group.update_all()?
        } else {
            watched.group.wait_any(timeout)?
        };
        health.begin();
        if changed.contains(&watched.manager.index()) {
            // The rebuilt group reads the manager's slot afresh: if the manager wrote again
            // since the value just followed, that newer list is consumed here and no later
            // wake-up reports it, so follow it until the list read is the list watched.
            while let Some(listed) = watched
                .group
                .get(watched.manager)
                .value()
                .map(|m| m.controllers.clone())
            {
                if listed == watched.controller_names() {
                    break;
                }
                tracing::info!("{name}: controllers in priority order: {listed:?}");
                watched = Watched::new(bus, name, &listed)?;
                watched.group.update_all()?;
            }
        }
        let state_changed = changed.contains(&watched.state.index());
        if let Some(s) = watched.group.get(watched.state).value() {
            state.clone_from(&s.values);
        }
        // Borrowed straight from the subscriptions: no block is copied per cycle.
        let candidates: Vec<Candidate> = watched
            .controllers
            .iter()
            .map(|(n, m)| {
                let sub = watched.group.get(*m);
                Candidate {
                    name: n,
                    block: sub.value(),
                    writer_alive: sub.writer() == Some(WriterState::Alive),
                }
            })
            .collect();
        let decision = arbitrate(
            name,
            &config.resources,
            &candidates,
            &state,
            previous.as_ref(),
            now_ns(),
        );
        let decided_changed = previous.as_ref().is_none_or(|p| {
            p.owners != decision.owners
                || p.setpoints != decision.setpoints
                || p.outcomes != decision.outcomes
        });
        if decided_changed || state_changed || first {
            cycle += 1;
            let stamp_ns = now_ns();
            if decided_changed || first {
                log_changes(name, previous.as_ref(), &decision);
                command_pub.write(&ResourceCommand {
                    arbiter: name.to_owned(),
                    cycle,
                    stamp_ns,
                    setpoints: decision.setpoints.clone(),
                })?;
            }
            let block = memory_block(config, cycle, stamp_ns, &decision, &state);
            block_pub.write(&block)?;
            on_cycle(&block);
        }
        previous = Some(decision);
        first = false;
        health.end();
    }
}

fn memory_block(
    config: &ArbiterConfig,
    cycle: u64,
    stamp_ns: u64,
    decision: &Decision,
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
                    command: decision.setpoints.get(&r.name).copied().unwrap_or(0.0),
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
    }
}

/// One log line per ownership change.
fn log_changes(arbiter: &str, previous: Option<&Decision>, decision: &Decision) {
    for (resource, owner) in &decision.owners {
        let before = previous
            .and_then(|p| p.owners.get(resource))
            .cloned()
            .flatten();
        if before.as_ref() != owner.as_ref() {
            tracing::info!(
                "{arbiter}/{resource}: {} -> {}",
                before.as_deref().unwrap_or("(safe)"),
                owner.as_deref().unwrap_or("(safe)")
            );
        }
    }
}
