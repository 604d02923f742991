//! What a robot controller follows on the bus: the robot manager's order and, per arbiter the
//! manager lists, its feedback block and its coherent command; and which of those blocks speak
//! of now (a block left by an ended arbiter, or by the process before a starting one, says
//! nothing of now; which outcome is this controller's own, `ArbiterBlock::sessions` says).

use std::time::{Duration, Instant};

use arbiter::protocol::{
    arbiter_slot, command_slot, ArbiterBlock, ManagerConfig, ResourceCommand, MANAGER_SLOT,
};
use bus::{Bus, BusError, Member, Serde, SubscriptionGroup, WriterState};

/// The manager's slot and the arbiters' slots, rebuilt when the manager's arbiter list
/// changes.
pub(crate) struct Watched {
    pub group: SubscriptionGroup,
    pub manager: Member<ManagerConfig, Serde>,
    /// The manager's arbiter list this was built for.
    pub listed: Vec<String>,
    /// The arbiters followed (those of `listed` whose slot could be subscribed to).
    pub arbiters: Vec<FollowedArbiter>,
}

/// One arbiter followed, and what is known of which of its blocks is current.
pub(crate) struct FollowedArbiter {
    pub name: String,
    pub block: Member<ArbiterBlock, Serde>,
    /// Whether its writer was alive at the last pull (`None` before the first), and the
    /// sequence of the block held then.
    was_alive: Option<bool>,
    held: u64,
    /// While its process has started but not yet written: the sequence of the block held,
    /// which an arbiter before it left (its resources and outcomes may be those of another
    /// config).
    starting: Option<u64>,
    pub command: CommandWatch,
}

/// An arbiter's coherent command, pulled with every pull of the group (not waited on: it
/// changes at every heartbeat), to tell an arbiter that hangs from one with nothing to say.
pub(crate) struct CommandWatch {
    subscription: Option<bus::Subscription<ResourceCommand>>,
    /// When the newest command was pulled, and how old it was then (since it was written).
    changed_at: Option<(Instant, Duration)>,
    heartbeat_ms: u64,
    /// The registry made the command's slot anew (reported once by the subscription): the
    /// library subscribes again.
    replaced: bool,
}

/// An arbiter's command older than five heartbeats, and at least this, means it hangs.
const STALE_AT_LEAST: Duration = Duration::from_millis(500);

impl CommandWatch {
    fn pull(&mut self) {
        let Some(sub) = self.subscription.as_mut() else {
            return;
        };
        match sub.update() {
            Ok(true) => {
                // Dated by when the arbiter wrote it, not by this pull: an application that
                // pulls seldom would otherwise take a command written just before the arbiter
                // hung for a fresh one. (A stamp ahead of this clock counts as now; the
                // arbiter's expiry assumes the computers' clocks agree, as this does.)
                let age = sub
                    .meta()
                    .and_then(|m| {
                        std::time::SystemTime::now()
                            .duration_since(m.write_time)
                            .ok()
                    })
                    .unwrap_or_default();
                self.changed_at = Some((Instant::now(), age));
                self.heartbeat_ms = sub.value().map_or(0, |c| c.heartbeat_ms);
            }
            Err(BusError::Replaced { .. }) => self.replaced = true,
            _ => {}
        }
    }

    /// Whether the command was re-stamped as its heartbeat promises (with room for a late
    /// one): `true` when the arbiter sends no heartbeat, or no command was seen yet.
    pub fn responding(&self) -> bool {
        self.heartbeat_ms == 0 || self.changed_at.is_none() || self.stale_in().is_some()
    }

    /// How long until `responding` turns false unless a newer command is pulled; `None` when
    /// it cannot (no heartbeat, no command seen yet) or already has. Nothing is written when an
    /// arbiter hangs, so a wait for news must end by itself then.
    pub fn stale_in(&self) -> Option<Duration> {
        if self.heartbeat_ms == 0 {
            return None;
        }
        let (pulled, age) = self.changed_at?;
        let limit = Duration::from_millis(self.heartbeat_ms.saturating_mul(5)).max(STALE_AT_LEAST);
        limit
            .checked_sub(pulled.elapsed().saturating_add(age))
            .filter(|left| !left.is_zero())
    }
}

impl FollowedArbiter {
    /// Follows arbiter `a`'s block in `group` and its command. A slot of another type under an
    /// arbiter's name (a stray process, an older build) gives no feedback rather than stopping
    /// the application.
    fn subscribe(bus: &Bus, a: &str, group: &mut SubscriptionGroup) -> Option<FollowedArbiter> {
        match bus.subscribe::<ArbiterBlock>(&arbiter_slot(a)) {
            Ok(sub) => Some(FollowedArbiter {
                name: a.to_owned(),
                block: group.add(sub),
                was_alive: None,
                held: 0,
                starting: None,
                command: CommandWatch {
                    subscription: match bus.subscribe::<ResourceCommand>(&command_slot(a)) {
                        Ok(command) => Some(command),
                        Err(e) => {
                            tracing::warn!(
                                "not following arbiter {a}'s command, so whether it responds \
                                 is not known: {e}"
                            );
                            None
                        }
                    },
                    changed_at: None,
                    heartbeat_ms: 0,
                    replaced: false,
                },
            }),
            Err(e) => {
                tracing::warn!("no feedback from arbiter {a}: {e}");
                None
            }
        }
    }
}

impl Watched {
    /// Follows the manager's slot and the slots of `arbiters`.
    pub fn new(bus: &Bus, arbiters: &[String]) -> Result<Watched, BusError> {
        let mut group = SubscriptionGroup::new();
        let manager = group.add(bus.subscribe::<ManagerConfig>(MANAGER_SLOT)?);
        if arbiters.len() > arbiter::process::MAX_ARBITERS {
            tracing::warn!(
                "the robot manager lists {} arbiters; following the first {} (no feedback from \
                 the rest)",
                arbiters.len(),
                arbiter::process::MAX_ARBITERS
            );
        }
        let followed = arbiters
            .iter()
            .take(arbiter::process::MAX_ARBITERS)
            .filter_map(|a| FollowedArbiter::subscribe(bus, a, &mut group))
            .collect();
        Ok(Watched {
            group,
            manager,
            listed: arbiters.to_vec(),
            arbiters: followed,
        })
    }

    /// Follows `arbiters` from now on. The arbiters followed already keep their subscriptions
    /// and what is known of them, so a new list applies at once, also while no registry runs
    /// to bind new subscriptions (made anew, they would give no feedback until one did); the
    /// others are subscribed to.
    pub fn follow(&mut self, bus: &Bus, arbiters: &[String]) -> Result<(), BusError> {
        let mut released = std::mem::take(&mut self.group).release();
        let mut before = std::mem::take(&mut self.arbiters);
        let mut group = SubscriptionGroup::new();
        let manager = match released.take(self.manager) {
            Some(sub) => sub,
            None => bus.subscribe::<ManagerConfig>(MANAGER_SLOT)?,
        };
        self.manager = group.add(manager);
        for a in arbiters.iter().take(arbiter::process::MAX_ARBITERS) {
            let kept = before
                .iter()
                .position(|b| &b.name == a)
                .map(|i| before.swap_remove(i))
                .and_then(|mut kept| {
                    kept.block = group.add(released.take(kept.block)?);
                    Some(kept)
                });
            let followed = kept.or_else(|| FollowedArbiter::subscribe(bus, a, &mut group));
            if let Some(f) = followed {
                self.arbiters.push(f);
            }
        }
        self.group = group;
        self.listed = arbiters.to_vec();
        Ok(())
    }

    /// Whether the registry made an arbiter's command slot anew under its subscription here.
    pub fn commands_replaced(&self) -> bool {
        self.arbiters.iter().any(|a| a.command.replaced)
    }

    /// Follows the arbiters' writers and commands after a pull (see `starting`).
    pub fn track_starts(&mut self) {
        for a in &mut self.arbiters {
            let sub = self.group.get(a.block);
            let alive = sub.writer() == Some(WriterState::Alive);
            let sequence = sub.sequence().unwrap_or(0);
            a.starting = match (a.was_alive, alive) {
                (_, false) => None,
                // Started: the block held before is its predecessor's. The pull that saw it
                // start may already hold its first block (a writer's start wakes no one, its
                // first write does): that one is the running arbiter's.
                (Some(false), true) => Some(a.held).filter(|s| sequence <= *s),
                _ => a.starting.filter(|s| sequence <= *s),
            };
            a.was_alive = Some(alive);
            a.held = sequence;
            a.command.pull();
        }
    }

    /// `a`'s block, if it is the running arbiter's.
    pub fn current_block(&self, a: &FollowedArbiter) -> Option<&ArbiterBlock> {
        let sub = self.group.get(a.block);
        let running = sub.writer() == Some(WriterState::Alive);
        sub.value().filter(|_| running && a.starting.is_none())
    }
}
