//! The bus of docs/debugging.md, to try its `bus-inspect` commands on (`tools::demo_bus`).
//! Needs a running `registry-server` of the domain; runs until interrupted.
//!
//! ```sh
//! cargo run -p tools --example demo_bus -- --domain try &
//! BUS_DOMAIN=try bus-inspect list
//! ```

use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Publish the example slots of docs/debugging.md until interrupted")]
struct Args {
    /// Bus domain (the registry-server's --domain).
    #[arg(long, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN)]
    domain: String,
}

fn main() {
    let args: Args = daemon::parse_args();
    let run = || -> Result<(), String> {
        let domain = bus::Domain::new(&args.domain).map_err(|e| e.to_string())?;
        let bus = bus::Bus::open(domain).map_err(|e| e.to_string())?;
        tools::demo_bus::start(&bus, Duration::from_secs(10))?.wait();
        Err("the counter stopped: its write failed".into())
    };
    if let Err(e) = run() {
        eprintln!("demo_bus: {e}");
        std::process::exit(1);
    }
}
