//! `robot-sim`: simulates an arm and a drive base, executing the arbiters' coherent commands and
//! publishing resource state, in place of hardware drivers.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant, UNIX_EPOCH};

use arbiter::clock::{first_read, lives_until, read_now, ReadAt};
use arbiter::protocol::{
    command_slot, is_valid_name, now_ns, state_slot, ResourceCommand, ResourceState, NAME_RULE,
};
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use tools::sim::Robot;

#[derive(Parser)]
#[command(
    name = "robot-sim",
    version = daemon::version(bus::slot::VERSION, None),
    about = "Simulate a 4-joint arm and a differential drive base in place of hardware",
    long_about = "Simulate a 4-joint arm (turret, shoulder, elbow1, elbow2; position setpoints, \
first-order response within limits) and a differential drive base (left, right wheel velocity \
setpoints; pose integrated).\n\nReads /robot/arbiter/<arm>/command and \
/robot/arbiter/<drive>/command, publishes /robot/resource/<arm>/state and \
/robot/resource/<drive>/state whenever the state moves. A command whose arbiter is gone, or \
which its arbiter has not re-stamped within --command-timeout-ms, is not executed: the joints \
hold and the wheels stop until a fresh command comes (the log says when it stops and starts).\n\nExit status: 0 \
when stopped (SIGTERM, SIGINT), 1 on an error of the bus, 64 for a command line that does not \
parse or is out of range (as bus-inspect)."
)]
struct Args {
    /// Name of the arm's arbiter (its `name` in the arbiter's configuration).
    #[arg(long, default_value = "arm", value_parser = arbiter_name)]
    arm: String,
    /// Name of the drive base's arbiter (another arbiter than the arm's).
    #[arg(long, default_value = "drive", value_parser = arbiter_name)]
    drive: String,
    /// Simulation steps per second (0.1 to 1000).
    #[arg(long, default_value_t = 50.0, allow_negative_numbers = true)]
    rate_hz: f64,
    /// A command older than this is not executed (joints hold, wheels stop): its arbiter hangs
    /// (the arbiters re-stamp their commands every heartbeat_ms, 100 ms by default), or its
    /// computer's clock is off. A smaller value than three of the command's own heartbeats is
    /// raised to that for the command; a command of an arbiter without heartbeat (heartbeat_ms
    /// 0) never grows old. 0: commands never grow old.
    #[arg(long, default_value_t = 500, value_parser = daemon::whole_number(0, u64::MAX, "milliseconds"), allow_negative_numbers = true)]
    command_timeout_ms: u64,
    /// Bus domain.
    #[arg(long, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN,
          value_parser = bus::Domain::parse_arg)]
    domain: bus::Domain,
}

/// An arbiter name, by the arbiter's own rule: it becomes one segment of the slot names.
fn arbiter_name(name: &str) -> Result<String, String> {
    if is_valid_name(name) {
        Ok(name.to_owned())
    } else {
        Err(NAME_RULE.to_owned())
    }
}

impl Args {
    /// What clap cannot check alone.
    fn check(self) -> Result<Args, clap::Error> {
        let mut command = Args::command();
        if self.arm == self.drive {
            return Err(command.error(
                ErrorKind::ArgumentConflict,
                format!(
                    "--arm and --drive must name different arbiters (both are '{}'): each \
                     arbiter commands its own resources",
                    self.arm
                ),
            ));
        }
        // At least a step every 10 s: a step period is a Duration, which 1e-20 Hz overflows.
        if !(0.1..=1000.0).contains(&self.rate_hz) {
            return Err(command.error(
                ErrorKind::ValueValidation,
                format!("--rate-hz {}: expected 0.1 <= rate <= 1000", self.rate_hz),
            ));
        }
        Ok(self)
    }
}

fn main() {
    // Its own warnings (a command it passes over) and the bus's (a refusing registry) go to
    // stderr, the journal under systemd.
    daemon::init_logging("info");
    let args = Args::try_parse()
        .and_then(Args::check)
        .unwrap_or_else(|e| daemon::exit_usage(e));
    // Hardware stands still when the simulator stops: nothing to save.
    if let Err(e) = daemon::on_stop(daemon::exit_on_stop("robot-sim")) {
        daemon::exit_on_error("robot-sim", e);
    }
    if let Err(e) = run(&args) {
        daemon::exit_on_error("robot-sim", e);
    }
}

type Command = bus::Member<ResourceCommand, bus::Serde>;

/// One group over both arbiters' commands: at rest the simulator sleeps until one of them (or
/// its arbiter) changes, instead of stepping a robot that does not move. Members: the arm's,
/// then the drive's.
fn follow_commands(
    bus: &bus::Bus,
    args: &Args,
) -> Result<(bus::SubscriptionGroup, Command, Command), bus::BusError> {
    let mut commands = bus::SubscriptionGroup::new();
    let arm = commands.add(bus.subscribe::<ResourceCommand>(&command_slot(&args.arm))?);
    let drive = commands.add(bus.subscribe::<ResourceCommand>(&command_slot(&args.drive))?);
    Ok((commands, arm, drive))
}

fn run(args: &Args) -> Result<(), String> {
    let domain = args.domain.clone();
    let bus = bus::Bus::open(domain).map_err(|e| e.to_string())?;
    let e = |e: bus::BusError| e.to_string();
    let (mut commands, mut arm_cmd, mut drive_cmd) = follow_commands(&bus, args).map_err(e)?;
    let mut arm_state = bus
        .publish::<ResourceState>(&state_slot(&args.arm))
        .map_err(e)?;
    let mut drive_state = bus
        .publish::<ResourceState>(&state_slot(&args.drive))
        .map_err(e)?;
    // Names the slots followed, so that a mistyped arbiter name shows in the log (its
    // command never comes, and nothing else would say so).
    tracing::info!(
        "arm: follows {} (executed once its arbiter writes it), state into {}; drive: follows \
         {}, state into {}",
        command_slot(&args.arm),
        state_slot(&args.arm),
        command_slot(&args.drive),
        state_slot(&args.drive)
    );
    let mut robot = Robot::default();
    let period = Duration::from_secs_f64(1.0 / args.rate_hz);
    let mut last_arm = None;
    let mut last_drive = None;
    let (mut arm_seen, mut drive_seen) = (
        Followed::new("the joints hold"),
        Followed::new("the wheels stop"),
    );
    let mut next = Instant::now();
    let mut first = true;
    let health = daemon::Health::new();
    let watched = std::sync::Arc::clone(&health);
    let _watchdog = daemon::start_watchdog(move || watched.is_healthy());
    loop {
        health.begin();
        // Two simulators started before the registry: the one refused must not run on.
        for state in [&arm_state, &drive_state] {
            if let Some(refused) = state.bind_error() {
                return Err(refused.to_string());
            }
        }
        // A command slot the registry made anew under us: the arbiter's commands go there
        // (its publication goes on in the new slot), never to what we read.
        let replaced = [commands.get(arm_cmd), commands.get(drive_cmd)]
            .into_iter()
            .any(|c| matches!(c.bind_error(), Some(bus::BusError::Replaced { .. })));
        if replaced {
            tracing::warn!("command slots it follows were made anew; subscribing again");
            (commands, arm_cmd, drive_cmd) = follow_commands(&bus, args).map_err(e)?;
        }
        commands.update_all().map_err(e)?;
        for (member, which) in [
            (arm_cmd.index(), &args.arm),
            (drive_cmd.index(), &args.drive),
        ] {
            // A command that cannot be read (it does not decode, or the slot is corrupt) is
            // passed over (the last good one stays); the group keeps its error for us once.
            if let Some(err) = commands.take_error(member) {
                tracing::warn!("{which} command: {err}");
            }
        }
        // Hardware fails safe: a command whose arbiter is gone (its process ended or was
        // killed), or has not re-stamped it for the timeout (it hangs), is not executed any
        // more; joints hold where they are and the wheels stop.
        let empty = Default::default();
        let timeout =
            (args.command_timeout_ms > 0).then(|| Duration::from_millis(args.command_timeout_ms));
        let arm = arm_seen
            .live(commands.get(arm_cmd), timeout, &args.arm)
            .unwrap_or(&empty);
        let drive = drive_seen
            .live(commands.get(drive_cmd), timeout, &args.drive)
            .unwrap_or(&empty);
        robot.step(period.as_secs_f64(), arm, drive);
        let at_rest = robot.at_rest(arm, drive);
        // Publish only when the state moved (1e-5), so that a robot at rest is quiet.
        let publish = |values: BTreeMap<String, f64>,
                       last: &mut Option<BTreeMap<String, f64>>,
                       publication: &mut bus::Publication<ResourceState>|
         -> Result<(), String> {
            let moved = last.as_ref().is_none_or(|l| {
                l.iter()
                    .zip(&values)
                    .any(|((_, a), (_, b))| (a - b).abs() > 1e-5)
            });
            if moved {
                publication
                    .write(&ResourceState {
                        stamp_ns: now_ns(),
                        values: values.clone(),
                    })
                    .map_err(|e| e.to_string())?;
                *last = Some(values);
            }
            Ok(())
        };
        publish(robot.arm_state(), &mut last_arm, &mut arm_state)?;
        publish(robot.drive_state(), &mut last_drive, &mut drive_state)?;
        if std::mem::take(&mut first) {
            daemon::ready("simulating arm and drive");
        }
        health.end();
        if at_rest {
            // Nothing moves until a command, or the arbiter behind it, changes. Until the
            // registry has bound the state slots, wake now and then to see a refusal.
            let bound = arm_state.is_bound() && drive_state.is_bound();
            let rest = if bound {
                Duration::from_secs(3600)
            } else {
                Duration::from_millis(200)
            };
            // A command executed wakes us by its re-stamps; when they stop (its arbiter
            // hangs), wake when it goes stale, to say so.
            let rest = [arm_seen.stale_in, drive_seen.stale_in]
                .into_iter()
                .flatten()
                .fold(rest, Duration::min);
            commands.wait_any(rest).map_err(e)?;
            next = Instant::now();
            continue;
        }
        next += period;
        // After a stall (the process stopped, the machine busy) carry on from now rather than
        // replay the missed steps in a burst.
        let now = Instant::now();
        if next + period < now {
            next = now;
        }
        std::thread::sleep(next.saturating_duration_since(now));
    }
}

/// What the simulator knows of one arbiter's command between steps.
#[derive(Default)]
struct Followed {
    /// The command's sequence when first read, and when (see `live`).
    seen: Option<(u64, ReadAt)>,
    /// Why the last command read was not executed (`None`: it was).
    refused: Option<NotExecuted>,
    /// A command without heartbeat was said (once).
    said_no_heartbeat: bool,
    /// How soon the command executed goes stale unless re-stamped (`None`: none executed, or
    /// it cannot go stale).
    stale_in: Option<Duration>,
    /// What its resources do while no command of it is executed, for the log.
    meanwhile: &'static str,
}

/// Why a command is not executed.
#[derive(Clone, Copy, PartialEq)]
enum NotExecuted {
    /// No command read yet (its arbiter has not written one): the first one read is said.
    NoneYet,
    ArbiterGone,
    Stale,
}

impl Followed {
    fn new(meanwhile: &'static str) -> Followed {
        Followed {
            refused: Some(NotExecuted::NoneYet),
            meanwhile,
            ..Followed::default()
        }
    }

    /// The setpoints of `command` to execute: its arbiter runs, and (with a timeout) wrote it
    /// recently. Its age is taken from the wall clock when it is first read and counted on
    /// from there on the monotonic clock (`arbiter::clock`), so that the wall clock set back
    /// cannot keep a hung arbiter's command driving the robot, nor setting it forward stop the
    /// robot. Says in the log when it stops and starts executing `arbiter`'s commands.
    fn live<'a>(
        &mut self,
        command: &'a bus::Subscription<ResourceCommand>,
        timeout: Option<Duration>,
        arbiter: &str,
    ) -> Option<&'a BTreeMap<String, f64>> {
        self.stale_in = None;
        let meta = command.meta()?;
        let value = command.value()?;
        let now = read_now();
        let read = first_read(&mut self.seen, Some(meta.sequence), now);
        // An arbiter without heartbeat re-stamps nothing: its command's age says nothing.
        if value.heartbeat_ms == 0 && timeout.is_some() && !self.said_no_heartbeat {
            self.said_no_heartbeat = true;
            tracing::warn!(
                "{arbiter}: its arbiter sends no heartbeat (heartbeat_ms 0): its command is \
                 executed while the arbiter runs, and a hung one cannot be told"
            );
        }
        let timeout = timeout
            .filter(|_| value.heartbeat_ms > 0)
            .map(|t| t.max(Duration::from_millis(value.heartbeat_ms.saturating_mul(3))));
        // The age counts from the slot's write time, which each re-stamp renews along with
        // `stamp_ns`.
        let stale_at = timeout.map(|t| {
            let written = meta
                .write_time
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            // Saturating: a timeout of more than 584 years (someone meaning "never") must not
            // wrap to a fraction of a millisecond.
            let timeout_ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            read.on_clock(lives_until(written, read.wall_ns, timeout_ns))
        });
        let fresh = stale_at.is_none_or(|at| now.clock_ns <= at);
        let refused = if command.writer() != Some(bus::WriterState::Alive) {
            Some(NotExecuted::ArbiterGone)
        } else if !fresh {
            Some(NotExecuted::Stale)
        } else {
            None
        };
        self.stale_in = stale_at
            .filter(|_| refused.is_none())
            // A millisecond past, so that the wake finds it stale.
            .map(|at| Duration::from_nanos(at - now.clock_ns) + Duration::from_millis(1));
        if refused != self.refused {
            match refused {
                Some(NotExecuted::ArbiterGone) => tracing::warn!(
                    "{arbiter}: its arbiter is gone: not executing its command ({})",
                    self.meanwhile
                ),
                Some(NotExecuted::Stale) => tracing::warn!(
                    "{arbiter}: the command was not re-stamped for {} ms (its arbiter hangs, or \
                     its clock is off): not executing it ({})",
                    timeout.unwrap_or_default().as_millis(),
                    self.meanwhile
                ),
                None => tracing::info!("{arbiter}: executing its command"),
                Some(NotExecuted::NoneYet) => {}
            }
            self.refused = refused;
        }
        refused.is_none().then_some(&value.setpoints)
    }
}
