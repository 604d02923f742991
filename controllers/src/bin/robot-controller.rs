//! `robot-controller`: a generic robot controller for scripts and people. Holds a set of
//! commands until it ends and prints its outcomes whenever they change.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use controllers::{RobotController, Status};

#[derive(Clone, Copy, ValueEnum)]
enum StatusArg {
    Compromising,
    #[value(name = "non_compromising", alias = "non-compromising")]
    NonCompromising,
}

#[derive(Parser)]
#[command(
    name = "robot-controller",
    version = daemon::version(bus::slot::VERSION, None),
    about = "Hold commands for robot resources and print what the arbiters grant",
    long_about = "Hold commands for robot resources and print what the arbiters grant.\n\n\
Publishes /robot/controller/<name> (kept fresh while it runs), and prints one line per arbiter \
whenever this controller's outcome or owned resources change. Ends after --duration-s, or on \
Ctrl-C / SIGTERM (or SIGHUP when its terminal closes), releasing its resources at once.\n\n\
Exit status: 0 when interrupted, or when --duration-s ends after every arbiter it commands \
answered it; 1 when a command was refused, its name is taken, or --duration-s ran out before \
every arbiter commanded answered, or before its block reached the bus (the error says why); 64 \
for a command line that does not parse.\n\n\
Example:\n  robot-controller --name b --status compromising --set arm/shoulder=0.3 --set arm/turret=1.0"
)]
struct Args {
    /// Controller name (its place in the robot manager's priority list).
    #[arg(long, value_parser = controller_name)]
    name: String,
    /// compromising: accept part of what is asked; non_compromising: all or nothing, per
    /// arbiter (each decides for its own resources).
    #[arg(long, value_enum)]
    status: StatusArg,
    /// A command for one resource, e.g. arm/shoulder=0.3; repeat for several (each resource
    /// once).
    #[arg(long = "set", value_name = "ARBITER/RESOURCE=VALUE", value_parser = parse_set)]
    set: Vec<(String, f64)>,
    /// Time to live of the published block, in milliseconds (10 to 3600000): how long the
    /// arbiters honour it if this process stops refreshing it.
    #[arg(long, default_value_t = 200, value_parser = daemon::whole_number(10, 3_600_000, "milliseconds"), allow_negative_numbers = true)]
    ttl_ms: u64,
    /// Run this many seconds (above 0, at most 31536000: a year), then release and exit
    /// (default: until interrupted).
    #[arg(long, value_parser = seconds, allow_negative_numbers = true)]
    duration_s: Option<Duration>,
    /// Print each change as one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Bus domain.
    #[arg(long, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN,
          value_parser = bus::Domain::parse_arg)]
    domain: bus::Domain,
}

fn main() {
    daemon::init_logging("warn");
    let args: Args = daemon::parse_args();
    let mut given = std::collections::BTreeSet::new();
    if let Some((resource, _)) = args.set.iter().find(|(r, _)| !given.insert(r)) {
        use clap::CommandFactory;
        daemon::exit_usage(Args::command().error(
            clap::error::ErrorKind::ArgumentConflict,
            format!("--set {resource} is given twice: give each resource one command"),
        ));
    }
    if let Err(e) = run(&args) {
        daemon::exit_on_error("robot-controller", e);
    }
}

fn parse_set(s: &str) -> Result<(String, f64), String> {
    let (resource, value) = s
        .split_once('=')
        .ok_or_else(|| format!("--set {s:?}: expected <arbiter>/<resource>=<value>"))?;
    controllers::split_resource(resource).map_err(|e| format!("--set {s:?}: {e}"))?;
    let value: f64 = value
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| format!("--set {s:?}: {value:?} is not a finite number"))?;
    Ok((resource.to_owned(), value))
}

/// `--name`: the robot controller naming rule.
fn controller_name(s: &str) -> Result<String, String> {
    if arbiter::protocol::is_valid_name(s) {
        Ok(s.to_owned())
    } else {
        Err(format!("{s:?}: {}", arbiter::protocol::NAME_RULE))
    }
}

fn run(args: &Args) -> Result<(), String> {
    let commands = &args.set;
    let stop = Arc::new(AtomicBool::new(false));
    let running = Arc::new(AtomicBool::new(false));
    // A plain flag: the main loop checks it between short waits and releases cleanly.
    stop_on_signals(Arc::clone(&stop), Arc::clone(&running))?;
    let domain = args.domain.clone();
    let bus = bus::Bus::open(domain).map_err(|e| e.to_string())?;
    let status = match args.status {
        StatusArg::Compromising => Status::Compromising,
        StatusArg::NonCompromising => Status::NonCompromising,
    };
    let mut controller =
        RobotController::with_ttl(&bus, &args.name, status, Duration::from_millis(args.ttl_ms))
            .map_err(|e| e.to_string())?;
    controller.refresh().map_err(|e| e.to_string())?;
    for (resource, value) in commands {
        controller
            .set(resource, *value)
            .map_err(|e| e.to_string())?;
    }
    controller.publish().map_err(|e| e.to_string())?;
    running.store(true, Ordering::Relaxed);
    let end = args.duration_s.map(|d| Instant::now() + d);
    let mut printed: Vec<String> = Vec::new();
    let mut said = None;
    // Until an arbiter has accepted this controller's commands for it (running, with every
    // resource named), a command it refuses is a mistake on the command line (an arbiter that
    // appears later is checked too) and ends the program. After that, it comes from a change
    // of configuration while running (the manager dropped that arbiter, it lost a resource):
    // said, not fatal. Per arbiter: another arbiter not running yet says nothing of this one.
    let commanded: std::collections::BTreeSet<&str> = commands
        .iter()
        .filter_map(|(resource, _)| resource.split_once('/').map(|(a, _)| a))
        .collect();
    let mut accepted_by: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    // Whether every arbiter commanded has answered this controller (given it an outcome): only
    // then did the run command the robot (an arbiter that hangs, or a manager that ignores
    // this controller, takes the command without acting on it).
    let mut answered = commanded.is_empty();
    let mut problem = None;
    // The arbiters that have given this controller an outcome: one that gives none any more
    // stopped following it (it is stopping, or out of service), which is not "not seen yet".
    let mut answered_before: std::collections::BTreeSet<String> = Default::default();
    while !stop.load(Ordering::Relaxed) && end.is_none_or(|e| Instant::now() < e) {
        controller
            .wait_feedback(Duration::from_millis(50))
            .map_err(|e| e.to_string())?;
        // Every command is checked: the first error may be an accepted arbiter's, and hide
        // another arbiter's command-line mistake behind it.
        let errors = controller.command_errors();
        if let Some(e) = errors
            .iter()
            .find(|e| !refused_arbiter(e).is_some_and(|a| accepted_by.contains(a)))
        {
            release(args, &mut controller)?;
            return Err(e.to_string());
        }
        match errors.into_iter().next().map_or(Ok(()), Err) {
            Err(e) => {
                let text = e.to_string();
                if problem.as_ref() != Some(&text) {
                    print_note(
                        args,
                        "problem",
                        &text,
                        " (the command is kept: it counts again once its arbiter has it)",
                    );
                    problem = Some(text);
                }
            }
            Ok(()) => {
                if problem.take().is_some() {
                    printed.clear();
                }
                let running = controller.arbiters();
                accepted_by.extend(commanded.iter().filter(|a| running.contains_key(**a)));
            }
        }
        let waiting = waiting_for(&bus, &controller, args.domain.as_str());
        if waiting != said {
            match &waiting {
                Some(w) => print_note(args, "waiting", w, ""),
                // The wait is over: say where things stand again, so that the last line
                // printed is never a wait that has ended.
                None => printed.clear(),
            }
            said = waiting;
        }
        let feedback = controller.feedback();
        answered |= commanded.iter().all(|a| {
            feedback
                .iter()
                .any(|f| f.arbiter == *a && f.arbiter_responding && f.outcome.is_some())
        });
        // Compared as printed: feedback that changed only where the line does not show
        // (an arbiter not running and not listing this controller, either way) printed the
        // same line again.
        answered_before.extend(
            feedback
                .iter()
                .filter(|f| f.outcome.is_some())
                .map(|f| f.arbiter.clone()),
        );
        let lines: Vec<String> = feedback
            .iter()
            .map(|f| feedback_line(args, f, answered_before.contains(&f.arbiter)))
            .collect();
        if lines != printed {
            for line in lines.iter().filter(|l| !printed.contains(l)) {
                say(line);
            }
            printed = lines;
        }
    }
    let reached = controller.block_in_place();
    release(args, &mut controller)?;
    // A script that runs `robot-controller --duration-s N && next-step` must not take a run
    // whose commands never reached a running arbiter, or that no arbiter answered, for one
    // that commanded the robot; nor one whose block never reached the bus (one without
    // commands, too: it took no part).
    let accepted = accepted_by.len() == commanded.len();
    if (!accepted || !answered || !reached) && !stop.load(Ordering::Relaxed) {
        // A run too short for one look (`--duration-s 1e-6`) looks now: without a registry
        // every arbiter would otherwise be "no such arbiter".
        let why = said
            .or_else(|| waiting_for(&bus, &controller, args.domain.as_str()))
            .or_else(|| unanswered(&controller.feedback(), &commanded));
        let what = if commanded.is_empty() {
            "this controller's block had reached the bus"
        } else {
            "every arbiter commanded had answered this controller"
        };
        return Err(format!(
            "--duration-s ended before {what}{}",
            why.map(|w| format!(" ({w})")).unwrap_or_default()
        ));
    }
    Ok(())
}

/// Releases everything at once; the lines printed before said what it held, the last one says
/// that is over. A block that never reached the bus (no registry made its slot) held nothing:
/// that is said instead of a release.
fn release(args: &Args, controller: &mut RobotController) -> Result<(), String> {
    let said = if controller.block_in_place() {
        "released every resource"
    } else {
        "held nothing: its block never reached the bus"
    };
    controller.release().map_err(|e| e.to_string())?;
    print_note(args, "released", said, "");
    Ok(())
}

/// `--duration-s`: a finite number of seconds above 0 (at most a year).
fn seconds(text: &str) -> Result<Duration, String> {
    let s: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    // 0 would end the run before any arbiter could answer: a run that fails by construction.
    if !(s > 0.0 && s <= 365.0 * 86400.0) {
        return Err(format!(
            "{text} s: give more than 0 and at most 31536000 seconds"
        ));
    }
    Duration::try_from_secs_f64(s).map_err(|e| e.to_string())
}

/// What the controller waits for before any arbiter can be known, if anything: the start
/// order is free, so say what is missing instead of printing nothing.
fn waiting_for(bus: &bus::Bus, controller: &RobotController, domain: &str) -> Option<String> {
    if let Some(refusal) = bus.refusal() {
        Some(format!(
            "the registry-server of domain '{domain}' refuses this process: {refusal}"
        ))
    } else if !bus.is_connected() {
        // Once the block is in place, a registry that stops takes nothing from the arbiters
        // here: "waiting" read as if the command were no longer in force.
        Some(if controller.block_in_place() {
            format!(
                "registry-server on domain '{domain}' stopped (start it again): arbiters on \
                 this computer still read this controller's block, arbiters on other computers \
                 no longer get it, and programs started meanwhile wait for it"
            )
        } else {
            format!(
                "waiting for registry-server on domain '{domain}' (start it, or check --domain)"
            )
        })
    } else if !controller.manager_running() {
        Some(if controller.manager_order_known() {
            match controller.manager_host() {
                Some(host) => format!(
                    "the robot manager on host '{host}' is not running, or the network to it \
                     is cut; its last order stays in force"
                ),
                None => "the robot manager is not running; its last order stays in force".into(),
            }
        } else {
            "waiting for the robot manager (nothing publishes /robot/manager)".to_owned()
        })
    } else {
        None
    }
}

/// A line about the controller itself (not one arbiter): `kind` is its JSON field; `more`
/// is added to the text form only.
fn print_note(args: &Args, kind: &str, text: &str, more: &str) {
    if args.json {
        say(&serde_json::json!({"controller": args.name, kind: text}).to_string());
    } else {
        say(&format!("{}: {text}{more}", args.name));
    }
}

/// Why the commanded arbiters that gave no answer did not, from their feedback as last pulled:
/// the end of a run that commanded nothing says it.
fn unanswered(
    feedback: &[controllers::Feedback],
    commanded: &std::collections::BTreeSet<&str>,
) -> Option<String> {
    let reasons: Vec<String> = commanded
        .iter()
        .filter_map(|a| match feedback.iter().find(|f| f.arbiter == *a) {
            Some(f) if f.arbiter_responding && f.outcome.is_some() => None,
            Some(f) => Some(format!("{a}: {}", state_of(f, false))),
            None => Some(format!("{a}: no such arbiter is running")),
        })
        .collect();
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

/// The arbiter whose refusal `e` is (`None` for an error of no one arbiter).
fn refused_arbiter(e: &controllers::ControllerError) -> Option<&str> {
    use controllers::ControllerError::{UnknownArbiter, UnknownResource};
    match e {
        UnknownResource { arbiter, .. } => Some(arbiter),
        UnknownArbiter { resource, .. } => resource.split_once('/').map(|(a, _)| a),
        _ => None,
    }
}

/// Where this controller stands with one arbiter, in words.
fn state_of(f: &controllers::Feedback, answered_before: bool) -> &'static str {
    if f.joining {
        "joining the robot manager's order (unlisted, placed last)"
    } else if !f.listed {
        "not in the robot manager's order"
    } else if !f.arbiter_running && f.arbiter_host.is_some() {
        "arbiter not running, or the network to its computer is cut"
    } else if !f.arbiter_running {
        "arbiter not running"
    } else if !f.arbiter_responding {
        "arbiter not responding (its command is not re-stamped: it hangs, or the bus from its \
         computer is cut: a registry restarting, the network)"
    } else {
        match f.outcome {
            Some(arbiter::protocol::Outcome::Expired) => {
                "expired (the arbiter counts this controller's block as run out: this \
                 computer's clock is behind the arbiter's computer's or this process stalls, \
                 as the arbiter's log says, or, for a moment, an old block of it reached the \
                 arbiter again as a network cut ended)"
            }
            Some(outcome) => outcome.as_str(),
            None if answered_before => {
                "no outcome now (the arbiter does not follow this controller at the moment: it \
                 is stopping, the robot manager no longer lists it, or this controller's block \
                 has not reached it again yet after a restart or a network cut)"
            }
            None => "not seen yet",
        }
    }
}

/// The line `robot-controller` prints for `f` (one JSON object with `--json`).
fn feedback_line(args: &Args, f: &controllers::Feedback, answered_before: bool) -> String {
    let outcome = f.outcome.map(arbiter::protocol::Outcome::as_str);
    let state = state_of(f, answered_before);
    if args.json {
        serde_json::json!({"controller": args.name, "arbiter": f.arbiter,
            "outcome": outcome, "owned": f.owned, "clamped": f.clamped, "listed": f.listed, "joining": f.joining,
            "arbiter_running": f.arbiter_running, "arbiter_responding": f.arbiter_responding,
            "arbiter_host": f.arbiter_host})
        .to_string()
    } else {
        format!(
            "{} {}: {} (owns: {})",
            args.name,
            f.arbiter,
            state,
            if f.owned.is_empty() {
                "nothing".to_owned()
            } else if f.clamped.is_empty() {
                f.owned.join(", ")
            } else {
                format!(
                    "{}; clamped into its limits: {}",
                    f.owned.join(", "),
                    f.clamped.join(", ")
                )
            }
        )
    }
}

/// Prints one line. Output that nobody reads any more (`| head -1`) is dropped: the command
/// is held for as long as asked all the same, and released as always at the end.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Sets `flag` on a stopping signal, which the main loop acts on once `running`; before that
/// (joining the bus, whose calls wait up to seconds each for a registry that does not answer:
/// stopped, or hung) the process exits at once. Whatever it may have published goes with it:
/// its registry marks its writer gone, or its block expires.
fn stop_on_signals(flag: Arc<AtomicBool>, running: Arc<AtomicBool>) -> Result<(), String> {
    // SIGINT and SIGTERM end the run, releasing the resources at once. SIGHUP does too when it
    // means the terminal closed: the process has a controlling terminal (started from one,
    // also with its input redirected or in the background of a script run there), and not
    // under `nohup`. A service has none (systemd starts each in a session of its own), and
    // there SIGHUP (`systemctl kill -s HUP` aimed at the robot manager) is ignored, since an
    // application stopped by it would count as stopped cleanly and stay down.
    let from_terminal =
        has_controlling_terminal() && !ignored_at_start(nix::sys::signal::Signal::SIGHUP);
    let hangup = if from_terminal {
        daemon::Hangup::Stops
    } else {
        daemon::Hangup::Ignored(
            "no terminal of this process closed (it has none, or it runs under nohup); Ctrl-C \
             or SIGTERM end it",
        )
    };
    daemon::on_stop_or_hangup(hangup, move |signal| {
        flag.store(true, Ordering::Relaxed);
        if !running.load(Ordering::Relaxed) {
            tracing::info!("stopping on {signal} while joining the bus");
            std::process::exit(0);
        }
    })
}

/// Whether this process has a controlling terminal, the one whose closing sends it SIGHUP:
/// `/dev/tty` opens only then (ENXIO otherwise).
fn has_controlling_terminal() -> bool {
    std::fs::File::open("/dev/tty").is_ok()
}

/// Whether `signal` was ignored when this process started (`nohup` ignores SIGHUP): from the
/// kernel's `SigIgn` mask in /proc/self/status, where bit n - 1 stands for signal n.
fn ignored_at_start(signal: nix::sys::signal::Signal) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (signal as u32 - 1)) != 0)
}
