//! The robot-controller library for applications: a `RobotController` publishes the
//! application's memory block (status, commands per resource, time stamp, time to live) on
//! `/robot/controller/<name>`, keeps it fresh from a background thread while the application
//! lives, learns the arbiters and their resources from the bus, and reads back per arbiter what
//! it owns and its outcome, so that the application knows when it has lost a resource. Dropping
//! it releases every resource at once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arbiter::protocol::{
    arbiter_slot, controller_slot, is_valid_name, now_ns, ArbiterBlock, ControllerBlock,
    ManagerConfig, Outcome, Status, MANAGER_SLOT,
};
use bus::{Bus, BusError, Member, Publication, Serde, SubscriptionGroup};
use crossbeam_channel::{bounded, Sender};
use thiserror::Error;

/// Default time to live of a block: how long the arbiters honour it without a refresh.
pub const DEFAULT_TTL: Duration = Duration::from_millis(200);

#[derive(Debug, Error)]
pub enum ControllerError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("invalid controller name {0:?}: {rule}", rule = arbiter::protocol::NAME_RULE)]
    Name(String),
    #[error("invalid resource {0:?}: resources are named <arbiter>/<resource>, e.g. arm/shoulder")]
    ResourceName(String),
    #[error("unknown resource {resource}: arbiter {arbiter} has {available}")]
    UnknownResource {
        resource: String,
        arbiter: String,
        available: String,
    },
    #[error("unknown arbiter in {resource}: the robot manager lists {available}")]
    UnknownArbiter { resource: String, available: String },
    #[error("time to live must be at least 10 ms, got {0:?}")]
    Ttl(Duration),
}

/// What one arbiter did with this controller's request, as last read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feedback {
    pub arbiter: String,
    /// `None` until the arbiter has seen the block.
    pub outcome: Option<Outcome>,
    /// Resources of this arbiter the controller owns now.
    pub owned: Vec<String>,
}

struct Shared {
    publication: Publication<ControllerBlock>,
    block: ControllerBlock,
    /// Nothing is written (or refreshed) before the application's first `publish`, so the
    /// arbiters never see a half-configured controller.
    published: bool,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The arbiters' feedback slots, rebuilt when the manager's arbiter list changes.
struct Watched {
    group: SubscriptionGroup,
    manager: Member<ManagerConfig, Serde>,
    arbiters: Vec<(String, Member<ArbiterBlock, Serde>)>,
}

pub struct RobotController {
    bus: Bus,
    name: String,
    shared: Arc<Mutex<Shared>>,
    stop: Option<Sender<()>>,
    refresher: Option<std::thread::JoinHandle<()>>,
    watched: Watched,
}

impl RobotController {
    /// A controller named `name` with the default time to live.
    pub fn new(bus: &Bus, name: &str, status: Status) -> Result<RobotController, ControllerError> {
        Self::with_ttl(bus, name, status, DEFAULT_TTL)
    }

    pub fn with_ttl(
        bus: &Bus,
        name: &str,
        status: Status,
        ttl: Duration,
    ) -> Result<RobotController, ControllerError> {
        if !is_valid_name(name) {
            return Err(ControllerError::Name(name.to_owned()));
        }
        if ttl < Duration::from_millis(10) {
            return Err(ControllerError::Ttl(ttl));
        }
        let publication = bus
            .publication(&controller_slot(name))?
            .capacity(arbiter::process::BLOCK_CAPACITY)
            .create()?;
        let block = ControllerBlock {
            name: name.to_owned(),
            status,
            commands: BTreeMap::new(),
            stamp_ns: now_ns(),
            ttl_ms: ttl.as_millis() as u64,
        };
        let shared = Arc::new(Mutex::new(Shared {
            publication,
            block,
            published: false,
        }));
        let (stop, stopped) = bounded::<()>(1);
        let last_refresh = Arc::new(AtomicU64::new(now_ns()));
        let refresher = {
            let shared = Arc::clone(&shared);
            let last_refresh = Arc::clone(&last_refresh);
            // Refresh three times per time to live, so that one late refresh never expires it.
            let period = ttl / 3;
            std::thread::Builder::new()
                .name("baton-controller-refresh".into())
                .spawn(move || {
                    while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                        stopped.recv_timeout(period)
                    {
                        let mut s = lock(&shared);
                        if !s.published {
                            last_refresh.store(now_ns(), Ordering::Relaxed);
                            continue;
                        }
                        let Shared {
                            publication, block, ..
                        } = &mut *s;
                        block.stamp_ns = now_ns();
                        match publication.write(block) {
                            Ok(()) => last_refresh.store(block.stamp_ns, Ordering::Relaxed),
                            Err(e) => tracing::warn!("refreshing controller block: {e}"),
                        }
                    }
                })
                .map_err(|e| BusError::Io {
                    context: "starting the refresh thread".into(),
                    message: e.to_string(),
                })?
        };
        // Under systemd: ready once the block is out, and the watchdog fed for as long as the
        // refresher keeps the block fresh.
        let refreshed = Arc::clone(&last_refresh);
        daemon::start_watchdog(move || {
            now_ns().saturating_sub(refreshed.load(Ordering::Relaxed)) < 3 * ttl.as_nanos() as u64
        });
        let watched = watch(bus, &[])?;
        let controller = RobotController {
            bus: bus.clone(),
            name: name.to_owned(),
            shared,
            stop: Some(stop),
            refresher: Some(refresher),
            watched,
        };
        Ok(controller)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the command for `resource` (`<arbiter>/<resource>`). Publish with `publish`. A
    /// resource that a known arbiter does not have is an error; while no arbiter is known yet
    /// (start-up in any order) the command is accepted.
    pub fn set(&mut self, resource: &str, value: f64) -> Result<(), ControllerError> {
        self.check(resource)?;
        lock(&self.shared)
            .block
            .commands
            .insert(resource.to_owned(), value);
        Ok(())
    }

    /// Stops commanding `resource` (releases it at the next publish).
    pub fn clear(&mut self, resource: &str) {
        lock(&self.shared).block.commands.remove(resource);
    }

    /// Stops commanding everything (releases all at the next publish).
    pub fn clear_all(&mut self) {
        lock(&self.shared).block.commands.clear();
    }

    pub fn set_status(&mut self, status: Status) {
        lock(&self.shared).block.status = status;
    }

    /// Publishes the block now, freshly stamped. Until the first call nothing is on the bus;
    /// from then on a background thread keeps the block fresh.
    pub fn publish(&mut self) -> Result<(), ControllerError> {
        let mut s = lock(&self.shared);
        let Shared {
            publication, block, ..
        } = &mut *s;
        block.stamp_ns = now_ns();
        publication.write(block)?;
        if !std::mem::replace(&mut s.published, true) {
            daemon::ready(&format!("robot controller {} publishing", self.name));
        }
        Ok(())
    }

    /// The commands currently set.
    pub fn commands(&self) -> BTreeMap<String, f64> {
        lock(&self.shared).block.commands.clone()
    }

    /// Checks every command against the arbiters known now.
    pub fn validate(&mut self) -> Result<(), ControllerError> {
        self.refresh()?;
        for resource in self.commands().keys() {
            self.check(resource)?;
        }
        Ok(())
    }

    fn check(&self, resource: &str) -> Result<(), ControllerError> {
        let Some((arbiter, name)) = resource.split_once('/') else {
            return Err(ControllerError::ResourceName(resource.to_owned()));
        };
        if !is_valid_name(arbiter) || !is_valid_name(name) {
            return Err(ControllerError::ResourceName(resource.to_owned()));
        }
        let known = self.arbiters();
        if let Some(resources) = known.get(arbiter) {
            if !resources.iter().any(|r| r == name) {
                return Err(ControllerError::UnknownResource {
                    resource: resource.to_owned(),
                    arbiter: arbiter.to_owned(),
                    available: resources.join(", "),
                });
            }
        } else if let Some(manager) = self.watched.group.get(self.watched.manager).value() {
            if !manager.arbiters.iter().any(|a| a == arbiter) {
                return Err(ControllerError::UnknownArbiter {
                    resource: resource.to_owned(),
                    available: manager.arbiters.join(", "),
                });
            }
        }
        Ok(())
    }

    /// The arbiters whose blocks are on the bus, with their resources.
    pub fn arbiters(&self) -> BTreeMap<String, Vec<String>> {
        self.watched
            .arbiters
            .iter()
            .filter_map(|(name, m)| {
                let block = self.watched.group.get(*m).value()?;
                Some((name.clone(), block.resources.keys().cloned().collect()))
            })
            .collect()
    }

    /// Pulls the manager config and the arbiters' blocks. `true` if anything changed.
    pub fn refresh(&mut self) -> Result<bool, ControllerError> {
        let changed = self.watched.group.update_all()?;
        self.follow_manager(&changed)?;
        Ok(!changed.is_empty())
    }

    /// Waits until the manager config or an arbiter's block changes (`true`) or `timeout`.
    /// After a wake-up only the block that woke it is pulled; blocks that changed at the same
    /// moment come with the next call, which then returns at once (`refresh` pulls them all).
    pub fn wait_feedback(&mut self, timeout: Duration) -> Result<bool, ControllerError> {
        let changed = self.watched.group.wait_any(timeout)?;
        self.follow_manager(&changed)?;
        Ok(!changed.is_empty())
    }

    fn follow_manager(&mut self, changed: &[usize]) -> Result<(), ControllerError> {
        if !changed.contains(&self.watched.manager.index()) {
            return Ok(());
        }
        let listed = self
            .watched
            .group
            .get(self.watched.manager)
            .value()
            .map(|m| m.arbiters.clone())
            .unwrap_or_default();
        let current: Vec<String> = self
            .watched
            .arbiters
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        if listed != current {
            self.watched = watch(&self.bus, &listed)?;
            self.watched.group.update_all()?;
        }
        Ok(())
    }

    /// Per arbiter: this controller's outcome and the resources it owns, as last pulled.
    pub fn feedback(&self) -> Vec<Feedback> {
        self.watched
            .arbiters
            .iter()
            .map(|(arbiter, m)| {
                let block = self.watched.group.get(*m).value();
                Feedback {
                    arbiter: arbiter.clone(),
                    outcome: block.and_then(|b| b.outcomes.get(&self.name).copied()),
                    owned: block
                        .map(|b| {
                            b.owners
                                .iter()
                                .filter(|(_, o)| o.as_deref() == Some(self.name.as_str()))
                                .map(|(r, _)| r.clone())
                                .collect()
                        })
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Releases every resource now (the arbiters see an empty command set at once).
    pub fn release(&mut self) -> Result<(), ControllerError> {
        self.clear_all();
        self.publish()
    }
}

fn watch(bus: &Bus, arbiters: &[String]) -> Result<Watched, BusError> {
    let mut group = SubscriptionGroup::new();
    let manager = group.add(bus.subscribe::<ManagerConfig>(MANAGER_SLOT)?);
    let mut members = Vec::new();
    for a in arbiters {
        members.push((
            a.clone(),
            group.add(bus.subscribe::<ArbiterBlock>(&arbiter_slot(a))?),
        ));
    }
    Ok(Watched {
        group,
        manager,
        arbiters: members,
    })
}

impl Drop for RobotController {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.refresher.take() {
            let _ = t.join();
        }
        // Release at once rather than letting the time to live run out.
        if !lock(&self.shared).published {
            return;
        }
        if let Err(e) = self.release() {
            tracing::warn!("releasing controller {}: {e}", self.name);
        }
    }
}
