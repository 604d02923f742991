//! bus-bench: measures the bus across real processes and compares it, in the same run, with raw
//! shared-memory atomics, a raw futex handoff and (with the `iceoryx2` feature) iceoryx2.
//! Measures and reports; never asserts a time.
//!
//! `run` is the leader: it starts a `registry-server` on a fresh domain and re-executes the
//! bus-bench binary as `bus-bench peer ...` for every other process a case needs (`peer` is the
//! hidden subcommand's entry point). Modules: `harness` (processes and cleanup), `payload` (the
//! value types), `raw` (baselines), `pingpong` (bus round trips), `publish` (the writer alone),
//! `ice` (iceoryx2, behind the feature) and `stats` (percentiles, ratios, tables, JSON).

pub mod harness;
#[cfg(feature = "iceoryx2")]
pub mod ice;
pub mod payload;
pub mod pingpong;
pub mod publish;
pub mod raw;
pub mod stats;

use std::time::{Duration, Instant};

use harness::Harness;
use payload::Kind;
use stats::{Mode, Row, Stats, System};

/// Whether this build can measure iceoryx2.
pub const WITH_ICEORYX2: bool = cfg!(feature = "iceoryx2");

/// Groups of cases, for `--only`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Group {
    /// Round trips at every size, busy and wait, with their raw and iceoryx2 counterparts.
    Pingpong,
    /// One 64 B round trip every 10 ms, wait mode (raw futex, bus, iceoryx2).
    Idle,
    /// Single-writer writes per second, nobody reading.
    Throughput,
    /// Cost of one write with 1/10/100 subscribers (polling and sleeping) and 10 to 10,000 slots.
    Publish,
}

/// What to run and how much.
#[derive(Clone, Debug)]
pub struct Options {
    /// Round trips per small ping-pong case; everything else scales from it.
    pub iterations: Option<usize>,
    pub quick: bool,
    /// Groups to run; empty means all.
    pub only: Vec<Group>,
    pub json: bool,
    /// Domain to run in; a fresh `bench-<pid>` when `None`.
    pub domain: Option<String>,
}

/// Iteration counts derived from the options.
struct Plan {
    /// Each compared case runs in this many rounds, in rotating order, each round with a fresh
    /// peer, so that drift (frequency, idle-state tuning, other load) hits every case alike.
    rounds: usize,
    small: usize,
    large: usize,
    idle: usize,
    counts: publish::Counts,
}

impl Plan {
    fn new(o: &Options) -> Plan {
        let n = o
            .iterations
            .unwrap_or(if o.quick { 1_000 } else { 100_000 })
            // bus-bench's parser takes 10 and more; a smaller count leaves too few samples.
            .max(10);
        let rounds = if o.quick { 2 } else { 5 };
        Plan {
            rounds,
            small: n,
            large: (n / 20).max(20),
            idle: (n / 100).max(20),
            counts: publish::Counts {
                rounds,
                placement_rounds: if o.quick { 2 } else { 100 },
                each: n * 5,
                blocked: (n / 20).max(50),
                throughput: n * 100,
                // A smoke check skips the 10,000-slot level: registering that many publications
                // takes the registry seconds, not the bus.
                slots: if o.quick {
                    vec![10, 100, 1_000]
                } else {
                    vec![10, 1_000, 10_000]
                },
            },
        }
    }

    fn for_size(&self, bytes: usize) -> usize {
        if bytes >= 1 << 20 {
            self.large
        } else {
            self.small
        }
    }
}

/// Load average from /proc/loadavg (1, 5, 15 minutes), for the record.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The domains the publish group's slot series makes beside `domain`, one per slot count
/// (`publish::slot_series_domain`): none when that group does not run. An error says when
/// `domain` is too long to name them.
pub fn slot_series_domains(options: &Options, domain: &str) -> Result<Vec<bus::Domain>, String> {
    if !options.only.is_empty() && !options.only.contains(&Group::Publish) {
        return Ok(Vec::new());
    }
    Plan::new(options)
        .counts
        .slots
        .iter()
        .map(|&slots| {
            let name = publish::slot_series_domain(domain, slots);
            bus::Domain::new(&name).map_err(|e| {
                format!(
                    "the publish group's slot series runs in domain '{name}' beside '{domain}', \
                     which cannot be: {e}; give a shorter --domain"
                )
            })
        })
        .collect()
}

/// The whole run: every selected group, then the table (and JSON lines) on stdout.
pub fn run(options: &Options) -> Result<(), String> {
    payload::check_msg64()?;
    let plan = Plan::new(options);
    let wants = |g: Group| options.only.is_empty() || options.only.contains(&g);
    let started = Instant::now();
    let load_before = load_average();
    let mut h = Harness::start(options.domain.as_deref())?;
    eprintln!(
        "bus-bench: domain '{}', {} round trips per small case in {} rounds{}",
        h.domain,
        plan.small,
        plan.rounds,
        if WITH_ICEORYX2 {
            ", iceoryx2 included"
        } else {
            ", iceoryx2 not built (--features iceoryx2)"
        }
    );
    let mut rows = Vec::new();
    if wants(Group::Pingpong) {
        for mode in [Mode::Busy, Mode::Wait] {
            for bytes in [64usize, 4096, 1 << 20] {
                let cases = size_cases(mode, bytes, None);
                rows.extend(interleaved(&mut h, &plan, &cases, plan.for_size(bytes))?);
            }
        }
    }
    if wants(Group::Idle) {
        let cases = size_cases(Mode::Wait, 64, Some(Duration::from_millis(10)));
        rows.extend(interleaved(&mut h, &plan, &cases, plan.idle)?);
    }
    if wants(Group::Throughput) {
        rows.extend(publish::throughput(&mut h, &plan.counts)?);
    }
    if wants(Group::Publish) {
        rows.extend(publish::publish_cost(&mut h, &plan.counts)?);
    }
    drop(h);
    stats::compare(&mut rows);
    let verdicts = stats::verdicts(&rows);
    print!("{}", stats::render(&rows, &verdicts));
    if !WITH_ICEORYX2 && (wants(Group::Pingpong) || wants(Group::Idle)) {
        println!(
            "\niceoryx2 was not measured: this bus-bench was built without the `iceoryx2` \
             feature (cargo build --release -p tools --features iceoryx2)."
        );
    }
    println!(
        "\n{} results in {:.1} s; load average {} before, {} after",
        rows.len(),
        started.elapsed().as_secs_f64(),
        load_before,
        load_average()
    );
    if options.json {
        print!("{}", stats::json_lines(&rows, &verdicts));
    }
    Ok(())
}

fn raw_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Busy => "raw atomic",
        Mode::Wait => "raw futex",
    }
}

/// What one ping-pong case runs.
#[derive(Clone, Copy, Debug)]
enum Runner {
    Raw(usize),
    Bus(Kind),
    #[cfg_attr(not(feature = "iceoryx2"), allow(dead_code))]
    Iceoryx2(usize),
}

/// One ping-pong case and how its row is labelled.
struct Case {
    runner: Runner,
    system: System,
    name: String,
    mode: Mode,
    bytes: usize,
    gap: Option<Duration>,
    note: Option<&'static str>,
}

/// The cases compared at one size and mode: the raw baseline (and, at 64 B without a gap, the
/// raw baseline that copies no payload), the bus kinds of that size, and iceoryx2 when built.
fn size_cases(mode: Mode, bytes: usize, gap: Option<Duration>) -> Vec<Case> {
    let size = stats::fmt_bytes(bytes);
    let suffix = gap.map_or(String::new(), |g| format!(", {} ms gap", g.as_millis()));
    let case = |runner, system, name: String, bytes, note| Case {
        runner,
        system,
        name: format!("{name}{suffix}"),
        mode,
        bytes,
        gap,
        note,
    };
    let mut cases = Vec::new();
    if bytes == 64 && gap.is_none() {
        let name = format!("{}, counters only", raw_label(mode));
        cases.push(case(
            Runner::Raw(0),
            System::Raw,
            name,
            0,
            Some("no payload copied"),
        ));
    }
    let name = format!("{} {size}", raw_label(mode));
    cases.push(case(Runner::Raw(bytes), System::Raw, name, bytes, None));
    for kind in Kind::ALL.into_iter().filter(|k| k.bytes() == bytes) {
        // The idle case is about waking up, one kind is enough.
        if gap.is_some() && kind != Kind::Pod64 {
            continue;
        }
        let name = format!("bus {}", kind.label());
        cases.push(case(Runner::Bus(kind), System::Bus, name, bytes, None));
    }
    if WITH_ICEORYX2 {
        let note = (mode == Mode::Wait)
            .then_some("publish-subscribe + event service (notify / timed_wait_one)");
        let name = format!("iceoryx2 {size}");
        cases.push(case(
            Runner::Iceoryx2(bytes),
            System::Iceoryx2,
            name,
            bytes,
            note,
        ));
    }
    cases
}

/// Runs `cases` in `plan.rounds` rounds of `iterations / rounds` round trips each, rotating
/// which case goes first, and pools each case's samples.
fn interleaved(
    h: &mut Harness,
    plan: &Plan,
    cases: &[Case],
    iterations: usize,
) -> Result<Vec<Row>, String> {
    let per_round = iterations.div_ceil(plan.rounds);
    let warmup = if iterations >= plan.small {
        (per_round / 10).max(100)
    } else {
        (per_round / 20).clamp(3, 100)
    };
    let mut samples: Vec<Vec<u64>> = cases.iter().map(|_| Vec::new()).collect();
    for round in 0..plan.rounds {
        for k in 0..cases.len() {
            let i = (k + round) % cases.len();
            let c = &cases[i];
            eprintln!(
                "bus-bench: round {}/{}: {} {}",
                round + 1,
                plan.rounds,
                c.mode.as_str(),
                c.name
            );
            let got = match c.runner {
                Runner::Raw(bytes) => raw::roundtrip(h, c.mode, bytes, warmup, per_round, c.gap),
                Runner::Bus(kind) => pingpong::roundtrip(h, kind, c.mode, warmup, per_round, c.gap),
                Runner::Iceoryx2(bytes) => iceoryx2_roundtrip(h, c, bytes, warmup, per_round),
            }?;
            samples[i].extend(got);
        }
    }
    cases
        .iter()
        .zip(samples)
        .map(|(c, mut s)| {
            let stats = Stats::of(&mut s).ok_or_else(|| format!("{}: no sample", c.name))?;
            let mut row = Row::new("pingpong", c.system, &c.name, stats)
                .mode(c.mode)
                .bytes(c.bytes)
                .gap_ms(c.gap.map_or(0, |g| g.as_millis() as u64));
            if let Some(note) = c.note {
                row = row.note(note);
            }
            Ok(row)
        })
        .collect()
}

#[cfg(feature = "iceoryx2")]
fn iceoryx2_roundtrip(
    h: &mut Harness,
    c: &Case,
    bytes: usize,
    warmup: usize,
    iterations: usize,
) -> Result<Vec<u64>, String> {
    ice::roundtrip(h, bytes, c.mode, warmup, iterations, c.gap)
}

#[cfg(not(feature = "iceoryx2"))]
fn iceoryx2_roundtrip(
    _h: &mut Harness,
    _c: &Case,
    _bytes: usize,
    _warmup: usize,
    _iterations: usize,
) -> Result<Vec<u64>, String> {
    Err("this bus-bench was built without the `iceoryx2` feature".into())
}

/// Roles a peer process plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Echo bus /ping values on /pong.
    BusEcho,
    /// Echo on a raw shared-memory segment.
    RawEcho,
    /// Echo iceoryx2 samples (needs the feature).
    IceEcho,
    /// Hold `count` subscriptions and poll them all in a loop.
    BusyReaders,
    /// Hold `count` subscriptions, one thread each, blocked in wait_update.
    Waiters,
}

/// Arguments of the hidden `peer` subcommand (the leader builds them; not for people).
#[derive(clap::Args, Clone, Debug)]
pub struct PeerArgs {
    #[arg(long, value_enum)]
    pub role: Role,
    #[arg(long, value_enum, default_value = "busy")]
    pub mode: Mode,
    #[arg(long, value_enum, default_value = "pod64")]
    pub kind: Kind,
    /// Payload bytes (raw and iceoryx2 roles).
    #[arg(long, default_value_t = 0)]
    pub bytes: usize,
    /// Slot name, slot name prefix, segment or service name, depending on the role.
    #[arg(long)]
    pub name: String,
    /// Subscriptions to hold (busy-readers, waiters).
    #[arg(long, default_value_t = 1)]
    pub count: usize,
    #[arg(long)]
    pub domain: String,
}

/// Entry point of a peer process.
pub fn peer(args: &PeerArgs) -> Result<(), String> {
    let open = || {
        bus::Domain::new(&args.domain)
            .map_err(|e| e.to_string())
            .and_then(|d| bus::Bus::open(d).map_err(|e| e.to_string()))
    };
    match args.role {
        Role::BusEcho => pingpong::echo(&open()?, args.kind, args.mode, &args.name),
        Role::RawEcho => raw::echo(args.mode, args.bytes, &args.name),
        Role::BusyReaders => publish::busy_readers(&open()?, &args.name, args.count),
        Role::Waiters => publish::waiters(&open()?, &args.name, args.count),
        Role::IceEcho => ice_echo(args),
    }
}

#[cfg(feature = "iceoryx2")]
fn ice_echo(args: &PeerArgs) -> Result<(), String> {
    ice::echo(args.mode, args.bytes, &args.name)
}

#[cfg(not(feature = "iceoryx2"))]
fn ice_echo(_args: &PeerArgs) -> Result<(), String> {
    Err("this bus-bench was built without the `iceoryx2` feature".into())
}
