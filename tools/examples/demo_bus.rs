//! The bus of docs/debugging.md, to try its `bus-inspect` commands on: `/demo/counter` written
//! every 10 ms, `/demo/status` (a struct with an enum and an option) and `/demo/config` (whose
//! publisher has gone). Needs a running `registry-server` of the domain; runs until
//! interrupted.
//!
//! ```sh
//! cargo run -p tools --example demo_bus -- --domain try &
//! BUS_DOMAIN=try bus-inspect list
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};

#[derive(Parser)]
#[command(about = "Publish the example slots of docs/debugging.md until interrupted")]
struct Args {
    /// Bus domain (the registry-server's --domain).
    #[arg(long, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN)]
    domain: String,
}

#[derive(Serialize, Deserialize)]
enum Mode {
    // In the schema `bus-inspect info` prints; never written here.
    #[allow(dead_code)]
    Idle,
    Moving {
        speed: f64,
    },
}

#[derive(Serialize, Deserialize)]
struct Status {
    name: String,
    joints: Vec<f32>,
    mode: Mode,
    battery: Option<u8>,
}

#[derive(Serialize, Deserialize)]
struct Config {
    max_speed: f64,
    mode: String,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("demo_bus: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
    let domain = bus::Domain::new(&args.domain).map_err(|e| e.to_string())?;
    let bus = bus::Bus::open(domain).map_err(|e| e.to_string())?;
    let bound = Duration::from_secs(10);
    let mut config = bus
        .publish::<Config>("/demo/config")
        .map_err(|e| e.to_string())?;
    config
        .write(&Config {
            max_speed: 1.0,
            mode: "normal".into(),
        })
        .map_err(|e| e.to_string())?;
    config.wait_bound(bound).map_err(|e| e.to_string())?;
    // Its publisher goes: the value stays, its writer shows as gone.
    drop(config);
    let mut status = bus
        .publish::<Status>("/demo/status")
        .map_err(|e| e.to_string())?;
    status
        .write(&Status {
            name: "arm".into(),
            joints: vec![0.5, -1.0],
            mode: Mode::Moving { speed: 0.25 },
            battery: Some(87),
        })
        .map_err(|e| e.to_string())?;
    let mut counter = bus
        .publish_pod::<u64>("/demo/counter")
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    for n in 0u64.. {
        counter.write(&n).map_err(|e| e.to_string())?;
        // Every 10 ms on the clock, not 10 ms after each write.
        let next = start + Duration::from_millis(10 * (n + 1));
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    Ok(())
}
