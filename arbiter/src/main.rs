//! `arbiter`: one control arbiter process per resource group.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arbiter::process::StopRequest;

use clap::Parser;

#[derive(Parser)]
#[command(
    version = daemon::version(bus::slot::VERSION, None),
    about = "Run one control arbiter: decide, every cycle, which robot controller commands each resource",
    long_about = "Run one control arbiter: decide, every cycle, which robot controller commands \
each resource of one group (an arm, a drive base).\n\n\
It follows the robot manager's priority list on /robot/manager, reads each listed controller's \
block on /robot/controller/<name>, and publishes the coherent command on \
/robot/arbiter/<name>/command and its feedback (owners, outcomes, state) on /robot/arbiter/<name>. \
It decides only when one of those changes or a block's time to live runs out, and re-stamps \
the command every heartbeat_ms, so that a driver can tell a hung arbiter by its command's age.\n\n\
On SIGTERM or SIGINT it sends every resource its safe command, publishes that, and exits.\n\n\
Exit status: 0 when stopped so; 1 for a configuration that is not valid (at start), another \
arbiter of the same name, or a bus failure (its slots made anew under it and the new ones \
not mapped: start it again); 64 for \
a command line that does not parse.\n\n\
Config (TOML):\n  name = \"arm\"\n  heartbeat_ms = 100   # 10 to 60000; 0: never\n  [[resources]]\n  \
name = \"shoulder\"\n  kind = \"position\"   # position | velocity | switch\n  min = -1.5\n  \
max = 1.5\n  safe = \"hold\"       # hold (position) | zero | off | a number within the limits"
)]
struct Args {
    /// Arbiter configuration file (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Check the configuration file and exit (0: valid, with a summary; 1: what is wrong),
    /// touching no bus: to test a file before deploying it.
    #[arg(long)]
    check: bool,
    /// Bus domain.
    #[arg(long, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN,
          value_parser = bus::Domain::parse_arg)]
    domain: bus::Domain,
}

/// How long a stop waits for the arbiter's loop to send the safe commands (it is woken at
/// once, and needs no registry for them). Past that (the loop stuck), the process ends without
/// that last command: its writer then reads gone, which a driver treats as the safe command.
const STOP_GRACE: Duration = Duration::from_secs(2);

fn main() {
    daemon::init_logging("info");
    let args: Args = daemon::parse_args();
    if args.check {
        match arbiter::config::ArbiterConfig::load(&args.config) {
            Ok(config) => {
                println!("{}: valid: {}", args.config.display(), config.summary());
                for caution in &config.cautions {
                    println!("caution: {caution}");
                }
                return;
            }
            Err(e) => daemon::exit_on_error("arbiter", e),
        }
    }
    let stop = Arc::new(StopRequest::default());
    let stopping = Arc::clone(&stop);
    let on_stop = move |signal| {
        tracing::info!("stopping on {signal}: every resource gets its safe command");
        stopping.request();
        std::thread::sleep(STOP_GRACE);
        tracing::warn!(
            "the arbiter did not stop within {STOP_GRACE:?}: stopping without the safe \
             commands; the command's writer now reads gone"
        );
        std::process::exit(1);
    };
    if let Err(e) = daemon::on_stop(on_stop) {
        daemon::exit_on_error("arbiter", e);
    }
    if let Err(e) = run(&args, &stop) {
        daemon::exit_on_error("arbiter", e);
    }
}

fn run(args: &Args, stop: &StopRequest) -> Result<(), String> {
    let config = arbiter::config::ArbiterConfig::load(&args.config).map_err(|e| e.to_string())?;
    for caution in &config.cautions {
        tracing::warn!("{}: {caution}", args.config.display());
    }
    let domain = args.domain.clone();
    let bus = bus::Bus::open(domain).map_err(|e| e.to_string())?;
    tracing::info!(
        "arbiter {} with {} resource(s) on domain '{}'",
        config.name,
        config.resources.len(),
        args.domain
    );
    let health = daemon::Health::new();
    let watched = std::sync::Arc::clone(&health);
    let _watchdog = daemon::start_watchdog(move || watched.is_healthy());
    let mut first = true;
    arbiter::process::run(&bus, &config, &health, stop, |block| {
        if std::mem::take(&mut first) {
            daemon::ready(&format!("arbiter {} running", block.name));
        }
    })
    .map_err(|e| e.to_string())
}
