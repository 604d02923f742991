//! The bus of docs/debugging.md, to try its `bus-inspect` commands on (the `demo_bus` example
//! runs it; the guide's test uses it in-process): `/demo/counter` written every 10 ms,
//! `/demo/status` (a struct with an enum and an option) and `/demo/config` (whose publisher
//! has gone).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub enum Mode {
    Idle,
    Moving { speed: f64 },
}

#[derive(Serialize, Deserialize)]
pub struct Status {
    pub name: String,
    pub joints: Vec<f32>,
    pub mode: Mode,
    pub battery: Option<u8>,
}

#[derive(Serialize, Deserialize)]
pub struct Config {
    pub max_speed: f64,
    pub mode: String,
}

/// The running example bus: its slots stay published (and the counter counts) until dropped.
pub struct DemoBus {
    _status: bus::Publication<Status>,
    stop: Arc<AtomicBool>,
    counter: Option<JoinHandle<()>>,
}

/// Publishes the three slots on `bus`, waiting (at most `bound`) for the registry to bind
/// `/demo/config` before its publisher goes.
pub fn start(bus: &bus::Bus, bound: Duration) -> Result<DemoBus, String> {
    let err = |e: bus::BusError| e.to_string();
    let mut config = bus.publish::<Config>("/demo/config").map_err(err)?;
    config
        .write(&Config {
            max_speed: 1.0,
            mode: "normal".into(),
        })
        .map_err(err)?;
    config.wait_bound(bound).map_err(err)?;
    // Its publisher goes: the value stays, its writer shows as gone.
    drop(config);
    let mut status = bus.publish::<Status>("/demo/status").map_err(err)?;
    status
        .write(&Status {
            name: "arm".into(),
            joints: vec![0.5, -1.0],
            mode: Mode::Moving { speed: 0.25 },
            battery: Some(87),
        })
        .map_err(err)?;
    let mut counter = bus.publish_pod::<u64>("/demo/counter").map_err(err)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("demo-counter".into())
        .spawn(move || {
            let start = Instant::now();
            for n in 0u64.. {
                if stopped.load(Ordering::Relaxed) || counter.write(&n).is_err() {
                    return;
                }
                // Every 10 ms on the clock, not 10 ms after each write.
                let next = start + Duration::from_millis(10 * (n + 1));
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        })
        .map_err(|e| format!("starting the counter thread: {e}"))?;
    Ok(DemoBus {
        _status: status,
        stop,
        counter: Some(thread),
    })
}

impl DemoBus {
    /// Runs until the counter stops (a write failed); the example's main loop.
    pub fn wait(mut self) {
        if let Some(t) = self.counter.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DemoBus {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.counter.take() {
            let _ = t.join();
        }
    }
}
