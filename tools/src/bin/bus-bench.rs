//! `bus-bench`: benchmarks Baton's bus across real processes against raw shared-memory
//! atomics, a raw futex and (when built with `--features iceoryx2`) iceoryx2, and prints
//! p50/p99/p99.9/max with ratios and the targets. A thin shell over `tools::bench`.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
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
                  and prints one table per group with p50, p99, p99.9 and max, each result's \
                  ratio to its baseline (raw atomic for busy polling, raw futex for blocking \
                  waits) and to iceoryx2, and whether the targets are met. Removes its shared \
                  memory when done.\n\n\
                  Build: cargo build --release -p tools -p registry-server \
                  [--features tools/iceoryx2]\n\
                  Quick check: bus-bench --quick   Full run (about two minutes): bus-bench"
)]
struct Args {
    /// Fewer iterations (1,000 round trips per small case, 2 rounds, at most 1,000 slots), for
    /// a smoke check.
    #[arg(long)]
    quick: bool,
    /// Round trips per small ping-pong case (default 100,000); the other cases scale from it.
    #[arg(long, value_name = "N")]
    iterations: Option<usize>,
    /// Run only this group (repeat for several).
    #[arg(long, value_enum, value_name = "GROUP")]
    only: Vec<Group>,
    /// Also print one JSON object per result (and per target) after the table.
    #[arg(long)]
    json: bool,
    /// Bus domain to run in (default: a fresh `bench-<pid>`). No registry may serve it already.
    #[arg(long)]
    domain: Option<String>,
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
                iterations: args.iterations,
                quick: args.quick,
                only: args.only.clone(),
                json: args.json,
                domain: args.domain.clone(),
            };
            tools::bench::harness::Harness::domain(args.domain.as_deref())
                .and_then(|d| {
                    let slot_domains = bench::slot_series_domains(&options, d.as_str())?;
                    // iceoryx2's files, as the harness's drop removes them.
                    #[cfg(feature = "iceoryx2")]
                    let leftovers = tools::bench::ice::Leftovers::note();
                    tools::interrupted::clean_up_on_stop("bus-bench", d, Vec::new(), move || {
                        for domain in &slot_domains {
                            let _ = domain.remove_all_segments();
                        }
                        #[cfg(feature = "iceoryx2")]
                        drop(leftovers);
                    })
                })
                .and_then(|()| bench::run(&options))
        }
    };
    if let Err(e) = result {
        eprintln!("bus-bench: {e}");
        std::process::exit(1);
    }
}
