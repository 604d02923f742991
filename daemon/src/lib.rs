//! Plumbing every Baton service shares: logging set-up (`tracing` to stderr, one line per event,
//! `RUST_LOG` overrides the default level), stopping on SIGTERM and SIGINT (`stop`), and systemd
//! notifications through sd_notify: readiness, status, and the watchdog. Every notification is a
//! no-op when the process was not started by systemd (no `NOTIFY_SOCKET`), so the same binaries run
//! by hand, in tests and under systemd.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::time::{clock_gettime, ClockId};
use sd_notify::NotifyState;

mod args;
mod config_file;
mod stop;
pub use args::{decimal_number, exit_usage, parse_args, whole_number, EXIT_USAGE};
pub use config_file::{config_error_text, read_config, MAX_CONFIG_BYTES};
pub use stop::{exit_on_stop, on_stop, on_stop_or_hangup, Hangup};

/// The commit the binaries were built from (12 hex digits), `unknown` outside a git checkout.
/// Changes not committed at build time are not shown.
pub const COMMIT: &str = env!("BATON_COMMIT");

/// What `--version` prints after the program's name: the package version, the commit built and
/// the slot layout version (`bus::slot::VERSION`; a registry adopts only segments of its own
/// layout), and for the registry the network wire version (registries of different ones drop
/// each other's datagrams). Two builds that print the same layout (and wire) versions share a
/// bus.
pub fn version(slot_layout: u32, wire: Option<u8>) -> &'static str {
    let wire = wire.map_or(String::new(), |w| format!(", network wire version {w}"));
    let text = format!(
        "{} (commit {COMMIT}, slot layout version {slot_layout}{wire})",
        env!("CARGO_PKG_VERSION")
    );
    // Once per process (clap asks for it when it builds the command line).
    Box::leak(text.into_boxed_str())
}

/// Logs to stderr at `default_level` unless `RUST_LOG` says otherwise. Colours (ANSI escape
/// codes) only when stderr is a terminal and `NO_COLOR` is not set: the journal and log files
/// get plain text.
pub fn init_logging(default_level: &str) {
    use std::io::IsTerminal;
    let ansi = use_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    tracing_subscriber::fmt()
        .with_writer(|| LossyStderr)
        .with_ansi(ansi)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .init();
}

/// Standard error for logs, where a failed write loses the line and nothing else. A broken
/// stderr (a log pipe whose reader ended, the terminal a service was started from closed) made
/// tracing-subscriber report the failure with `eprintln!`, which panics on the same broken
/// stderr: the thread that logged died (the signal thread, so SIGTERM no longer stopped the
/// service; the network reflector, silently). A log line is never worth a service.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Ends `service` on `error`: its last words as one line on stderr, `service: error`, and exit
/// status 1. A broken stderr loses the line (`eprintln!` would panic, and the exit status say
/// so).
pub fn exit_on_error(service: &str, error: impl std::fmt::Display) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{service}: {error}");
    std::process::exit(1)
}

/// Whether logs may be coloured: on a terminal, unless `NO_COLOR` is set to anything but the
/// empty string (<https://no-color.org>: an empty `NO_COLOR` counts as unset).
fn use_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

fn notify(state: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!("sd_notify: {e}");
    }
}

/// Tells systemd the service is up (Type=notify units wait for this).
pub fn ready(status: &str) {
    notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// Updates the status line `systemctl status` shows.
pub fn status(status: &str) {
    notify(&[NotifyState::Status(status)]);
}

/// How long a unit of work may run before the service counts as hung.
const STUCK_AFTER: Duration = Duration::from_secs(5);

/// Whether a service's main loop is making progress, for the watchdog. The loop calls `begin`
/// when it starts a piece of work (a cycle, a reload) and `end` when done; sleeping between
/// pieces is healthy however long it lasts, so a service that waits for events is never
/// woken just to prove it lives.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    /// Milliseconds since `started` at which the current piece of work began; 0 when idle.
    busy_since_ms: AtomicU64,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            started: Instant::now(),
            busy_since_ms: AtomicU64::new(0),
        }
    }
}

impl Health {
    pub fn new() -> Arc<Health> {
        Arc::new(Health::default())
    }

    /// Milliseconds (never 0) on `CLOCK_MONOTONIC_COARSE`. `begin` runs first thing after a
    /// wake-up, on the latency path of an arbiter's cycle: the precise clocks read the TSC
    /// behind an `lfence`, which stalls until every pending load of the just-woken process has
    /// completed, while the coarse clock is a plain read of the kernel's last tick (a few
    /// milliseconds of resolution; the watchdog counts seconds).
    fn now_ms(&self) -> u64 {
        match clock_gettime(ClockId::CLOCK_MONOTONIC_COARSE) {
            Ok(t) => t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000 + 1,
            Err(_) => self.started.elapsed().as_millis() as u64 + 1,
        }
    }

    pub fn begin(&self) {
        self.busy_since_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    pub fn end(&self) {
        self.busy_since_ms.store(0, Ordering::Relaxed);
    }

    /// `false` when one piece of work has run longer than `STUCK_AFTER`.
    pub fn is_healthy(&self) -> bool {
        self.healthy_at(self.now_ms())
    }

    fn healthy_at(&self, now_ms: u64) -> bool {
        let since = self.busy_since_ms.load(Ordering::Relaxed);
        since == 0 || now_ms.saturating_sub(since) < STUCK_AFTER.as_millis() as u64
    }
}

/// If the unit sets `WatchdogSec=`, pings systemd at half that interval for as long as
/// `healthy()` holds; when it stops holding, the pings stop and systemd restarts the service.
/// The pings go on until the returned guard is dropped (a process that drops it must feed the
/// watchdog some other way, or systemd restarts it).
pub fn start_watchdog(healthy: impl Fn() -> bool + Send + 'static) -> Watchdog {
    let stop = Arc::new(AtomicBool::new(false));
    let Some(interval) = sd_notify::watchdog_enabled() else {
        return Watchdog { stop };
    };
    let period = interval / 2;
    let stopped = Arc::clone(&stop);
    let spawned = std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                if healthy() {
                    notify(&[NotifyState::Watchdog]);
                } else {
                    tracing::error!("main loop stuck: no longer answering the systemd watchdog");
                }
                std::thread::sleep(period);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the watchdog thread: {e}");
    }
    Watchdog { stop }
}

/// Keeps the watchdog thread of [`start_watchdog`] pinging; dropping it ends the thread.
#[must_use = "dropping the guard stops the watchdog pings"]
pub struct Watchdog {
    stop: Arc<AtomicBool>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some(OsStr::new(""))));
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(!use_colour(false, None));
        assert!(!use_colour(false, Some(OsStr::new("1"))));
    }

    #[test]
    fn idle_is_healthy_and_a_long_piece_of_work_is_not() {
        let h = Health::default();
        let stuck = STUCK_AFTER.as_millis() as u64;
        assert!(h.healthy_at(10 * stuck), "idle, however long");
        h.begin();
        let began = h.busy_since_ms.load(Ordering::Relaxed);
        assert!(h.healthy_at(began + stuck - 1));
        assert!(!h.healthy_at(began + stuck));
        h.end();
        assert!(h.healthy_at(began + 10 * stuck));
    }
}
