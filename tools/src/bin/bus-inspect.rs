//! `bus-inspect`: see what is on a Baton bus, without disturbing it. Every command reads shared
//! memory read-only (and asks the registry its `List`), except `put` (writes one value) and
//! `clean` (removes stale segments). The work is in `tools::inspect`; this is the command line.

#![forbid(unsafe_code)]

use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::{Args as ClapArgs, Parser, Subcommand};

use bus::protocol::EndpointKind;
use bus::Domain;
use tools::inspect::{self, doctor, graph, put, rate, registry, render, stats, watch};

const EXAMPLES: &str = "Examples:
  bus-inspect list                        every slot: type, size, sequence, rate, age, writer, origin
  bus-inspect list '/robot/*'             only names matching a glob (or a substring: list arm)
  bus-inspect info /robot/manager         type and schema, publishers, subscribers, origin
  bus-inspect get /robot/manager --json   the value, decoded from the schema stored in the slot
  bus-inspect watch /robot/resource/arm/state --count 10
  bus-inspect hz /robot/resource/arm/state /robot/resource/drive/state --window 5
  bus-inspect bw /camera/image
  bus-inspect wait /robot/manager /robot/arbiter/arm --timeout 30
  bus-inspect put /robot/resource/arm/state '{\"stamp_ns\": 0, \"values\": {\"turret\": 0.5}}'
  bus-inspect graph | dot -Tsvg > bus.svg
  bus-inspect stats
  bus-inspect doctor
  bus-inspect --domain test clean --yes

Exit status: 0 done; 1 any other error (a slot that does not exist or never appeared, a refused
put, a doctor check that failed, a segment clean kept, output that could not be written:
a pipe whose reader left is no error); 2 wait, or watch --count, reached its
--timeout first; 64 a command line that does not parse or a value out of range.";

#[derive(Parser)]
#[command(
    name = "bus-inspect",
    version = daemon::version(bus::slot::VERSION, None),
    about = "See what is on a Baton bus, without disturbing it",
    long_about = "See what is on a Baton bus, without disturbing it.\n\nSlots are read straight \
from shared memory through read-only mappings, so every command works with or without a \
registry-server and changes nothing on the bus: no value, no sequence, no waiter count. The \
exceptions are `put`, which writes one value, and `clean`, which removes stale segments. \
Endpoints, connections and network counters come from the domain's registry-server.",
    after_help = EXAMPLES
)]
struct Args {
    /// Bus domain (the registry-server's --domain).
    #[arg(long, global = true, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN,
          value_parser = Domain::parse_arg)]
    domain: bus::Domain,
    #[command(subcommand)]
    command: Command,
}

#[derive(ClapArgs, Clone, Copy)]
struct Json {
    /// Print JSON (one object per line) instead of text.
    #[arg(long)]
    json: bool,
}

/// What `hz` and `bw` measure, and for how long.
#[derive(ClapArgs)]
struct Rates {
    /// Slot names (a slot that does not exist yet is watched for its appearance).
    #[arg(required = true, value_parser = slot_name_arg)]
    names: Vec<bus::SlotName>,
    #[command(flatten)]
    window: Window,
    #[command(flatten)]
    json: Json,
}

#[derive(Subcommand)]
enum Command {
    /// Every slot: type, size, sequence, rate, age, writer and whether it runs, origin host.
    ///
    /// RATE is over the last writes the slot still holds (up to three), and `-` once the newest
    /// is older than three periods of that rate (and a second): it shows what the slot does
    /// now. For a measured rate use `hz`. ORIGIN is this host for local slots, or the host a
    /// mirror reflects. Without a registry-server the slots are still listed, and stderr says
    /// that none answers.
    List {
        /// Only names matching this: a glob with * and ? (`/robot/*`: everything under /robot/),
        /// or else a substring. When nothing matches, stderr says so (the exit status stays 0).
        pattern: Option<String>,
        /// Also the names other computers publish that have no slot here (nothing here
        /// subscribes to them), from the registry's directory: type, host and whether their
        /// publisher runs. `get` reads them. In JSON such a row has `here: false`.
        #[arg(long)]
        remote: bool,
        #[command(flatten)]
        json: Json,
    },
    /// One slot in detail: type and schema, header, publishers, subscribers, connections, hosts.
    ///
    /// A name that only another computer publishes is mirrored here while `info` looks, as for
    /// `get`.
    Info {
        /// Slot name, e.g. /robot/manager.
        #[arg(value_parser = slot_name_arg)]
        name: bus::SlotName,
        #[command(flatten)]
        json: Json,
    },
    /// The current value of one slot, decoded through the schema stored in the slot.
    ///
    /// A name that only another computer publishes (nothing here subscribes to it) is mirrored
    /// here for the read: the registry fetches its schema from that computer. It waits at most
    /// 5 s for the mirror and 5 s more for its first value.
    Get {
        /// Slot name, e.g. /robot/manager.
        #[arg(value_parser = slot_name_arg)]
        name: bus::SlotName,
        /// Print the value alone, as one line of JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the current value and then each new value of a slot.
    ///
    /// Polls the slot's sequence read-only: writes faster than --poll-ms are not all seen (the
    /// text says how many were skipped; the JSON has each value's sequence). A name that only
    /// another computer publishes is mirrored here while the watch lasts, as for `get`.
    Watch {
        /// Slot name.
        #[arg(value_parser = slot_name_arg)]
        name: bus::SlotName,
        /// Stop after this many values (at least 1).
        #[arg(long, value_parser = daemon::whole_number(1, u64::MAX, "a count of values"), allow_negative_numbers = true)]
        count: Option<u64>,
        /// Stop after this many seconds, at most a year (exit status 2 if --count values were
        /// not seen; 1 if the slot never appeared).
        #[arg(long, value_parser = timeout_seconds, allow_negative_numbers = true)]
        timeout: Option<Duration>,
        /// How often to look for a new value, milliseconds (1 to 3600000).
        #[arg(long, default_value_t = 2, value_parser = daemon::whole_number(1, 3_600_000, "milliseconds"), allow_negative_numbers = true)]
        poll_ms: u64,
        /// One JSON object per value: name, type, sequence, time_ns, writer, writer_alive,
        /// origin, value.
        #[arg(long)]
        json: bool,
    },
    /// Write rate of slots over a window: rate, and period min / p50 / p99 / max.
    ///
    /// Measured from the sequence numbers and write times each slot keeps of its last three
    /// values, sampled every --sample-ms, without subscribing. A writer faster than about three
    /// writes per sample outruns the sampling: the rate then comes from sequence numbers and
    /// the output says how many writes were seen. A name that only another computer publishes is
    /// mirrored here for the window, this tool its subscriber (the mirror's write times are
    /// its origin's).
    Hz(Rates),
    /// Bandwidth of slots over a window: bytes per second, and value size min / p50 / p99 / max.
    ///
    /// Measured like `hz`, from the slots' buffers, without subscribing (but a name only
    /// another computer publishes is mirrored here for the window, as for `hz`).
    Bw(Rates),
    /// Encode a JSON value through the slot's stored schema and write it.
    ///
    /// The JSON has the shape `get --json` prints. A value that does not match the schema is
    /// refused with the path of the mismatch, an object that gives a key twice with the key
    /// and where, and nothing is written. A slot has a single
    /// writer: while its publisher (or the registry, for a mirror or its statistics) runs, a
    /// second writer could make readers see a torn value, and the publisher's next write
    /// replaces yours, so `put` refuses unless --force. Use it on slots whose writer is gone
    /// (testing a subscriber, replaying a configuration). The slot must exist: a publication
    /// made it once (a name only subscribed to has no slot, hence no type to encode with). A
    /// mirror of another computer's name, even of a gone publisher's value, and a name only
    /// another computer publishes are refused with the host to put the value on.
    Put {
        /// Slot name.
        #[arg(value_parser = slot_name_arg)]
        name: bus::SlotName,
        /// The value as JSON, e.g. '{"x": 1.0, "y": 2.0}', or - to read it from stdin (for
        /// values too big for a command line: `bus-inspect put /x - < value.json`). A negative
        /// number needs no `--` before it.
        #[arg(allow_negative_numbers = true)]
        value: String,
        /// Write even though the slot's writer runs (see above for what that risks).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        json: Json,
    },
    /// Block until any of the slots changes; print which (exit status 2 on --timeout).
    ///
    /// A slot that does not exist yet counts as changed when it appears with a value. Polls
    /// sequences read-only (registering as a waiter would write to the slot).
    Wait {
        /// Slot names (a slot that does not exist yet is watched for its appearance).
        #[arg(required = true, value_parser = slot_name_arg)]
        names: Vec<bus::SlotName>,
        /// Give up after this many seconds (at most a year).
        #[arg(long, value_parser = timeout_seconds, allow_negative_numbers = true)]
        timeout: Option<Duration>,
        /// How often to look, milliseconds (1 to 3600000).
        #[arg(long, default_value_t = 2, value_parser = daemon::whole_number(1, 3_600_000, "milliseconds"), allow_negative_numbers = true)]
        poll_ms: u64,
        #[command(flatten)]
        json: Json,
    },
    /// Processes, slots, connections and hosts as a Graphviz DOT graph (`| dot -Tsvg`).
    ///
    /// Processes and connections come from the registry: without one, the slots are still
    /// drawn and the exit status is 1.
    Graph {
        /// Nodes and edges as JSON instead of DOT.
        #[arg(long)]
        json: bool,
    },
    /// Registry counters and each registry's network counters (/baton/registry/HOST/net).
    ///
    /// Exit status 1 when no registry answers (network counters found in shared memory are
    /// still printed).
    Stats {
        #[command(flatten)]
        json: Json,
    },
    /// Check the domain: registry, stale segments, permissions, multicast route and TTL,
    /// remote clocks. Exit status 1 when a check fails.
    Doctor {
        #[command(flatten)]
        json: Json,
    },
    /// Remove the segments `doctor` finds stale, after asking (or with --yes).
    ///
    /// Without a terminal on stdin and without --yes, refuses. Only this domain's segments are
    /// ever touched. With --json: one line per segment removed or kept, none when nothing was
    /// removed.
    Clean {
        /// Remove without asking.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        json: Json,
    },
    /// Endpoints (publications, subscriptions) and connections the registry knows, per slot.
    Endpoints {
        #[command(flatten)]
        json: Json,
    },
}

#[derive(ClapArgs, Clone, Copy)]
struct Window {
    /// Seconds to measure (above 0, at most 86400).
    #[arg(long, default_value = "2", value_parser = window_seconds, allow_negative_numbers = true)]
    window: Duration,
    /// How often to sample the buffers, milliseconds (0.001 to 10000).
    #[arg(long, default_value = "1", value_parser = sample_milliseconds, allow_negative_numbers = true)]
    sample_ms: Duration,
}

/// Exit status of a command that ran but did not get what it waited for.
const TIMED_OUT: i32 = 2;

/// A slot name as given, checked by the bus's rule (an invalid one is a usage error, 64, as an
/// invalid `--domain` is).
fn slot_name_arg(text: &str) -> Result<bus::SlotName, String> {
    bus::SlotName::parse(text).map_err(|e| e.to_string())
}

fn main() {
    let args: Args = daemon::parse_args();
    let result = run(&args.domain, args.command);
    match result {
        Ok(0) => {
            // What was done is done (a `put` wrote); not being able to say so is an error.
            if let Some(e) = OUTPUT_FAILED.get() {
                eprintln!("bus-inspect: writing the output: {e}");
                std::process::exit(1);
            }
        }
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("bus-inspect: {e}");
            std::process::exit(1);
        }
    }
}

/// Why the output could not be written (a full disk, an unwritable file), if it could not: the
/// command then ends with status 1. A pipe whose reader left (`| head`) is not recorded: that
/// reader wanted no more.
static OUTPUT_FAILED: std::sync::OnceLock<std::io::Error> = std::sync::OnceLock::new();

/// Prints `text` as it is; `false` once stdout cannot be written, so loops stop quietly.
fn emit(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                let _ = OUTPUT_FAILED.set(e);
            }
            false
        }
    }
}

/// Prints one line (see `emit`).
fn say(line: &str) -> bool {
    emit(&format!("{line}\n"))
}

fn json_line<T: serde::Serialize>(value: &T) -> Result<bool, String> {
    Ok(say(
        &serde_json::to_string(value).map_err(|e| e.to_string())?
    ))
}

/// Prints `value` as one line of JSON, or as `text` renders it for people.
fn show<T: serde::Serialize>(
    json: bool,
    value: &T,
    text: impl FnOnce(&T) -> String,
) -> Result<(), String> {
    if json {
        json_line(value)?;
    } else {
        emit(&text(value));
    }
    Ok(())
}

/// A number of `unit` seconds within `ok`, as a duration; `rule` says which numbers are.
fn duration_arg(
    text: &str,
    ok: impl Fn(f64) -> bool,
    unit: f64,
    rule: &str,
) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|v| ok(*v))
        .map(|v| Duration::from_secs_f64(v * unit))
        .ok_or_else(|| rule.to_owned())
}

/// `--domain`: the domain naming rule, checked with the rest of the command line.
fn timeout_seconds(text: &str) -> Result<Duration, String> {
    let ok = |v: f64| v > 0.0 && v <= 365.0 * 86400.0;
    duration_arg(
        text,
        ok,
        1.0,
        "give seconds above 0, at most 31536000 (a year)",
    )
}

fn window_seconds(text: &str) -> Result<Duration, String> {
    let ok = |v: f64| v > 0.0 && v <= 86400.0;
    duration_arg(text, ok, 1.0, "give seconds above 0, at most 86400 (a day)")
}

fn sample_milliseconds(text: &str) -> Result<Duration, String> {
    let ok = |v: f64| (0.001..=10_000.0).contains(&v);
    duration_arg(text, ok, 1e-3, "give milliseconds from 0.001 to 10000")
}

fn run(domain: &Domain, command: Command) -> Result<i32, String> {
    let err = |e: inspect::Error| e.to_string();
    match command {
        Command::List {
            pattern,
            remote,
            json,
        } => list(domain, pattern.as_deref(), remote, json.json),
        Command::Info { name, json } => {
            let info = registry::info(domain, &name).map_err(|e| not_found(domain, e))?;
            show(json.json, &info, |i| format!("{}\n", render::info(i)))?;
            // The slot's value unreadable (its memory corrupt): shown, and a failure.
            Ok(i32::from(info.slot_error.is_some()))
        }
        Command::Get { name, json } => {
            let Some(r) = inspect::get(domain, &name).map_err(|e| not_found(domain, e))? else {
                return Err(format!("{name} has no value yet"));
            };
            if json {
                json_line(&r.value)?;
            } else {
                say(&render::reading(&r, 0));
            }
            Ok(0)
        }
        Command::Watch {
            name,
            count,
            timeout,
            poll_ms,
            json,
        } => {
            let poll = Duration::from_millis(poll_ms);
            let end = watch::watch(domain, &name, count, poll, timeout, |r, skipped| {
                if json {
                    json_line(r).unwrap_or(false)
                } else {
                    say(&render::reading(r, skipped))
                }
            })
            .map_err(err)?;
            match end {
                watch::End::NeverAppeared => Err(format!(
                    "no slot {name} on domain '{domain}' during the --timeout{}",
                    and_no_registry(domain)
                )),
                watch::End::TimedOut if count.is_some() => Ok(TIMED_OUT),
                _ => Ok(0),
            }
        }
        Command::Hz(r) => rates(domain, &r.names, r.window, r.json.json, false),
        Command::Bw(r) => rates(domain, &r.names, r.window, r.json.json, true),
        Command::Put {
            name,
            value,
            force,
            json,
        } => {
            let value = if value == "-" {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                    .map_err(|e| format!("reading the value from stdin: {e}"))?;
                text
            } else {
                value
            };
            let w = put::put(domain, &name, &value, force).map_err(|e| not_found(domain, e))?;
            show(json.json, &w, |w| {
                format!(
                    "wrote {} bytes to {} (sequence {})\n",
                    w.size, w.name, w.sequence
                )
            })?;
            Ok(0)
        }
        Command::Wait {
            names: n,
            timeout,
            poll_ms,
            json,
        } => {
            let changed =
                watch::wait(domain, &n, Duration::from_millis(poll_ms), timeout).map_err(err)?;
            if changed.is_empty() {
                eprintln!(
                    "bus-inspect: wait: nothing changed within the timeout{}",
                    and_no_registry(domain)
                );
                return Ok(TIMED_OUT);
            }
            for c in &changed {
                if json.json {
                    json_line(c)?;
                } else {
                    say(&format!("{} changed (sequence {})", c.name, c.sequence));
                }
            }
            Ok(0)
        }
        Command::Graph { json } => {
            let g = graph::build(domain).map_err(err)?;
            show(json, &g, graph::dot)?;
            Ok(without_registry(domain, g.registry_error.as_deref()))
        }
        Command::Stats { json } => {
            let s = stats::gather(domain);
            show(json.json, &s, stats::render)?;
            Ok(without_registry(domain, s.registry_error.as_deref()))
        }
        Command::Doctor { json } => {
            let report = doctor::diagnose(domain);
            show(json.json, &report, render::doctor)?;
            Ok(i32::from(report.failed()))
        }
        Command::Clean { yes, json } => clean(domain, yes, json.json),
        Command::Endpoints { json } => endpoints(domain, json.json),
    }
}

fn list(
    domain: &Domain,
    pattern: Option<&str>,
    want_remote: bool,
    json: bool,
) -> Result<i32, String> {
    let (slots, errors) = inspect::list(domain, pattern).map_err(|e| e.to_string())?;
    let remote = if want_remote {
        inspect::remote::remote_names(domain, pattern).map_err(|e| e.to_string())?
    } else {
        Vec::new()
    };
    if json {
        for s in &slots {
            json_line(s)?;
        }
        for r in &remote {
            json_line(r)?;
        }
    } else {
        emit(&render::list(&slots, &remote));
    }
    for e in &errors {
        eprintln!("bus-inspect: unreadable: {e}");
    }
    // A filter that keeps nothing is an answer, not a failure (exit 0, as for an empty bus),
    // but an empty table alone reads like a broken command: say what matched nothing.
    if let Some(pattern) =
        pattern.filter(|_| slots.is_empty() && remote.is_empty() && errors.is_empty())
    {
        let elsewhere = if want_remote {
            ""
        } else {
            " here (list --remote adds the names other computers publish)"
        };
        eprintln!("bus-inspect: no slot matches '{pattern}'{elsewhere}");
    }
    // The segments list without a registry (exit 0), but nothing new can be published through
    // the bus, and an empty list is more often the wrong domain: say so, in doctor's words.
    if let Err(none) = registry::answers(domain) {
        eprintln!("bus-inspect: {none}");
    }
    // A segment it could not read (corrupt, or closed to this user: outside the bus's group,
    // every segment is) is an error for scripts too, not only a line on stderr.
    Ok(i32::from(!errors.is_empty()))
}

/// The exit status of `graph` and `stats`, which print what shared memory shows but describe
/// the processes only through the registry: 1 when it did not answer, said on stderr too (their
/// output may go to a file), in doctor's words like `list`.
fn without_registry(domain: &Domain, error: Option<&str>) -> i32 {
    let Some(error) = error else { return 0 };
    match registry::answers(domain) {
        Err(none) => eprintln!("bus-inspect: {none}"),
        Ok(_) => eprintln!("bus-inspect: {error}"),
    }
    1
}

/// For a command that found no slot (`watch`, `wait`, `hz`, `bw`): the absence of a registry,
/// on a line of its own, when none answers (nothing is published then, and the domain may be
/// the wrong one); empty when one does.
fn and_no_registry(domain: &Domain) -> String {
    registry::answers(domain)
        .map_or_else(|none| format!("\nbus-inspect: {none}"), |_| String::new())
}

/// The error of `get`, `info` or `put`; for a slot that does not exist, followed (on its own
/// line, in doctor's words) by the absence of a registry when none answers either: without one
/// nothing is published, and the domain may be the wrong one. (Then without the pointer to
/// `list --remote`, which asks that registry.)
fn not_found(domain: &Domain, e: inspect::Error) -> String {
    match (&e, registry::answers(domain)) {
        (inspect::Error::NoSlot { name, domain }, Err(none)) => {
            format!("{}\nbus-inspect: {none}", inspect::no_slot(name, domain))
        }
        _ => e.to_string(),
    }
}

fn rates(
    domain: &Domain,
    n: &[bus::SlotName],
    window: Window,
    json: bool,
    bandwidth: bool,
) -> Result<i32, String> {
    let options = rate::Options {
        window: window.window,
        sample_every: window.sample_ms,
    };
    let reports = rate::measure(domain, n, options).map_err(|e| e.to_string())?;
    if json {
        for r in &reports {
            json_line(r)?;
        }
    } else if bandwidth {
        emit(&render::bw(&reports));
    } else {
        emit(&render::hz(&reports));
    }
    let missing = reports.iter().any(|r| !r.exists);
    if missing {
        let none = and_no_registry(domain);
        if !none.is_empty() {
            eprintln!("{}", none.trim_start());
        }
    }
    Ok(i32::from(missing))
}

fn clean(domain: &Domain, yes: bool, json: bool) -> Result<i32, String> {
    let report = doctor::diagnose(domain);
    if let Some(why) = &report.stale_unknown {
        return Err(format!(
            "clean: cannot tell which segments of domain '{domain}' are stale: {why}; nothing \
             removed"
        ));
    }
    if report.stale.is_empty() {
        if !json {
            say(&format!("nothing to clean in domain '{domain}'"));
        }
        return Ok(0);
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(format!(
                "clean: refusing to remove {} stale segment(s) of domain '{domain}' without \
                 --yes: stdin is not a terminal to ask on",
                report.stale.len()
            ));
        }
        for s in &report.stale {
            eprintln!("  {}  ({})", s.name, s.reason);
        }
        eprint!("Remove these {} segment(s)? [y/N] ", report.stale.len());
        let mut answer = String::new();
        std::io::stdin()
            .read_line(&mut answer)
            .map_err(|e| format!("clean: reading the answer: {e}"))?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            if !json {
                say("nothing removed");
            }
            return Ok(0);
        }
    }
    let removed = doctor::clean(&report.stale);
    if json {
        for r in &removed {
            json_line(r)?;
        }
    } else {
        for r in &removed {
            match &r.error {
                None => say(&format!("removed {}", r.name)),
                Some(e) => say(&format!("kept {}: {e}", r.name)),
            };
        }
    }
    Ok(i32::from(removed.iter().any(|r| !r.removed)))
}

/// `endpoints`: one entry per slot the registry knows. The JSON form (kind, pid, program, bound
/// per endpoint, and the number of connections) is what scripts already parse.
fn endpoints(domain: &Domain, json: bool) -> Result<i32, String> {
    let slots = registry::listing(domain).map_err(|e| match registry::answers(domain) {
        Err(none) => none.to_string(),
        Ok(_) => e.to_string(),
    })?;
    for slot in &slots {
        if json {
            let endpoints: Vec<_> = slot
                .endpoints
                .iter()
                .map(|e| {
                    let kind = match e.kind {
                        EndpointKind::Publication => "publication",
                        EndpointKind::Subscription => "subscription",
                    };
                    serde_json::json!({
                        "kind": kind, "pid": e.pid, "program": e.program, "bound": e.bound,
                    })
                })
                .collect();
            json_line(&serde_json::json!({
                "name": slot.name.as_str(), "type": slot.type_name, "segment": slot.segment,
                "capacity": slot.capacity, "endpoints": endpoints,
                "connections": slot.connections().len(),
            }))?;
        } else {
            say(&render::endpoints(&registry::Endpoints::from(slot)));
        }
    }
    Ok(0)
}
