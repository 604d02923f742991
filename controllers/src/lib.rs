//! The robot-controller library for applications: a `RobotController` publishes the
//! application's memory block (status, commands per resource, time stamp, time to live) on
//! `/robot/controller/<name>`, keeps it fresh from a background thread while the application
//! lives, learns the arbiters and their resources from the bus, and reads back per arbiter what
//! it owns and its outcome, so that the application knows when it has lost a resource. Dropping
//! it releases every resource at once.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arbiter::protocol::{controller_slot, is_valid_name, now_ns, ControllerBlock};
use bus::{Bus, BusError};
use thiserror::Error;

mod refresh;
mod watched;
use refresh::{lock, Refresher, Shared};
use watched::Watched;

/// The protocol types an application names: re-exported so that it needs no `arbiter`
/// dependency (it needs `bus` for the `Bus` a controller is made on).
pub use arbiter::protocol::{Outcome, Status};

/// Default time to live of a block: how long the arbiters honour it without a refresh. The
/// library refreshes it while the process lives, whether or not the application's own loop
/// runs; `RobotController::set_publish_deadline` makes it stop when the application stops
/// publishing.
pub const DEFAULT_TTL: Duration = Duration::from_millis(200);

#[derive(Debug, Error)]
pub enum ControllerError {
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("invalid controller name {0:?}: {rule}", rule = arbiter::protocol::NAME_RULE)]
    Name(String),
    #[error(
        "invalid resource {0:?}: resources are named <arbiter>/<resource>, e.g. arm/shoulder; \
         each part: {rule}",
        rule = arbiter::protocol::NAME_RULE
    )]
    ResourceName(String),
    #[error("unknown resource {resource}: arbiter {arbiter} has {available}")]
    UnknownResource {
        resource: String,
        arbiter: String,
        available: String,
    },
    #[error("unknown arbiter in {resource}: the robot manager lists {available}")]
    UnknownArbiter { resource: String, available: String },
    #[error("time to live must be from 10 ms to one hour, got {0:?}")]
    Ttl(Duration),
    #[error("command for {resource} must be a finite number, got {value}")]
    NotFinite { resource: String, value: f64 },
    #[error(
        "the controller block takes {size} bytes, more than the {capacity} a block holds: give \
         fewer commands or shorter names"
    )]
    BlockTooLarge { size: usize, capacity: usize },
    #[error("controller name {name:?} is taken: {}", name_holder(name, *.pid))]
    NameTaken { name: String, pid: u32 },
}

/// Who holds a controller's name (`ControllerError::NameTaken`), and what to do about it.
fn name_holder(name: &str, pid: u32) -> String {
    if pid == std::process::id() {
        format!(
            "another RobotController of this process (pid {pid}) publishes \
             /robot/controller/{name}: drop it before making a new one of that name"
        )
    } else {
        format!(
            "{} publishes /robot/controller/{name} (another robot controller of that name, as a \
             rule); give each controller a name of its own",
            bus::error::publisher(pid)
        )
    }
}

impl ControllerError {
    /// An error of the controller's own block, said in the controller's terms: a second
    /// publisher of the block is a second controller of the name, a value too large a block
    /// with too many commands.
    fn of_block(controller: &str, e: BusError) -> ControllerError {
        match e {
            BusError::AlreadyPublished { pid, .. } => ControllerError::NameTaken {
                name: controller.to_owned(),
                pid,
            },
            BusError::TooLarge { size, capacity, .. } => {
                ControllerError::BlockTooLarge { size, capacity }
            }
            e => e.into(),
        }
    }
}

/// `resource` (`<arbiter>/<resource>`, each part a valid name) as its arbiter and resource
/// names; `ControllerError::ResourceName` otherwise.
pub fn split_resource(resource: &str) -> Result<(&str, &str), ControllerError> {
    resource
        .split_once('/')
        .filter(|(arbiter, name)| is_valid_name(arbiter) && is_valid_name(name))
        .ok_or_else(|| ControllerError::ResourceName(resource.to_owned()))
}

/// What one arbiter did with this controller's request, as last read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feedback {
    pub arbiter: String,
    /// `None` until the arbiter has seen the block (and while it does not run, or the robot
    /// manager does not list this controller).
    pub outcome: Option<Outcome>,
    /// Resources of this arbiter the controller owns now, named as the arbiter names them
    /// (`shoulder`, not `arm/shoulder`). None while the arbiter does not respond: what it last
    /// said may hold no more (a driver stops executing a command that is not re-stamped, and an
    /// arbiter cut off by the network gives this controller's resources to others).
    pub owned: Vec<String>,
    /// Of `owned`, those whose command this controller published lies outside the limits its
    /// arbiter states for the resource: the arbiter sends it clamped into them.
    pub clamped: Vec<String>,
    /// Whether the arbiter's process runs (its feedback block has a live writer).
    pub arbiter_running: bool,
    /// The computer the arbiter's block comes from, when another one (`None`: this
    /// computer's, or none yet). An arbiter there that is "not running" may as well be cut off
    /// by the network.
    pub arbiter_host: Option<String>,
    /// Whether it answers: its command is re-stamped as its heartbeat says (`false` for an
    /// arbiter that runs but hangs, e.g. stopped with SIGSTOP, or whose computer the network
    /// cut off: its last outcome is kept, but nothing counts as owned). As of the last pull.
    pub arbiter_responding: bool,
    /// Whether the robot manager's order includes this controller (listed in its file, or
    /// placed last as unlisted); an arbiter ignores a controller it does not include. While no
    /// order is on the bus (its slot made anew), whether this arbiter still follows it (it
    /// gives it an outcome, by the order it had).
    pub listed: bool,
    /// Not listed yet, but the manager runs and places unlisted controllers last: it will be
    /// once the manager has seen this controller's slot in the registry's directory (a moment
    /// after `RobotController::new`).
    /// A stopped manager adds no one: its last order stays in force without this controller.
    pub joining: bool,
}

/// What `RobotController::seen` gathers.
#[derive(PartialEq)]
struct Seen {
    feedback: Vec<Feedback>,
    arbiters: BTreeMap<String, Vec<String>>,
    manager_running: bool,
    manager_order_known: bool,
}

/// One application's robot controller: its memory block on `/robot/controller/<name>`, and
/// what the arbiters say back.
///
/// The application stages commands with `set` (resources named `<arbiter>/<resource>`) and
/// its status with `set_status`, makes them visible with `publish`, pulls the arbiters'
/// answers with `refresh` or `wait_feedback`, and reads them with `owns` and `feedback`. A
/// background thread keeps the published block fresh (its time to live) while the process
/// lives; dropping the controller, or `release`, lets every resource go at once.
/// `controllers/examples/wave.rs` (shown in `docs/application.md`) is a whole application.
pub struct RobotController {
    bus: Bus,
    name: String,
    /// The block the application is editing: commands and status, published by `publish`.
    staged: ControllerBlock,
    shared: Arc<Mutex<Shared>>,
    refresher: Refresher,
    watched: Watched,
}

/// A controller's `session` (`ControllerBlock::session`): random, never 0 (a block written by
/// hand).
fn new_session() -> u64 {
    bus::process::random_u64().max(1)
}

/// Longest time to live a block may have.
const MAX_TTL: Duration = Duration::from_millis(arbiter::protocol::MAX_TTL_MS);

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
        if ttl < Duration::from_millis(10) || ttl > MAX_TTL {
            return Err(ControllerError::Ttl(ttl));
        }
        let publication = bus
            .publication(&controller_slot(name))?
            .capacity(arbiter::process::BLOCK_CAPACITY)
            .create()
            .map_err(|e| ControllerError::of_block(name, e))?;
        let block = ControllerBlock {
            name: name.to_owned(),
            status,
            commands: BTreeMap::new(),
            stamp_ns: now_ns(),
            ttl_ms: ttl.as_millis() as u64,
            session: new_session(),
        };
        let shared = Arc::new(Mutex::new(Shared {
            publication,
            block: block.clone(),
            published: false,
            last_publish: Instant::now(),
            publish_deadline: None,
        }));
        let refresher = Refresher::start(&shared, ttl)?;
        let watched = Watched::new(bus, &[])?;
        let controller = RobotController {
            bus: bus.clone(),
            name: name.to_owned(),
            staged: block,
            shared,
            refresher,
            watched,
        };
        Ok(controller)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the command for `resource` (`<arbiter>/<resource>`). Publish with `publish`. A
    /// resource that a known arbiter does not have is an error. The arbiters become known at
    /// the first `refresh`, `wait_feedback` or `validate` that finds the manager's order and
    /// their blocks on the bus: before that (a controller just made, or start-up in any order)
    /// the command is accepted unchecked, and `validate` checks it later. NaN and infinities
    /// are refused: an arbiter would pass them to the hardware, clamped to a limit at best.
    pub fn set(&mut self, resource: &str, value: f64) -> Result<(), ControllerError> {
        self.check(resource)?;
        if !value.is_finite() {
            return Err(ControllerError::NotFinite {
                resource: resource.to_owned(),
                value,
            });
        }
        self.staged.commands.insert(resource.to_owned(), value);
        Ok(())
    }

    /// Stops commanding `resource` (releases it at the next publish).
    pub fn clear(&mut self, resource: &str) {
        self.staged.commands.remove(resource);
    }

    /// Stops commanding everything (releases all at the next publish).
    pub fn clear_all(&mut self) {
        self.staged.commands.clear();
    }

    /// Compromising or not, from the next publish on.
    pub fn set_status(&mut self, status: Status) {
        self.staged.status = status;
    }

    /// Publishes the commands and status set so far, freshly stamped: the arbiters see every change
    /// made since the last publish at once, never part of them. The first publish also pulls
    /// (`refresh`), and its errors are `refresh`'s: the arbiter blocks held then are from before
    /// this controller, and `feedback` reports no outcome from them. It then checks the commands
    /// against the arbiters known (`check_commands`: a command `set` before they were known was
    /// taken unchecked) and publishes nothing if one is wrong: a misspelled resource would
    /// otherwise be denied without a word, for ever. Until the first call nothing is on the bus;
    /// from then on a background thread keeps the published block fresh (re-stamped,
    /// unchanged). Later publishes check nothing: an arbiter's configuration that changes while
    /// the application runs must not stop it from commanding the rest.
    pub fn publish(&mut self) -> Result<(), ControllerError> {
        if !lock(&self.shared).published {
            // The arbiters known now, to check the commands against.
            self.refresh()?;
            self.check_commands()?;
        }
        let mut s = lock(&self.shared);
        let Shared {
            publication, block, ..
        } = &mut *s;
        // The block the refresher re-stamps becomes this one only once it is on the bus: a
        // publish refused (too large) leaves the last one in force, refreshed, rather than
        // one that fails at every refresh and lets what is owned expire.
        self.staged.stamp_ns = now_ns();
        publication
            .write(&self.staged)
            .map_err(|e| ControllerError::of_block(&self.name, e))?;
        block.clone_from(&self.staged);
        s.last_publish = Instant::now();
        if !std::mem::replace(&mut s.published, true) {
            daemon::ready(&format!("robot controller {} publishing", self.name));
        }
        Ok(())
    }

    /// Makes the block's freshness follow the application's loop: with `Some(deadline)`, the
    /// background thread refreshes the block only while `publish` was called within
    /// `deadline`, so an application that hangs (a stuck loop, a deadlock) loses its resources
    /// one time to live later instead of commanding the robot with its last command for as
    /// long as the process lives (and, under systemd, the watchdog stops being fed). A
    /// `publish` after that puts the block out again. `None` (the default): refreshed while the
    /// process lives. Use a deadline a few times the loop's period.
    pub fn set_publish_deadline(&mut self, deadline: Option<Duration>) {
        let mut s = lock(&self.shared);
        s.publish_deadline = deadline;
        s.last_publish = Instant::now();
    }

    /// The commands currently set (published or not).
    pub fn commands(&self) -> BTreeMap<String, f64> {
        self.staged.commands.clone()
    }

    /// Pulls (`refresh`) and checks every command against the arbiters known now.
    pub fn validate(&mut self) -> Result<(), ControllerError> {
        self.refresh()?;
        self.check_commands()
    }

    /// Checks every command against the arbiters known as last pulled: a resource an arbiter
    /// does not have, an arbiter the manager does not list.
    pub fn check_commands(&self) -> Result<(), ControllerError> {
        self.command_errors().into_iter().next().map_or(Ok(()), Err)
    }

    /// `check_commands` for every command: all the errors, not only the first.
    pub fn command_errors(&self) -> Vec<ControllerError> {
        self.staged
            .commands
            .keys()
            .filter_map(|resource| self.check(resource).err())
            .collect()
    }

    fn check(&self, resource: &str) -> Result<(), ControllerError> {
        let (arbiter, name) = split_resource(resource)?;
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
                    available: if manager.arbiters.is_empty() {
                        "no arbiters".to_owned()
                    } else {
                        manager.arbiters.join(", ")
                    },
                });
            }
        }
        Ok(())
    }

    /// The running arbiters (their feedback blocks written by a live process), with their
    /// resources, as last pulled. A block left by an arbiter that has ended says nothing of the
    /// resources it has when it runs again (its config may have changed), also in the moment
    /// between a new arbiter process starting and its first block.
    pub fn arbiters(&self) -> BTreeMap<String, Vec<String>> {
        self.watched
            .arbiters
            .iter()
            .filter_map(|a| {
                let block = self.watched.current_block(a)?;
                Some((a.name.clone(), block.resources.keys().cloned().collect()))
            })
            .collect()
    }

    /// Pulls the manager config and the arbiters' blocks. `true` if what this controller sees
    /// changed: its `feedback`, the `arbiters` and their resources, `manager_running` or
    /// `manager_order_known`. Fails when this controller's block cannot be published (the
    /// registry refused it: another live controller has its name).
    pub fn refresh(&mut self) -> Result<bool, ControllerError> {
        let before = self.seen();
        self.check_publication()?;
        let changed = self.watched.group.update_all()?;
        self.take_in(changed)?;
        Ok(self.seen() != before)
    }

    /// Sleeps until what this controller sees changes (`true`: as for `refresh`) or `timeout`
    /// passes (`false`); an arbiter that stops responding (`Feedback::arbiter_responding`) is
    /// a change, seen when its command turns stale. An arbiter rewrites its block whenever any
    /// controller publishes (it acknowledges the refresh), and those rewrites are pulled
    /// without waking the caller: a loop that publishes and then waits sleeps until its answer
    /// changes, rather than being woken by its own publish. Blocks that changed at the moment
    /// of a wake-up that counts are pulled by the next call (`refresh` pulls them all).
    pub fn wait_feedback(&mut self, timeout: Duration) -> Result<bool, ControllerError> {
        let before = self.seen();
        let deadline = Instant::now().checked_add(timeout);
        loop {
            self.check_publication()?;
            let mut left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            });
            // An arbiter that hangs writes nothing that would wake us: wake when its command
            // turns stale (`arbiter_responding`), just after, to see it so.
            if let Some(stale) = self
                .watched
                .arbiters
                .iter()
                .filter_map(|a| a.command.stale_in())
                .min()
            {
                left = left.min(stale + Duration::from_millis(1));
            }
            let changed = self.watched.group.wait_any(left)?;
            self.take_in(changed)?;
            if self.seen() != before {
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }

    /// After a pull of the group: takes in the members in `changed`.
    fn take_in(&mut self, changed: Vec<usize>) -> Result<(), ControllerError> {
        let changed = self.resubscribe_if_replaced(changed)?;
        self.pulled(&changed);
        self.follow_manager(&changed)
    }

    /// What the application can read of the arbitration now, for `refresh` and `wait_feedback`
    /// to tell a change from a block rewritten with the same answer.
    fn seen(&self) -> Seen {
        Seen {
            feedback: self.feedback(),
            arbiters: self.arbiters(),
            manager_running: self.manager_running(),
            manager_order_known: self.manager_order_known(),
        }
    }

    /// The registry's refusal of this controller's block, if any: started before the registry
    /// ran, two controllers of one name both carry on until it answers, and the one refused
    /// must not go on as if it were arbitrated (the feedback it reads is the other's).
    fn check_publication(&self) -> Result<(), ControllerError> {
        match lock(&self.shared).publication.bind_error() {
            Some(e) => Err(ControllerError::of_block(&self.name, e)),
            None => Ok(()),
        }
    }

    /// After a pull of the group: if the registry made slots followed here anew (their
    /// segments were damaged or removed), subscribes to them again (the group rebuilt at once,
    /// rather than member by member at their next pulls); returns what changed, pulled afresh
    /// then.
    fn resubscribe_if_replaced(&mut self, changed: Vec<usize>) -> Result<Vec<usize>, BusError> {
        let replaced =
            self.watched.commands_replaced() || self.watched.group.any_replaced(&changed);
        if !replaced {
            return Ok(changed);
        }
        tracing::warn!(
            "controller {}: slots it follows were made anew; subscribing again",
            self.name
        );
        // Nothing is carried over from the old slots: the new ones number their values anew.
        let listed = self.watched.listed.clone();
        self.watched = Watched::new(&self.bus, &listed)?;
        self.watched.group.update_all()
    }

    /// After a pull of the group: logs the failures it reported (a slot of another type under
    /// an arbiter's name, a value that does not decode: that arbiter then gives no feedback)
    /// and follows the arbiters' writers and commands.
    fn pulled(&mut self, changed: &[usize]) {
        for &i in changed {
            if let Some(e) = self.watched.group.take_error(i) {
                tracing::warn!("controller {}: arbiter feedback: {e}", self.name);
            }
        }
        self.watched.track_starts();
    }

    fn follow_manager(&mut self, changed: &[usize]) -> Result<(), ControllerError> {
        if !changed.contains(&self.watched.manager.index()) {
            return Ok(());
        }
        // The rebuilt group reads the manager's slot afresh: a list written meanwhile is
        // consumed there and no later wake-up reports it, so follow until the list read is the
        // list watched.
        loop {
            let listed = self
                .watched
                .group
                .get(self.watched.manager)
                .value()
                .map(|m| m.arbiters.clone())
                .unwrap_or_default();
            if listed == self.watched.listed {
                return Ok(());
            }
            self.watched.follow(&self.bus, &listed)?;
            let changed = self.watched.group.update_all()?;
            self.pulled(&changed);
        }
    }

    /// Whether the robot manager's order includes this controller now.
    fn listed(&self) -> bool {
        self.watched
            .group
            .get(self.watched.manager)
            .value()
            .is_some_and(|m| m.controllers.iter().any(|c| c == &self.name))
    }

    /// Whether the robot manager runs (its slot has a live writer), as last pulled. While it
    /// does not, the order it published last stays in force (`manager_order_known`): the
    /// arbiters follow it and `feedback` reports from it, but a stopped manager places no new
    /// unlisted controller (`Feedback::joining` stays `false`).
    pub fn manager_running(&self) -> bool {
        self.watched.group.get(self.watched.manager).writer() == Some(bus::WriterState::Alive)
    }

    /// The computer the robot manager's order comes from, when another one (`None`: this
    /// computer's, or none yet): a manager "not running" there may as well be cut off by the
    /// network.
    pub fn manager_host(&self) -> Option<String> {
        self.origin_of(self.watched.manager)
    }

    /// The computer the value of `member` comes from, when another one.
    fn origin_of<T: 'static, C: bus::Codec<T>>(&self, member: bus::Member<T, C>) -> Option<String> {
        self.watched.group.get(member).meta().and_then(|m| m.origin)
    }

    /// Whether a manager's order is on the bus (also when the manager that wrote it has
    /// stopped: the arbiters keep following it).
    pub fn manager_order_known(&self) -> bool {
        self.watched
            .group
            .get(self.watched.manager)
            .value()
            .is_some()
    }

    /// Whether this controller's block is in place on the bus (the registry has made its slot):
    /// from then on the arbiters of this computer read every publish, also while the registry
    /// is away (restarting); before, nothing this controller publishes reaches anyone.
    pub fn block_in_place(&self) -> bool {
        lock(&self.shared).publication.is_bound()
    }

    /// Whether the manager places controllers it does not list last (`unlisted = "last"`): an
    /// unlisted controller then joins the order once the manager has seen its block.
    fn unlisted_join(&self) -> bool {
        self.watched
            .group
            .get(self.watched.manager)
            .value()
            .is_some_and(|m| m.unlisted == arbiter::protocol::Unlisted::Last)
    }

    /// Whether this controller owns `resource` (named as for `set`: `arm/shoulder`), as last
    /// pulled: the question an application asks most of `feedback`.
    pub fn owns(&self, resource: &str) -> bool {
        let Ok((arbiter, name)) = split_resource(resource) else {
            return false;
        };
        self.feedback()
            .iter()
            .any(|f| f.arbiter == arbiter && f.owned.iter().any(|r| r == name))
    }

    /// Per arbiter: this controller's outcome and the resources it owns, as last pulled.
    pub fn feedback(&self) -> Vec<Feedback> {
        // With no order on the bus (the manager's slot made anew, empty), the arbiters keep
        // following the order they had: what each one's block says is then the only truth,
        // and this controller counts as listed where an arbiter gives it an outcome.
        let order_known = self.manager_order_known();
        let listed = self.listed();
        let joining = !listed && self.unlisted_join() && self.manager_running();
        // Held while the feedback is gathered (briefly: no bus call under it), for the commands
        // as published, which `clamped` compares with the limits the arbiters state.
        let shared = lock(&self.shared);
        // Before the first publish, or while the registry has not bound the block, no arbiter
        // has read it. The session check below tells the same for the blocks that name this
        // controller; this one also leaves out, for that while, the last word of arbiters on
        // a slot the registry has since made anew (bound again at once, as a rule).
        let ours = shared.publication.is_bound() && shared.published;
        let commanded = &shared.block.commands;
        self.watched
            .arbiters
            .iter()
            .map(|a| {
                let arbiter_running =
                    self.watched.group.get(a.block).writer() == Some(bus::WriterState::Alive);
                // A block left by an arbiter that is gone (or by the one before a starting
                // arbiter) says nothing about now. Nor does one decided on a block of this
                // name that another process wrote (one before this, or the blocks this process
                // published are not read yet: the arbiter decided on what it had read).
                let session = self.staged.session;
                let block = self.watched.current_block(a).filter(|b| {
                    ours && (listed || !order_known) && b.sessions.get(&self.name) == Some(&session)
                });
                let outcome = block.and_then(|b| b.outcomes.get(&self.name).copied());
                let responding = arbiter_running && a.command.responding();
                let owned: Vec<String> = block
                    .filter(|_| responding)
                    .map(|b| {
                        b.owners
                            .iter()
                            .filter(|(_, o)| o.as_deref() == Some(self.name.as_str()))
                            .map(|(r, _)| r.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                // By the limits the arbiter states, not by comparing its setpoint with the
                // command: after every publish that changes a command, until the arbiter's
                // next block, the two differ without anything clamped.
                let clamped = owned
                    .iter()
                    .filter(|r| {
                        let limits = block.and_then(|b| b.resources.get(*r)).map(|s| s.limits);
                        let asked = commanded.get(&format!("{}/{r}", a.name));
                        matches!((limits, asked), (Some(l), Some(&c)) if l.clamp(c) != c)
                    })
                    .cloned()
                    .collect();
                Feedback {
                    arbiter: a.name.clone(),
                    arbiter_running,
                    arbiter_host: self.origin_of(a.block),
                    arbiter_responding: responding,
                    listed: listed || (!order_known && outcome.is_some()),
                    joining,
                    outcome,
                    owned,
                    clamped,
                }
            })
            .collect()
    }

    /// Releases every resource now (the arbiters see an empty command set at once). A
    /// controller that has not published yet holds nothing: its commands are cleared and
    /// nothing is put on the bus (`publish` stays its first publish).
    pub fn release(&mut self) -> Result<(), ControllerError> {
        self.clear_all();
        if !lock(&self.shared).published {
            return Ok(());
        }
        self.publish()
    }
}

impl Drop for RobotController {
    fn drop(&mut self) {
        self.refresher.stop();
        // Release at once rather than letting the time to live run out.
        if !lock(&self.shared).published {
            return;
        }
        if let Err(e) = self.release() {
            tracing::warn!("releasing controller {}: {e}", self.name);
        }
    }
}
