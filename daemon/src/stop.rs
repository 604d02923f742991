//! What a service does on the signals systemd and a terminal send: SIGTERM (`systemctl stop`)
//! and SIGINT (Ctrl-C) stop it, through the service's own `on_stop`, with a log line saying
//! why; SIGHUP is logged (a warning) and ignored. Only `robot-manager` reloads on SIGHUP (it
//! handles the signal itself); killed by it, another service would count as stopped cleanly
//! for systemd and not be restarted, which a `systemctl kill -s HUP 'baton-*'` meant for the
//! manager did.
//!
//! The signals are blocked and waited for in a thread of their own (`sigwait`): no code runs
//! in signal-handler context, and `on_stop` may log, lock and write to the bus.

use nix::sys::signal::{SigSet, Signal};

/// Blocks SIGTERM, SIGINT and SIGHUP, and starts the thread that waits for them. Call it first
/// in `main`, before any other thread starts: threads inherit the mask, and a thread that
/// does not block them would take the default action (death) for the whole process.
/// `on_stop` runs once, on the first SIGTERM or SIGINT, with the signal's name, on the signal
/// thread (later signals wait: `timeout`, a terminal and systemd's control-group kill may each
/// send one more). It should end the process, or make `main` end it.
pub fn on_stop(on_stop: impl FnOnce(&'static str) + Send + 'static) -> Result<(), String> {
    on_stop_or_hangup(
        Hangup::Ignored("this program has nothing to reload"),
        on_stop,
    )
}

/// What SIGHUP does to a program that takes `on_stop_or_hangup`.
#[derive(Clone, Copy, Debug)]
pub enum Hangup {
    /// It stops the program as SIGTERM does (a program run from a terminal, which closing
    /// sends it).
    Stops,
    /// It is logged, a warning with this reason, and ignored.
    Ignored(&'static str),
}

/// `on_stop`, where SIGHUP does what `hangup` says.
pub fn on_stop_or_hangup(
    hangup: Hangup,
    on_stop: impl FnOnce(&'static str) + Send + 'static,
) -> Result<(), String> {
    let mut set = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(signal);
    }
    set.thread_block()
        .map_err(|e| format!("blocking signals: {e}"))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut on_stop = Some(on_stop);
            while let Ok(signal) = set.wait() {
                if let (Signal::SIGHUP, Hangup::Ignored(why)) = (signal, hangup) {
                    tracing::warn!("SIGHUP ignored: {why}");
                } else if let Some(stop) = on_stop.take() {
                    stop(signal.as_str());
                }
            }
        })
        .map_err(|e| format!("starting the signal thread: {e}"))?;
    Ok(())
}

/// The `on_stop` of a service that keeps nothing in memory that the next start needs (its
/// state is on the bus): says why it stops, and exits with status 0.
pub fn exit_on_stop(service: &'static str) -> impl FnOnce(&'static str) + Send + 'static {
    move |signal| {
        tracing::info!("{service}: stopping on {signal}");
        std::process::exit(0);
    }
}
