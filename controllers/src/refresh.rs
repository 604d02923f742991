//! Keeping a published controller block fresh: a background thread re-stamps and rewrites the
//! block three times per time to live while the application lives (or, with a publish
//! deadline, while its loop keeps publishing), and feeds the systemd watchdog for as long as it
//! does. The application's own `publish` and this thread share the block through `Shared`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arbiter::clock::since_boot;
use arbiter::protocol::{now_ns, ControllerBlock};
use bus::{BusError, Publication};
use crossbeam_channel::{bounded, Sender};

/// What the refresher shares with the application: the block as last published (the
/// application edits its own staged copy; only `publish` replaces this one).
pub(crate) struct Shared {
    pub(crate) publication: Publication<ControllerBlock>,
    pub(crate) block: ControllerBlock,
    /// Nothing is written (or refreshed) before the application's first `publish`, so the
    /// arbiters never see a half-configured controller.
    pub(crate) published: bool,
    /// When the application last called `publish`.
    pub(crate) last_publish: Instant,
    /// Refresh only while `last_publish` is this recent (`set_publish_deadline`).
    pub(crate) publish_deadline: Option<Duration>,
}

pub(crate) fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The refresh thread of one controller, and the watchdog it feeds.
pub(crate) struct Refresher {
    /// Dropped to stop the thread.
    stop: Option<Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _watchdog: daemon::Watchdog,
}

impl Refresher {
    /// Starts refreshing the block in `shared` (once the application has published it) every
    /// third of `ttl`.
    pub(crate) fn start(shared: &Arc<Mutex<Shared>>, ttl: Duration) -> Result<Refresher, BusError> {
        let (stop, stopped) = bounded::<()>(1);
        // When the block was last refreshed, in nanoseconds on the boot-time clock: the
        // watchdog below compares it with now, which the wall clock set forward or back would
        // falsify (a watchdog that bites a healthy controller, or never bites a hung one).
        let last_refresh = Arc::new(AtomicU64::new(since_boot_ns()));
        let thread = {
            let shared = Arc::clone(shared);
            let last_refresh = Arc::clone(&last_refresh);
            // Refresh three times per time to live, so that one late refresh never expires it.
            let period = ttl / 3;
            std::thread::Builder::new()
                .name("baton-controller-refresh".into())
                .spawn(move || {
                    // Logged when refreshing starts failing and when it works again, not at
                    // every attempt; the same for a missed publish deadline.
                    let mut failing = false;
                    let mut overdue = false;
                    // When this thread last ran, for the gap reported below: on the boot-time
                    // clock, which a wall clock stepped forward does not move and which counts
                    // the time a suspended machine slept.
                    let mut last_turn = since_boot();
                    while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                        stopped.recv_timeout(period)
                    {
                        let now = since_boot();
                        let gap = now.saturating_sub(std::mem::replace(&mut last_turn, now));
                        let mut s = lock(&shared);
                        if !s.published {
                            last_refresh.store(now.as_nanos() as u64, Ordering::Relaxed);
                            continue;
                        }
                        // The application's loop stopped publishing: let the block expire (and,
                        // under systemd, the watchdog bite) rather than keep its last command.
                        let late = s
                            .publish_deadline
                            .is_some_and(|d| s.last_publish.elapsed() > d);
                        if late != overdue {
                            overdue = late;
                            if late && s.block.commands.is_empty() {
                                // Released (or commanding nothing): nothing is lost.
                                tracing::info!(
                                    "controller {}: no publish within its deadline; its block, \
                                     which commands nothing, is no longer refreshed and expires",
                                    s.block.name
                                );
                            } else if late {
                                tracing::warn!(
                                    "controller {}: no publish within its deadline; the block \
                                     is no longer refreshed and expires",
                                    s.block.name
                                );
                            } else {
                                tracing::info!("controller {}: publishing again", s.block.name);
                            }
                        }
                        if late {
                            continue;
                        }
                        let Shared {
                            publication, block, ..
                        } = &mut *s;
                        block.stamp_ns = now_ns();
                        // This thread's turns a time to live apart: the process (or the
                        // computer) was stopped. Its block expired meanwhile, and an
                        // application that only looks at its outcome now would never know
                        // that it lost, then regained, its resources.
                        if gap > ttl {
                            tracing::warn!(
                                "controller {}: not refreshed for {gap:?}, longer than its time \
                                 to live ({ttl:?}; the process was stopped, or not given a CPU in \
                                 time: a time to live this short leaves little room): the arbiters \
                                 counted it absent meanwhile, and what it owned may have gone to \
                                 others",
                                block.name
                            );
                        }
                        match publication.write(block) {
                            Ok(()) => {
                                last_refresh.store(since_boot_ns(), Ordering::Relaxed);
                                if std::mem::take(&mut failing) {
                                    tracing::info!("refreshing the controller block works again");
                                }
                            }
                            Err(e) if !std::mem::replace(&mut failing, true) => {
                                tracing::warn!("refreshing the controller block: {e}");
                            }
                            Err(_) => {}
                        }
                    }
                })
                .map_err(|e| BusError::Io {
                    context: "starting the refresh thread".into(),
                    message: e.to_string(),
                })?
        };
        // Under systemd: ready once the block is out, and the watchdog fed for as long as the
        // refresher keeps the block fresh (until the controller is dropped).
        let refreshed = Arc::clone(&last_refresh);
        let stale_after = 3 * ttl.as_nanos() as u64; // at most an hour: fits
        let watchdog = daemon::start_watchdog(move || {
            since_boot_ns().saturating_sub(refreshed.load(Ordering::Relaxed)) < stale_after
        });
        Ok(Refresher {
            stop: Some(stop),
            thread: Some(thread),
            _watchdog: watchdog,
        })
    }

    /// Stops the thread and waits for it: no refresh is written after this returns.
    pub(crate) fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn since_boot_ns() -> u64 {
    since_boot().as_nanos() as u64
}
