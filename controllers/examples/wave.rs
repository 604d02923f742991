//! A Baton application in a few lines: it asks for the arm's turret, waves it, and notices when
//! a higher-priority application takes the turret away or gives it back.
//!
//! Usage: wave [SECONDS]    (BUS_DOMAIN selects the bus; default "default")

use std::time::{Duration, Instant};

use controllers::{RobotController, Status};

fn main() {
    // Errors as sentences (`main` returning them would print their Debug form).
    if let Err(e) = run() {
        eprintln!("wave: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let seconds = match std::env::args().nth(1) {
        None => 5.0,
        Some(s) => s
            .parse()
            .ok()
            .filter(|s: &f64| (0.0..=3600.0).contains(s))
            .ok_or("usage: wave [SECONDS], 0 to 3600 (default 5)")?,
    };
    let bus = bus::Bus::from_env()?;
    // Compromising: take whatever part of what we ask for is free.
    let mut wave = RobotController::new(&bus, "wave", Status::Compromising)?;
    // If this loop stops publishing (hangs) for 200 ms, the turret is let go.
    wave.set_publish_deadline(Some(Duration::from_millis(200)));
    let start = Instant::now();
    let mut owned_before = None;
    while start.elapsed().as_secs_f64() < seconds {
        let t = start.elapsed().as_secs_f64();
        wave.set("arm/turret", (2.0 * t).sin())?; // radians; the arbiter clamps to the limits
        wave.publish()?;
        std::thread::sleep(Duration::from_millis(20));
        wave.refresh()?; // pull the arbiters' feedback
        let owned = wave.owns("arm/turret");
        if owned_before != Some(owned) {
            println!("turret {}", if owned { "is mine" } else { "is not mine" });
            owned_before = Some(owned);
        }
    }
    Ok(()) // dropping the controller releases the turret at once
}
