//! `bus-bench`: benchmarks Baton's bus across real processes against raw shared-memory
//! atomics, a raw futex and (when built with `--features iceoryx2`) iceoryx2, and prints
//! p50/p99/p99.9/max with ratios and the targets. A thin shell over `tools::bench`.

#![forbid(unsafe_code)]

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};
use tools::bench::harness::Harness;
use tools::bench::{self, Group, Options, PeerArgs};

#[derive(Parser)]
#[command(
    name = "bus-bench",
    version = daemon::version(bus::slot::VERSION, None),
    about = "Measure Baton's bus across processes against raw atomics, a raw futex and iceoryx2",
    long_about = "Measure Baton's bus across processes against raw atomics, a raw futex and \
                  iceoryx2.\n\n\
                  Starts its own registry-server (from the directory bus-bench is in) on a fresh \
                  domain, runs every case between this process and re-executed copies of itself, \
                  and prints its results in tables (round trips, idle round trips, writes per \
                  second, the cost of a write) with p50, p99, p99.9 and max, each result's \
                  ratio to its baseline (raw atomic for busy polling, raw futex for blocking \
                  waits) and to iceoryx2, and whether the targets are met. Removes its shared \
                  memory when done, or when stopped with Ctrl-C; what a bus-bench killed with \
                  SIGKILL left on its own domains (bench-<pid>: its registry-server and peers, \
                  its memory) the next one removes.\n\n\
                  Build: cargo build --release -p tools -p registry-server \
                  [--features tools/iceoryx2]\n\
                  Quick check: bus-bench --quick   Full run (about two minutes): bus-bench"
)]
struct Args {
    /// Fewer iterations (1,000 round trips per small case, 2 rounds, at most 1,000 slots), for
    /// a smoke check.
    #[arg(long)]
    quick: bool,
    /// Round trips per small ping-pong case, 10 to 1,000,000 (default 100,000; 1,000 with
    /// --quick); the other cases scale from it.
    #[arg(long, value_name = "N",
          value_parser = daemon::whole_number(10, 1_000_000, "a count of round trips"),
          allow_negative_numbers = true)]
    iterations: Option<u64>,
    /// Run only this group (repeat for several).
    #[arg(long, value_enum, value_name = "GROUP")]
    only: Vec<Group>,
    /// Also print one JSON object per result (and per target) after the table.
    #[arg(long)]
    json: bool,
    /// Bus domain to run in (default: a fresh `bench-<pid>`). No registry may serve it and it
    /// may hold no slots: bus-bench removes all of them when done. The publish group also uses
    /// `<domain>-slots<count>` for each slot count, so the name has at most 21 characters. Not
    /// `bench-<number>` (nor `bench-<number>-...`): that is its own naming.
    #[arg(long, value_parser = bus::Domain::parse_arg)]
    domain: Option<bus::Domain>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// The other process of a case (started by bus-bench itself).
    #[command(hide = true)]
    Peer(PeerArgs),
}

fn main() {
    let args: Args = daemon::parse_args();
    let result = match &args.command {
        Some(Command::Peer(peer)) => {
            bench::peer(peer).map_err(|e| format!("peer {:?}: {e}", peer.role))
        }
        None => {
            let options = Options {
                // At most 1,000,000 (the parser's range): the cast cannot truncate.
                iterations: args.iterations.map(|n| n as usize),
                quick: args.quick,
                only: args.only.clone(),
                json: args.json,
                domain: args.domain.as_ref().map(|d| d.as_str().to_owned()),
            };
            start(&options)
        }
    };
    if let Err(e) = result {
        eprintln!("bus-bench: {e}");
        std::process::exit(1);
    }
}

/// Sweeps what killed runs left, claims this run's domains (checked before anything is made or
/// removed), takes Ctrl-C to remove them, and runs.
fn start(options: &Options) -> Result<(), String> {
    let domain = Harness::domain(options.domain.as_deref())?;
    // The sweep below would take such a domain for a killed run's once this process is gone.
    if options.domain.is_some()
        && tools::interrupted::run_owner("bench-", domain.as_str()).is_some()
    {
        daemon::exit_usage(Args::command().error(
            ErrorKind::ValueValidation,
            format!(
                "--domain {domain}: bench-<number> names bus-bench's own domains (of its pid); \
                 leave --domain out or give another name"
            ),
        ))
    }
    // A --domain too long to name the slot series' domains is a command-line error.
    let slot_domains = bench::slot_series_domains(options, domain.as_str()).unwrap_or_else(|e| {
        daemon::exit_usage(Args::command().error(ErrorKind::ValueValidation, e))
    });
    // What bus-benches killed with SIGKILL left: their registries run on, their memory stays.
    tools::interrupted::remove_abandoned_runs("bench-");
    let own = options.domain.is_none();
    for d in std::iter::once(&domain).chain(&slot_domains) {
        Harness::claim(d, own)?;
    }
    // iceoryx2's files, as the harness's drop removes them.
    #[cfg(feature = "iceoryx2")]
    let leftovers = tools::bench::ice::Leftovers::note();
    tools::interrupted::clean_up_on_stop("bus-bench", domain, Vec::new(), move || {
        for domain in &slot_domains {
            let _ = domain.remove_all_segments();
        }
        #[cfg(feature = "iceoryx2")]
        drop(leftovers);
    })?;
    bench::run(options)
}
