//! `arbiter-bench`: latency of control arbitration across processes, against the bus's own
//! wait-mode one-way latency in the same run. Build with `cargo build --release` first; it
//! starts the `registry-server` and `arbiter` binaries found next to itself.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use tools::arbitration_bench::{arbitration, bus_one_way, echo, Case, Echo, Rig};

#[derive(Parser)]
#[command(
    name = "arbiter-bench",
    version = daemon::version(bus::slot::VERSION, None),
    about = "Measure controller-write to arbiter-command latency (1/8/32 controllers, 1/4 arbiters)",
    long_about = "Measure the latency from a controller's write of its block to the arbiter's \
coherent command being readable (the bus's write stamp of the command), with 1, 8 and 32 \
controllers and 1 and 4 arbiter processes, against the bus's own wait-mode one-way latency \
(a write, a wake in another process, a write back) measured in the same run: once as a block, \
and interleaved with every case (one baseline sample after each case sample), which is what \
each case is compared with. Prints p50, p99, p99.9 and max in microseconds, and each case's \
p50 over its baseline's.\n\n\
Run from a release build: cargo build --release && target/release/arbiter-bench"
)]
struct Args {
    /// Samples per case, 10 to 1,000,000.
    #[arg(long, value_name = "N", default_value_t = 5000,
          value_parser = daemon::whole_number(10, 1_000_000, "a count of samples"),
          allow_negative_numbers = true)]
    iterations: u64,
    /// Print one JSON object per case as well.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    role: Option<Role>,
}

#[derive(Subcommand)]
enum Role {
    /// (internal) the echo process of the baseline.
    #[command(hide = true)]
    Echo {
        #[arg(long)]
        domain: String,
    },
}

fn main() {
    let args: Args = daemon::parse_args();
    let result = match &args.role {
        Some(Role::Echo { domain }) => bus::Domain::new(domain)
            .map_err(|e| e.to_string())
            .and_then(|d| echo(&d)),
        None => {
            // What arbiter-benches killed with SIGKILL left: their registry and arbiters run
            // on, their memory and configs stay.
            tools::interrupted::remove_abandoned_runs("arbbench-");
            tools::arbitration_bench::Rig::domain_and_dir()
                .and_then(|(domain, dir)| {
                    tools::interrupted::clean_up_on_stop("arbiter-bench", domain, vec![dir], || {})
                })
                .and_then(|()| run(&args))
        }
    };
    if let Err(e) = result {
        eprintln!("arbiter-bench: {e}");
        std::process::exit(1);
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn run(args: &Args) -> Result<(), String> {
    // At most 1,000,000 (the parser's range): the cast cannot truncate.
    let iterations = args.iterations as usize;
    let mut rig = Rig::new()?;
    let mut echo = Echo::start(&mut rig)?;
    let baseline = bus_one_way(&mut echo, iterations)?;
    let mut cases: Vec<Case> = Vec::new();
    for arbiters in [1, 4] {
        for controllers in [1, 8, 32] {
            cases.push(arbitration(
                &mut rig,
                &mut echo,
                controllers,
                arbiters,
                iterations,
            )?);
        }
    }
    println!(
        "{:<40} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>10}",
        "case (µs)", "p50", "p99", "p99.9", "max", "base p50", "ratio", "p50 - base"
    );
    let mut verdicts = Vec::new();
    for case in std::iter::once(&baseline).chain(&cases) {
        let s = &case.stats;
        // The baseline row compares with itself; each case with the baseline sampled
        // alongside it.
        let base = case.baseline.as_ref().unwrap_or(&baseline.stats).p50;
        println!(
            "{:<40} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>7.2}x {:>+10.1}",
            case.name,
            us(s.p50),
            us(s.p99),
            us(s.p999),
            us(s.max),
            us(base),
            s.p50 as f64 / base as f64,
            us(s.p50) - us(base)
        );
        if args.json {
            println!(
                "{}",
                serde_json::json!({"case": case.name, "stats": s, "baseline_p50_ns": base, "p50_over_baseline_ns": s.p50 as i64 - base as i64})
            );
        }
        if case.baseline.is_some() {
            verdicts.push((case.name.clone(), us(s.p50) - us(base)));
        }
    }
    println!("\ntarget: p50 <= bus one-way (sampled alongside) + 2 µs");
    for (name, over) in verdicts {
        let verdict = if over <= 2.0 { "met    " } else { "NOT met" };
        println!("{verdict}  {name}: {over:+.1} µs");
    }
    Ok(())
}
